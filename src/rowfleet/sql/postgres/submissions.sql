-- rowfleet's queries for PostgreSQL: submissions, the durable queue of answers to input nodes.

-- fragment: submission_open
-- A project's submissions not yet handled, as the partial index submissions_open names them.
project = %(project)s AND state IN ('pending', 'processing')

-- name: submission_insert
-- An answer for an orchestrator to apply: pending (the submissions_notify trigger wakes it).
INSERT INTO submissions (project, run_id, node_id, value, submitted_by, created_at)
VALUES (%(project)s, %(run_id)s, %(node_id)s, %(value)s, %(submitted_by)s, rowfleet_now(%(now)s))
RETURNING id;

-- name: submission_record
-- An answer applied at once, in the transaction that applied it: processed already.
INSERT INTO submissions (project, run_id, node_id, value, state, submitted_by, created_at, processed_at)
VALUES (%(project)s, %(run_id)s, %(node_id)s, %(value)s, 'processed', %(submitted_by)s, rowfleet_now(%(now)s),
        rowfleet_now(%(now)s));

-- name: submissions_waiting
SELECT 1 AS waiting FROM submissions WHERE {{submission_open}} AND state = 'pending' LIMIT 1;

-- name: submissions_claim
-- The oldest pending submissions, held by %(holder)s from now on; those another
-- orchestrator is claiming are passed by.
UPDATE submissions SET state = 'processing', processing_by = %(holder)s, processing_at = rowfleet_now(%(now)s)
WHERE id IN (SELECT id FROM submissions WHERE {{submission_open}} AND state = 'pending'
             ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING id, run_id, node_id, value;

-- name: submission_processed
-- Guarded: only while %(holder)s still holds it (a reclaim may have handed it on).
UPDATE submissions SET state = 'processed', error = NULL, processed_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'processing' AND processing_by = %(holder)s
RETURNING id;

-- name: submission_failed
UPDATE submissions SET state = 'failed', error = %(error)s, processed_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'processing' AND processing_by = %(holder)s
RETURNING id;

-- name: submissions_reclaim
-- Back to pending: submissions held longer than %(grace)s, and any whose processing_at is
-- no time within the grace of now (NULL, NaN, an infinity, the far future: plain SQL's),
-- which no wait would ever make stale.
UPDATE submissions SET state = 'pending', processing_by = NULL, processing_at = NULL
WHERE {{submission_open}} AND state = 'processing'
  AND (processing_at IS NULL
       OR NOT processing_at BETWEEN rowfleet_now(%(now)s) - %(grace)s AND rowfleet_now(%(now)s) + %(grace)s)
RETURNING id;

-- name: prune_submissions
DELETE FROM submissions
WHERE id IN (SELECT id FROM submissions
             WHERE state IN ('processed', 'failed') AND processed_at < rowfleet_now(%(now)s) - %(retention)s
             LIMIT %(limit)s);

-- name: list_submissions
-- The newest first, of one run or all, in one state or any.
SELECT * FROM submissions
WHERE project = %(project)s AND (%(run_id)s::bigint IS NULL OR run_id = %(run_id)s)
  AND (%(state)s::text IS NULL OR state = %(state)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: get_submission
SELECT * FROM submissions WHERE id = %(id)s AND project = %(project)s;
