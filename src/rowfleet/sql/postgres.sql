-- rowfleet's queries for PostgreSQL (psycopg placeholders). Time is the database's clock,
-- rowfleet_now(%(now)s), where %(now)s is NULL but in tests. The same names exist for every dialect.

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer          PRIMARY KEY,
    name       text             NOT NULL,
    applied_at double precision NOT NULL
);

-- name: migrations_exists
SELECT count(*) AS n FROM information_schema.tables
WHERE table_schema = current_schema() AND table_name = 'schema_migrations';

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM schema_migrations;

-- name: migration_record
INSERT INTO schema_migrations (version, name, applied_at) VALUES (%(version)s, %(name)s, rowfleet_now(%(now)s));

-- name: job_insert
INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts,
                  idempotency_key, created_at, updated_at)
VALUES (%(project)s, %(queue)s, %(task)s, %(args)s, %(priority)s, %(run_next)s, coalesce(%(run_at)s::double precision, rowfleet_now(%(now)s) + %(delay)s),
        %(max_attempts)s, %(key)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s))
ON CONFLICT (project, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *;

-- name: job_insert_many
-- One statement for a whole batch: %(args_list)s is a JSON array of each job's args, already
-- encoded as JSON text, so the rows are bound once instead of once per job.
INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts,
                  created_at, updated_at)
SELECT %(project)s, %(queue)s, %(task)s, batch.value, %(priority)s, %(run_next)s,
       coalesce(%(run_at)s::double precision, rowfleet_now(%(now)s) + %(delay)s),
       %(max_attempts)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s)
FROM jsonb_array_elements_text(%(args_list)s::jsonb) WITH ORDINALITY AS batch(value, n)
ORDER BY batch.n;

-- name: job_by_key
SELECT * FROM jobs WHERE project = %(project)s AND idempotency_key = %(key)s;

-- name: job_get
SELECT * FROM jobs WHERE id = %(id)s AND project = %(project)s;

-- name: job_holder
SELECT state, lease_token, claimed_by FROM jobs WHERE id = %(id)s;

-- name: job_claim
UPDATE jobs
SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
    claimed_by = %(holder)s, lease_expires_at = rowfleet_now(%(now)s) + %(lease)s, started_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = (SELECT id FROM jobs
            WHERE state = 'queued' AND project = %(project)s AND queue = %(queue)s AND run_at <= rowfleet_now(%(now)s)
            ORDER BY run_next DESC, priority, run_at, id
            LIMIT 1
            FOR UPDATE SKIP LOCKED)
RETURNING *;

-- name: job_due
SELECT 1 AS due FROM jobs
WHERE state = 'queued' AND project = %(project)s AND queue = %(queue)s AND run_at <= rowfleet_now(%(now)s)
LIMIT 1;

-- name: job_renew
UPDATE jobs SET lease_expires_at = rowfleet_now(%(now)s) + %(lease)s, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING lease_expires_at;

-- name: job_finish
UPDATE jobs
SET state = %(state)s, result = %(result)s, error = %(error)s, traceback = %(traceback)s,
    lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: job_requeue
UPDATE jobs
SET state = 'queued', error = %(error)s, traceback = %(traceback)s, run_at = rowfleet_now(%(now)s) + %(delay)s,
    lease_expires_at = NULL, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: jobs_lapsed
SELECT id, lease_token, claimed_by, attempts, max_attempts FROM jobs
WHERE state = 'running' AND lease_expires_at < rowfleet_now(%(now)s)
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: job_reclaim
-- run_at is left as it was: the lapsed job keeps its place ahead of fresh work.
UPDATE jobs
SET state = 'queued', error = %(error)s, lease_expires_at = NULL, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s AND lease_expires_at < rowfleet_now(%(now)s)
RETURNING id;

-- name: job_fail_lapsed
UPDATE jobs
SET state = 'failed', error = %(error)s, lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s AND lease_expires_at < rowfleet_now(%(now)s)
RETURNING id;

-- name: job_cancel
UPDATE jobs SET state = 'cancelled', error = %(reason)s, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND project = %(project)s AND state = 'queued'
RETURNING *;

-- name: job_revive
UPDATE jobs
SET state = 'queued', run_at = rowfleet_now(%(now)s), max_attempts = greatest(max_attempts, attempts + 1),
    error = NULL, traceback = NULL, finished_at = NULL, lease_expires_at = NULL, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND project = %(project)s AND state IN ('failed', 'cancelled')
RETURNING *;

