-- rowfleet's queries for SQLite. Every statement takes :now from the writer's clock.
-- Each block is one statement; the same names exist for every dialect.

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at REAL    NOT NULL
);

-- name: migrations_exists
SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations';

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM schema_migrations;

-- name: migration_record
INSERT INTO schema_migrations (version, name, applied_at) VALUES (:version, :name, :now);

-- name: job_insert
INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts,
                  idempotency_key, created_at, updated_at)
VALUES (:project, :queue, :task, :args, :priority, :run_next, coalesce(:run_at, :now + :delay),
        :max_attempts, :key, :now, :now)
ON CONFLICT (project, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *;

-- name: job_insert_many
-- One statement for a whole batch: :args_list is a JSON array of each job's args, already
-- encoded as JSON text, so the rows are bound once instead of once per job.
INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts,
                  created_at, updated_at)
SELECT :project, :queue, :task, value, :priority, :run_next, coalesce(:run_at, :now + :delay),
       :max_attempts, :now, :now
FROM json_each(:args_list)
ORDER BY key;

-- name: job_by_key
SELECT * FROM jobs WHERE project = :project AND idempotency_key = :key;

-- name: job_get
SELECT * FROM jobs WHERE id = :id AND project = :project;

-- name: job_holder
SELECT state, lease_token, claimed_by FROM jobs WHERE id = :id;

-- name: job_claim
UPDATE jobs
SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
    claimed_by = :holder, lease_expires_at = :now + :lease, started_at = :now, updated_at = :now
WHERE id = (SELECT id FROM jobs
            WHERE state = 'queued' AND project = :project AND queue = :queue AND run_at <= :now
            ORDER BY run_next DESC, priority, run_at, id
            LIMIT 1)
RETURNING *;

-- name: job_due
SELECT 1 AS due FROM jobs
WHERE state = 'queued' AND project = :project AND queue = :queue AND run_at <= :now
LIMIT 1;

-- name: job_renew
UPDATE jobs SET lease_expires_at = :now + :lease, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING lease_expires_at;

-- name: job_finish
UPDATE jobs
SET state = :state, result = :result, error = :error, traceback = :traceback,
    lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- name: job_requeue
UPDATE jobs
SET state = 'queued', error = :error, traceback = :traceback, run_at = :now + :delay,
    lease_expires_at = NULL, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- name: jobs_lapsed
SELECT id, lease_token, claimed_by, attempts, max_attempts FROM jobs
WHERE state = 'running' AND lease_expires_at < :now
ORDER BY lease_expires_at
LIMIT :limit;

-- name: job_reclaim
-- run_at is left as it was: the lapsed job keeps its place ahead of fresh work.
UPDATE jobs
SET state = 'queued', error = :error, lease_expires_at = NULL, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token AND lease_expires_at < :now
RETURNING id;

-- name: job_fail_lapsed
UPDATE jobs
SET state = 'failed', error = :error, lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token AND lease_expires_at < :now
RETURNING id;

-- name: job_cancel
UPDATE jobs SET state = 'cancelled', error = :reason, finished_at = :now, updated_at = :now
WHERE id = :id AND project = :project AND state = 'queued'
RETURNING *;

-- name: job_revive
UPDATE jobs
SET state = 'queued', run_at = :now, max_attempts = max(max_attempts, attempts + 1),
    error = NULL, traceback = NULL, finished_at = NULL, lease_expires_at = NULL, updated_at = :now
WHERE id = :id AND project = :project AND state IN ('failed', 'cancelled')
RETURNING *;

-- name: jobs_list
SELECT * FROM jobs
WHERE project = :project
  AND (:state IS NULL OR state = :state)
  AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC
LIMIT :limit;

-- name: job_counts
SELECT project, queue, state, count(*) AS n FROM jobs
GROUP BY project, queue, state
ORDER BY project, queue, state;

-- name: event_insert
INSERT INTO job_events (job_id, at, kind, detail) VALUES (:job_id, :now, :kind, :detail);

-- name: events_of_job
SELECT * FROM job_events WHERE job_id = :job_id ORDER BY id;

-- name: worker_beat
INSERT INTO workers (worker_id, project, host, queue, pid, current_job, started_at, last_seen)
VALUES (:worker_id, :project, :host, :queue, :pid, :current_job, :now, :now)
ON CONFLICT (worker_id) DO UPDATE
SET current_job = excluded.current_job, last_seen = excluded.last_seen, flagged_dead_at = NULL;

-- name: worker_stop
UPDATE workers SET stopped_at = :now, current_job = NULL, last_seen = :now
WHERE worker_id = :worker_id;

-- name: workers_list
SELECT * FROM workers
WHERE stopped_at IS NULL OR stopped_at >= :since
ORDER BY project, host, queue, pid;

-- name: workers_flag_stale
UPDATE workers SET flagged_dead_at = :now
WHERE stopped_at IS NULL AND flagged_dead_at IS NULL AND last_seen < :now - :stale_after
RETURNING *;

-- name: prune_events
DELETE FROM job_events
WHERE job_id IN (SELECT id FROM jobs
                 WHERE finished_at < :now - :retention AND state IN ('completed', 'failed', 'cancelled')
                 ORDER BY finished_at LIMIT :limit);

-- name: prune_jobs
DELETE FROM jobs
WHERE id IN (SELECT id FROM jobs
             WHERE finished_at < :now - :retention AND state IN ('completed', 'failed', 'cancelled')
             ORDER BY finished_at LIMIT :limit);

-- name: prune_workers
DELETE FROM workers WHERE last_seen < :now - :retention AND (stopped_at IS NOT NULL OR flagged_dead_at IS NOT NULL);
