-- rowfleet schema version 19: unique-while-active jobs (enqueue with unique= or debounce=). A
-- job enqueued so carries its duplicate key: its idempotency key when it has one, else its
-- task and args in one digest. While it waits (or runs, for unique="active"), an enqueue of
-- a duplicate returns it instead of writing another. The index holds only such jobs while
-- they wait or run, so every other job's writes pass it by.
ALTER TABLE jobs ADD COLUMN unique_key text;
CREATE INDEX jobs_unique ON jobs (project, queue, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'running');