-- name: jobs_list
SELECT * FROM jobs
WHERE project = %(project)s
  AND (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_counts
SELECT project, queue, state, count(*) AS n FROM jobs
GROUP BY project, queue, state
ORDER BY project, queue, state;

-- name: event_insert
INSERT INTO job_events (job_id, at, kind, detail) VALUES (%(job_id)s, rowfleet_now(%(now)s), %(kind)s, %(detail)s);

-- name: events_of_job
SELECT * FROM job_events WHERE job_id = %(job_id)s ORDER BY id;

-- name: worker_beat
INSERT INTO workers (worker_id, project, host, queue, pid, current_job, started_at, last_seen)
VALUES (%(worker_id)s, %(project)s, %(host)s, %(queue)s, %(pid)s, %(current_job)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s))
ON CONFLICT (worker_id) DO UPDATE
SET current_job = excluded.current_job, last_seen = excluded.last_seen, flagged_dead_at = NULL;

-- name: worker_stop
UPDATE workers SET stopped_at = rowfleet_now(%(now)s), current_job = NULL, last_seen = rowfleet_now(%(now)s)
WHERE worker_id = %(worker_id)s;

-- name: workers_list
SELECT * FROM workers
WHERE stopped_at IS NULL OR stopped_at >= %(since)s
ORDER BY project, host, queue, pid;

-- name: workers_flag_stale
UPDATE workers SET flagged_dead_at = rowfleet_now(%(now)s)
WHERE stopped_at IS NULL AND flagged_dead_at IS NULL AND last_seen < rowfleet_now(%(now)s) - %(stale_after)s
RETURNING *;

-- name: prune_events
DELETE FROM job_events
WHERE job_id IN (SELECT id FROM jobs
                 WHERE finished_at < rowfleet_now(%(now)s) - %(retention)s AND state IN ('completed', 'failed', 'cancelled')
                 ORDER BY finished_at LIMIT %(limit)s);

-- name: prune_jobs
DELETE FROM jobs
WHERE id IN (SELECT id FROM jobs
             WHERE finished_at < rowfleet_now(%(now)s) - %(retention)s AND state IN ('completed', 'failed', 'cancelled')
             ORDER BY finished_at LIMIT %(limit)s);

-- name: prune_workers
DELETE FROM workers WHERE last_seen < rowfleet_now(%(now)s) - %(retention)s AND (stopped_at IS NOT NULL OR flagged_dead_at IS NOT NULL);

-- name: job_finish_and_claim
-- A busy worker's whole turn in one statement (one round trip, atomic in autocommit): write
-- the finished job's terminal state and event, then claim the next job of the queue and
-- log that claim, but only if the finish still held the lease.
WITH finished AS (
    UPDATE jobs
    SET state = %(state)s, result = %(result)s, error = %(error)s, traceback = %(traceback)s,
        lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
    WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
    RETURNING id
), finished_event AS (
    INSERT INTO job_events (job_id, at, kind, detail)
    SELECT id, rowfleet_now(%(now)s), %(kind)s, %(detail)s FROM finished
), claimed AS (
    UPDATE jobs
    SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
        claimed_by = %(holder)s, lease_expires_at = rowfleet_now(%(now)s) + %(lease)s,
        started_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
    WHERE id = (SELECT id FROM jobs
                WHERE state = 'queued' AND project = %(project)s AND queue = %(queue)s
                  AND run_at <= rowfleet_now(%(now)s)
                ORDER BY run_next DESC, priority, run_at, id
                LIMIT 1
                FOR UPDATE SKIP LOCKED)
      AND EXISTS (SELECT 1 FROM finished)
    RETURNING *
), claimed_event AS (
    INSERT INTO job_events (job_id, at, kind, detail)
    SELECT id, rowfleet_now(%(now)s), 'claimed',
           json_build_object('token', lease_token, 'holder', claimed_by, 'attempt', attempts)::text
    FROM claimed
)
SELECT (SELECT count(*) FROM finished) AS finished, claimed.*
FROM (SELECT 1) AS turn LEFT JOIN claimed ON true;

-- name: job_claim_logged
-- An idle worker's claim and its event in one statement (one round trip, atomic in autocommit).
WITH claimed AS (
    UPDATE jobs
    SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
        claimed_by = %(holder)s, lease_expires_at = rowfleet_now(%(now)s) + %(lease)s,
        started_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
    WHERE id = (SELECT id FROM jobs
                WHERE state = 'queued' AND project = %(project)s AND queue = %(queue)s
                  AND run_at <= rowfleet_now(%(now)s)
                ORDER BY run_next DESC, priority, run_at, id
                LIMIT 1
                FOR UPDATE SKIP LOCKED)
    RETURNING *
), claimed_event AS (
    INSERT INTO job_events (job_id, at, kind, detail)
    SELECT id, rowfleet_now(%(now)s), 'claimed',
           json_build_object('token', lease_token, 'holder', claimed_by, 'attempt', attempts)::text
    FROM claimed
)
SELECT * FROM claimed;

-- name: database_time
-- The database's clock (or a test's), as every statement here reads it.
SELECT coalesce(%(now)s::double precision, extract(epoch FROM now())::double precision) AS now;

-- name: listen_jobs
-- Idle workers wait on this channel; the jobs_notify_queued trigger sends the queue's name.
LISTEN rowfleet_jobs;
