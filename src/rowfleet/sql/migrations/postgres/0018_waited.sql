-- rowfleet schema version 18: a mark on a job somebody waits for (rowfleet.wait, `rowfleet
-- wait`), which makes its end a NOTIFY on rowfleet_done (the job's id) to the waiters'
-- LISTEN. Only a marked job notifies: a NOTIFY serializes the commits that send one, and
-- every other job's finish pays nothing.
ALTER TABLE jobs ADD COLUMN waited integer NOT NULL DEFAULT 0;

CREATE FUNCTION rowfleet_notify_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rowfleet_done', NEW.id::text);
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify_done AFTER UPDATE OF state ON jobs
    FOR EACH ROW WHEN (NEW.waited = 1 AND NEW.state IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION rowfleet_notify_done();
