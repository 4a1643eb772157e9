-- rowfleet schema version 6: delayed jobs out of the claim's way.

-- 1 while a queued job's run_at was in the future when it was written (a delay, a retry
-- backoff). The claim index holds only the other queued jobs, so a claim never steps over
-- a backlog of delayed ones; a claim's store promotes those that have fallen due (back to
-- 0) at least once per poll. Every reader still sees such a job as queued. An integer, as
-- run_next is, so that both dialects share the claim's SQL fragments.
ALTER TABLE jobs ADD COLUMN delayed integer NOT NULL DEFAULT 0;

-- An upgraded database is right at once: its waiting jobs are delayed as of now.
UPDATE jobs SET delayed = 1 WHERE state = 'queued' AND run_at > rowfleet_now(NULL);

-- Serves the claim; partial, so neither finished nor delayed jobs slow the hot path.
DROP INDEX jobs_claim;
CREATE INDEX jobs_claim ON jobs (project, queue, run_next DESC, priority, run_at, id)
    WHERE state = 'queued' AND delayed = 0;

-- Serves promotion and "is a delayed job due?": the delayed jobs of a queue, soonest first.
CREATE INDEX jobs_delayed ON jobs (project, queue, run_at) WHERE state = 'queued' AND delayed = 1;
