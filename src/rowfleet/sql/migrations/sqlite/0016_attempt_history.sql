-- rowfleet schema version 16: a job's happy path writes no event rows. A claim and a
-- completion are history on the job's own row (started_at, claimed_by, lease_token,
-- attempts, finished_at); Store.events gives them as the "claimed" and "completed" events
-- they were. When an attempt's fields are about to be written over (the next claim, a
-- re-queue, a hand-back, a refunded attempt) or a completed job leaves that state, this
-- trigger writes the attempt's events from the old row, so that every attempt stays in
-- job_events. An event already there for the same moment (a database that logged every
-- claim and completion before this version) is not written twice. A field that plain SQL
-- filled with a blob (which JSON cannot hold) is written as null, so that the update over it
-- is never refused.
CREATE TRIGGER jobs_attempt_history
AFTER UPDATE OF started_at, lease_token, claimed_by, attempts, state ON jobs
WHEN (OLD.started_at IS NOT NULL
      AND (NEW.started_at IS NOT OLD.started_at OR NEW.lease_token IS NOT OLD.lease_token
           OR NEW.claimed_by IS NOT OLD.claimed_by OR NEW.attempts < OLD.attempts))
  OR (OLD.state = 'completed' AND NEW.state IS NOT 'completed')
BEGIN
    INSERT INTO job_events (job_id, at, kind, detail)
    SELECT OLD.id, OLD.started_at, 'claimed',
           json_object('token', CASE WHEN typeof(OLD.lease_token) = 'blob' THEN NULL ELSE OLD.lease_token END,
                       'holder', CASE WHEN typeof(OLD.claimed_by) = 'blob' THEN NULL ELSE OLD.claimed_by END,
                       'attempt', CASE WHEN typeof(OLD.attempts) = 'blob' THEN NULL ELSE OLD.attempts END)
    WHERE OLD.started_at IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM job_events
                      WHERE job_id = OLD.id AND kind = 'claimed' AND at = OLD.started_at);
    INSERT INTO job_events (job_id, at, kind, detail)
    SELECT OLD.id, OLD.finished_at, 'completed',
           json_object('token', CASE WHEN typeof(OLD.lease_token) = 'blob' THEN NULL ELSE OLD.lease_token END,
                       'attempt', CASE WHEN typeof(OLD.attempts) = 'blob' THEN NULL ELSE OLD.attempts END)
    WHERE OLD.state = 'completed' AND OLD.finished_at IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM job_events
                      WHERE job_id = OLD.id AND kind = 'completed' AND at = OLD.finished_at);
END;
