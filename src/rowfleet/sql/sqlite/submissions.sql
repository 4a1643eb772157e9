-- rowfleet's queries for SQLite: submissions, the durable queue of answers to input nodes.

-- fragment: submission_open
-- A project's submissions not yet handled. The state is named as the partial index
-- submissions_open names it, so SQLite sees that the index covers the query.
project = :project AND state IN ('pending', 'processing')

-- name: submission_insert
-- An answer for an orchestrator to apply: pending.
INSERT INTO submissions (project, run_id, node_id, value, submitted_by, created_at)
VALUES (:project, :run_id, :node_id, :value, :submitted_by, :now)
RETURNING id;

-- name: submission_record
-- An answer applied at once, in the transaction that applied it: processed already.
INSERT INTO submissions (project, run_id, node_id, value, state, submitted_by, created_at, processed_at)
VALUES (:project, :run_id, :node_id, :value, 'processed', :submitted_by, :now, :now);

-- name: submissions_waiting
SELECT 1 AS waiting FROM submissions WHERE {{submission_open}} AND state = 'pending' LIMIT 1;

-- name: submissions_claim
-- The oldest pending submissions, held by :holder from now on.
UPDATE submissions SET state = 'processing', processing_by = :holder, processing_at = :now
WHERE id IN (SELECT id FROM submissions WHERE {{submission_open}} AND state = 'pending' ORDER BY id LIMIT :limit)
RETURNING id, run_id, node_id, value;

-- name: submission_processed
-- Guarded: only while :holder still holds it (a reclaim may have handed it on).
UPDATE submissions SET state = 'processed', error = NULL, processed_at = :now
WHERE id = :id AND state = 'processing' AND processing_by = :holder
RETURNING id;

-- name: submission_failed
UPDATE submissions SET state = 'failed', error = :error, processed_at = :now
WHERE id = :id AND state = 'processing' AND processing_by = :holder
RETURNING id;

-- name: submissions_reclaim
-- Back to pending: submissions held longer than :grace, and any whose processing_at is no
-- time within :grace of now (NULL, text, an infinity, the far future: plain SQL's), which
-- no wait would ever make stale.
UPDATE submissions SET state = 'pending', processing_by = NULL, processing_at = NULL
WHERE {{submission_open}} AND state = 'processing'
  AND (processing_at IS NULL OR NOT processing_at BETWEEN :now - :grace AND :now + :grace)
RETURNING id;

-- name: prune_submissions
DELETE FROM submissions
WHERE id IN (SELECT id FROM submissions
             WHERE state IN ('processed', 'failed') AND processed_at < :now - :retention LIMIT :limit);

-- name: list_submissions
-- The newest first, of one run or all, in one state or any.
SELECT * FROM submissions
WHERE project = :project AND (:run_id IS NULL OR run_id = :run_id) AND (:state IS NULL OR state = :state)
ORDER BY id DESC
LIMIT :limit;

-- name: get_submission
SELECT * FROM submissions WHERE id = :id AND project = :project;

-- name: bell_submitted
-- The orchestrator's doorbell (its dispatch bell) for a pending submission written through
-- rowfleet; a TEMP trigger, as bell_dispatched is. Another program's INSERT rings no bell:
-- the orchestrator finds it at its safety poll.
CREATE TEMP TRIGGER IF NOT EXISTS rowfleet_bell_submitted AFTER INSERT ON main.submissions
WHEN NEW.state = 'pending'
BEGIN
    SELECT rowfleet_dispatched(NEW.project);
END;
