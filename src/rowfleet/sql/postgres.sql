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

-- name: schema_tables
-- Names every table of the current schema and reads no row: fails naming a table that is gone.
SELECT 1 AS present FROM jobs, job_events, workers, worker_controls, runs, run_nodes, dispatch_events,
    schedules, schedule_slots, orchestrators WHERE 1 = 0;

-- name: migration_record
INSERT INTO schema_migrations (version, name, applied_at) VALUES (%(version)s, %(name)s, rowfleet_now(%(now)s));

-- name: savepoint_begin
-- A composite write inside a caller's open transaction runs in this savepoint, so a failure
-- undoes only our statements. A fixed name: savepoints of one name nest, innermost first.
SAVEPOINT rowfleet_write;

-- name: savepoint_release
RELEASE SAVEPOINT rowfleet_write;

-- name: savepoint_rollback
-- Leaves the savepoint in place, empty; savepoint_release then ends it.
ROLLBACK TO SAVEPOINT rowfleet_write;

-- name: job_insert
INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts,
                  idempotency_key, created_at, updated_at, run_id, node_id, node_generation,
                  timeout, required_model)
VALUES (%(project)s, %(queue)s, %(task)s, %(args)s, %(priority)s, %(run_next)s, coalesce(%(run_at)s::double precision, rowfleet_now(%(now)s) + %(delay)s),
        %(max_attempts)s, %(key)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s), %(run_id)s, %(node_id)s,
        %(node_generation)s, %(timeout)s, %(model)s)
ON CONFLICT (project, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *;

-- name: job_insert_many
-- One statement for a whole batch: %(args_list)s is a JSON array of each job's args, already
-- encoded as JSON text, so the rows are bound once instead of once per job. A map node's
-- items are numbered by their place in the array.
INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts,
                  created_at, updated_at, run_id, node_id, node_item, node_generation,
                  timeout, required_model)
SELECT %(project)s, %(queue)s, %(task)s, batch.value, %(priority)s, %(run_next)s,
       coalesce(%(run_at)s::double precision, rowfleet_now(%(now)s) + %(delay)s),
       %(max_attempts)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s), %(run_id)s::bigint, %(node_id)s::text,
       CASE WHEN %(run_id)s::bigint IS NOT NULL THEN batch.n - 1 END, %(node_generation)s::integer,
       %(timeout)s::double precision, %(model)s::text
FROM jsonb_array_elements_text(%(args_list)s::jsonb) WITH ORDINALITY AS batch(value, n)
ORDER BY batch.n;

-- name: job_by_key
SELECT * FROM jobs WHERE project = %(project)s AND idempotency_key = %(key)s;

-- name: job_get
SELECT * FROM jobs WHERE id = %(id)s AND project = %(project)s;

-- name: job_holder
SELECT state, lease_token, claimed_by FROM jobs WHERE id = %(id)s;

-- fragment: claim_candidates
-- The jobs a claim may take: queued and due, in its project's queue. Every claim query and
-- job_due include this, so "is anything due?" and "take it" cannot disagree.
state = 'queued' AND project = %(project)s AND queue = %(queue)s AND run_at <= rowfleet_now(%(now)s)

-- fragment: claim_order
-- Which candidate a claim takes first; the jobs_claim index is in this order.
ORDER BY run_next DESC, priority, run_at, id

-- fragment: claimed_detail
-- The claimed event's detail, built from the claimed row inside the statement that claims
-- it (its token and attempt exist only there). The same keys as Python's
-- rowfleet.store.base.claimed_detail, which the other dialect uses; tests/test_claim.py
-- compares them.
json_build_object('token', lease_token, 'holder', claimed_by, 'attempt', attempts)::text

-- name: job_claim
UPDATE jobs
SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
    claimed_by = %(holder)s, lease_expires_at = rowfleet_now(%(now)s) + %(lease)s, started_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = (SELECT id FROM jobs
            WHERE {{claim_candidates}}
            {{claim_order}}
            LIMIT 1
            FOR UPDATE SKIP LOCKED)
RETURNING *;

-- name: job_due
SELECT 1 AS due FROM jobs
WHERE {{claim_candidates}}
LIMIT 1;

-- name: job_renew
-- Also tells the holder, at no extra cost, whether an operator asked it to stop the job.
UPDATE jobs SET lease_expires_at = rowfleet_now(%(now)s) + %(lease)s, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING lease_expires_at, cancel_requested_at, cancel_reason;

-- name: job_finish
UPDATE jobs
SET state = %(state)s, result = %(result)s, error = %(error)s, traceback = %(traceback)s,
    lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: job_requeue
UPDATE jobs
SET state = 'queued', error = %(error)s, traceback = %(traceback)s, run_at = rowfleet_now(%(now)s) + %(delay)s,
    lease_expires_at = NULL, claimed_by = NULL, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: jobs_lapsed
SELECT id, project, lease_token, claimed_by, attempts, max_attempts, run_id, cancel_reason, cancel_requested_at
FROM jobs
WHERE state = 'running' AND lease_expires_at < rowfleet_now(%(now)s)
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: job_reclaim
-- run_at is left as it was: the lapsed job keeps its place ahead of fresh work.
UPDATE jobs
SET state = 'queued', error = %(error)s, lease_expires_at = NULL, claimed_by = NULL, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s AND lease_expires_at < rowfleet_now(%(now)s)
RETURNING id;

-- name: job_fail_lapsed
-- %(state)s is failed, or cancelled for a job that was not to run again (its run ended, or
-- an operator asked for it to be cancelled).
UPDATE jobs
SET state = %(state)s, error = %(error)s, lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s AND lease_expires_at < rowfleet_now(%(now)s)
RETURNING id;

-- name: job_cancel
UPDATE jobs SET state = 'cancelled', error = %(reason)s, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND project = %(project)s AND state = 'queued'
RETURNING *;

-- name: job_cancel_request
-- Asks the worker holding a running job to stop it; the first request's time and reason stay.
UPDATE jobs SET cancel_requested_at = rowfleet_now(%(now)s), cancel_reason = %(reason)s,
    updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND project = %(project)s AND state = 'running' AND cancel_requested_at IS NULL
RETURNING *;

-- name: job_prioritize
UPDATE jobs SET run_next = 1, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND project = %(project)s AND state = 'queued' AND run_next = 0
RETURNING *;

-- name: job_revive
UPDATE jobs
SET state = 'queued', run_at = rowfleet_now(%(now)s), max_attempts = greatest(max_attempts, attempts + 1),
    error = NULL, traceback = NULL, finished_at = NULL, lease_expires_at = NULL, claimed_by = NULL, updated_at = rowfleet_now(%(now)s),
    cancel_requested_at = NULL, cancel_reason = NULL
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
INSERT INTO workers (worker_id, project, host, queue, pid, current_job, state, heartbeat, lease, started_at, last_seen)
VALUES (%(worker_id)s, %(project)s, %(host)s, %(queue)s, %(pid)s, %(current_job)s, %(state)s, %(heartbeat)s, %(lease)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s))
ON CONFLICT (worker_id) DO UPDATE
SET current_job = excluded.current_job, state = excluded.state, heartbeat = excluded.heartbeat,
    lease = excluded.lease, last_seen = excluded.last_seen,
    flagged_dead_at = NULL;

-- name: worker_stop
UPDATE workers SET stopped_at = rowfleet_now(%(now)s), current_job = NULL, last_seen = rowfleet_now(%(now)s)
WHERE worker_id = %(worker_id)s;

-- name: workers_list
SELECT * FROM workers
-- Live workers (however long their cadence), and any row seen since :since: a stopped,
-- dead or silent worker stays listed for a while, then leaves the default listings.
WHERE last_seen >= %(since)s
   OR (stopped_at IS NULL AND flagged_dead_at IS NULL AND last_seen >= rowfleet_now(%(now)s) - %(missed_beats)s * heartbeat)
ORDER BY project, host, queue, pid;

-- name: workers_flag_stale
-- Judged by each worker's own cadence: a worker beating every 40 s is not late at 30.
-- A row locked by a heartbeat that froze before its commit is skipped, not waited for:
-- one frozen process must not hold up the whole sweep. The next sweep sees it.
UPDATE workers SET flagged_dead_at = rowfleet_now(%(now)s)
WHERE worker_id IN (SELECT worker_id FROM workers
                    WHERE stopped_at IS NULL AND flagged_dead_at IS NULL
                      AND last_seen < rowfleet_now(%(now)s) - %(missed_beats)s * heartbeat
                    FOR UPDATE SKIP LOCKED)
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
-- the finished job's terminal state and event (and a workflow node's dispatch event), then
-- claim the next job of the queue and log that claim, but only if the finish still held
-- the lease.
WITH finished AS (
    UPDATE jobs
    SET state = %(state)s, result = %(result)s, error = %(error)s, traceback = %(traceback)s,
        lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
    WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
    RETURNING id, project, run_id, node_id
), finished_event AS (
    INSERT INTO job_events (job_id, at, kind, detail)
    SELECT id, rowfleet_now(%(now)s), %(kind)s, %(detail)s FROM finished
), finished_dispatch AS (
    INSERT INTO dispatch_events (project, run_id, node_id, job_id, kind, created_at)
    SELECT project, run_id, node_id, id, 'job_finished', rowfleet_now(%(now)s) FROM finished
    WHERE run_id IS NOT NULL
), claimed AS (
    UPDATE jobs
    SET state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
        claimed_by = %(holder)s, lease_expires_at = rowfleet_now(%(now)s) + %(lease)s,
        started_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
    WHERE id = (SELECT id FROM jobs
                WHERE {{claim_candidates}}
                {{claim_order}}
                LIMIT 1
                FOR UPDATE SKIP LOCKED)
      AND EXISTS (SELECT 1 FROM finished)
    RETURNING *
), claimed_event AS (
    INSERT INTO job_events (job_id, at, kind, detail)
    SELECT id, rowfleet_now(%(now)s), 'claimed', {{claimed_detail}}
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
                WHERE {{claim_candidates}}
                {{claim_order}}
                LIMIT 1
                FOR UPDATE SKIP LOCKED)
    RETURNING *
), claimed_event AS (
    INSERT INTO job_events (job_id, at, kind, detail)
    SELECT id, rowfleet_now(%(now)s), 'claimed', {{claimed_detail}}
    FROM claimed
)
SELECT * FROM claimed;

-- name: database_time
-- The database's clock (or a test's), as every statement here reads it.
SELECT coalesce(%(now)s::double precision, extract(epoch FROM now())::double precision) AS now;

-- name: listen_jobs
-- Idle workers wait on this channel; the jobs_notify_queued trigger sends the queue's name.
LISTEN rowfleet_jobs;

-- name: run_insert
INSERT INTO runs (project, name, definition, args, created_at, updated_at)
VALUES (%(project)s, %(name)s, %(definition)s, %(args)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s))
RETURNING *;

-- name: run_node_insert
INSERT INTO run_nodes (run_id, node_id, updated_at) VALUES (%(run_id)s, %(node_id)s, rowfleet_now(%(now)s));

-- name: run_get
SELECT * FROM runs WHERE id = %(id)s AND project = %(project)s;

-- name: run_lock
-- The run's row, locked for the rest of the transaction so that changes to one run are
-- applied one at a time (two orchestrators draining events of one run take turns here).
SELECT * FROM runs WHERE id = %(id)s FOR UPDATE;

-- name: run_state_shared
-- The run's state, kept from changing until this transaction ends.
SELECT state FROM runs WHERE id = %(id)s FOR SHARE;

-- name: runs_list
SELECT * FROM runs
WHERE project = %(project)s AND (%(state)s::text IS NULL OR state = %(state)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: run_set_state
UPDATE runs
SET state = %(state)s, error = %(error)s, updated_at = rowfleet_now(%(now)s),
    finished_at = CASE WHEN %(state)s::text IN ('completed', 'failed', 'cancelled') THEN rowfleet_now(%(now)s) END
WHERE id = %(id)s;

-- name: run_nodes_of
SELECT * FROM run_nodes WHERE run_id = %(run_id)s;

-- name: run_node_set
UPDATE run_nodes SET state = %(state)s, result = %(result)s, error = %(error)s, items = %(items)s, updated_at = rowfleet_now(%(now)s)
WHERE run_id = %(run_id)s AND node_id = %(node_id)s;

-- name: run_node_reset
UPDATE run_nodes
SET state = 'pending', generation = generation + 1, items = NULL, result = NULL, error = NULL, updated_at = rowfleet_now(%(now)s)
WHERE run_id = %(run_id)s AND node_id = %(node_id)s;

-- name: run_node_submit
UPDATE run_nodes SET state = 'completed', result = %(result)s, error = NULL, updated_at = rowfleet_now(%(now)s)
WHERE run_id = %(run_id)s AND node_id = %(node_id)s AND state = 'awaiting_input'
RETURNING node_id;

-- name: run_queued_node_jobs
-- The current jobs of the run's queued nodes (older generations are history).
SELECT jobs.node_id, jobs.node_item, jobs.state, jobs.result, jobs.error
FROM jobs JOIN run_nodes ON run_nodes.run_id = jobs.run_id AND run_nodes.node_id = jobs.node_id
                        AND run_nodes.generation = jobs.node_generation
WHERE jobs.run_id = %(run_id)s AND run_nodes.state = 'queued';

-- name: run_jobs
SELECT id, node_id, node_item, node_generation, state, attempts FROM jobs WHERE run_id = %(run_id)s ORDER BY id;

-- name: run_jobs_cancel
UPDATE jobs SET state = 'cancelled', error = %(reason)s, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE run_id = %(run_id)s AND state = 'queued'
RETURNING id;

-- name: run_jobs_running
SELECT count(*) AS n FROM jobs WHERE run_id = %(run_id)s AND state = 'running';

-- name: runs_stranded
-- Unfinished runs that have nothing that would move them on: no queued or
-- running job, no event waiting to be drained, and no node waiting for input.
SELECT id FROM runs
WHERE project = %(project)s AND state IN ('running', 'awaiting_input') AND updated_at < rowfleet_now(%(now)s) - %(grace)s
  AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.run_id = runs.id AND jobs.state IN ('queued', 'running'))
  AND NOT EXISTS (SELECT 1 FROM dispatch_events AS e
                  WHERE e.run_id = runs.id AND e.processed_at IS NULL AND e.poisoned_at IS NULL)
  AND NOT EXISTS (SELECT 1 FROM run_nodes AS n WHERE n.run_id = runs.id AND n.state = 'awaiting_input')
LIMIT %(limit)s;

-- name: dispatch_insert
INSERT INTO dispatch_events (project, run_id, node_id, job_id, kind, created_at)
VALUES (%(project)s, %(run_id)s, %(node_id)s, %(job_id)s, %(kind)s, rowfleet_now(%(now)s));

-- name: dispatch_waiting
-- An event whose drain failed waits for its next attempt.
SELECT 1 AS waiting FROM dispatch_events
WHERE project = %(project)s AND processed_at IS NULL AND poisoned_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= rowfleet_now(%(now)s))
LIMIT 1;

-- name: dispatch_next
SELECT * FROM dispatch_events
WHERE project = %(project)s AND processed_at IS NULL AND poisoned_at IS NULL AND id > %(after)s
  AND (next_attempt_at IS NULL OR next_attempt_at <= rowfleet_now(%(now)s))
ORDER BY id
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: dispatch_absorb
-- Every pending event of a run, answered by the one walk that follows. Events another
-- drainer holds are skipped (waiting for them could deadlock: it waits for our run lock);
-- it walks the run again after us.
UPDATE dispatch_events SET processed_at = rowfleet_now(%(now)s)
WHERE id IN (SELECT id FROM dispatch_events
             WHERE run_id = %(run_id)s AND processed_at IS NULL AND poisoned_at IS NULL
             FOR UPDATE SKIP LOCKED);

-- name: dispatch_failed
UPDATE dispatch_events SET attempts = attempts + 1, last_error = %(error)s,
    next_attempt_at = rowfleet_now(%(now)s) + %(delay)s
WHERE id = %(id)s AND processed_at IS NULL AND poisoned_at IS NULL
RETURNING *;

-- name: dispatch_poison
UPDATE dispatch_events SET poisoned_at = rowfleet_now(%(now)s) WHERE id = %(id)s;

-- name: dispatch_of_run
SELECT * FROM dispatch_events WHERE run_id = %(run_id)s ORDER BY id;

-- name: prune_dispatch
DELETE FROM dispatch_events
WHERE id IN (SELECT id FROM dispatch_events
             WHERE processed_at < rowfleet_now(%(now)s) - %(retention)s
                OR run_id IN (SELECT id FROM runs WHERE finished_at < rowfleet_now(%(now)s) - %(retention)s)
             LIMIT %(limit)s);

-- name: prune_run_nodes
DELETE FROM run_nodes
WHERE run_id IN (SELECT id FROM runs WHERE finished_at < rowfleet_now(%(now)s) - %(retention)s ORDER BY finished_at LIMIT %(limit)s);

-- name: prune_runs
DELETE FROM runs
WHERE id IN (SELECT id FROM runs WHERE finished_at < rowfleet_now(%(now)s) - %(retention)s ORDER BY finished_at LIMIT %(limit)s)
  AND NOT EXISTS (SELECT 1 FROM run_nodes WHERE run_nodes.run_id = runs.id);

-- name: listen_dispatch
-- Orchestrators wait on this channel; the dispatch_notify trigger sends the project.
LISTEN rowfleet_dispatch;

-- name: control_set
INSERT INTO worker_controls (project, host, queue, desired, policy, changed_by, changed_at)
VALUES (%(project)s, %(host)s, %(queue)s, %(desired)s, %(policy)s, %(changed_by)s, rowfleet_now(%(now)s))
ON CONFLICT (project, host, queue) DO UPDATE
SET desired = excluded.desired, policy = excluded.policy, changed_by = excluded.changed_by,
    changed_at = excluded.changed_at
RETURNING *;

-- name: controls_for
-- Every row that applies to the workers of (project, host, queue), wildcards included.
SELECT * FROM worker_controls
WHERE host IN (%(host)s, '*') AND project IN (%(project)s, '*') AND queue IN (%(queue)s, '*');

-- name: controls_list
SELECT * FROM worker_controls ORDER BY project, host, queue;

-- name: listen_control
-- Workers wait on this channel for their switch; the control_notify trigger sends the host.
LISTEN rowfleet_control;

-- name: job_progress
UPDATE jobs SET progress = %(progress)s, progress_message = %(message)s, progress_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: job_watchdog_mark
-- A watchdog fault spends a watchdog retry; an operator stop gives back the attempt.
UPDATE jobs SET watchdog_retries = watchdog_retries + %(spent)s, attempts = attempts - %(refund)s, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: job_hand_back
-- Back to the queue at once, keeping its run_at: it goes ahead of fresh work again.
UPDATE jobs
SET state = 'queued', error = %(error)s, lease_expires_at = NULL, claimed_by = NULL, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: jobs_of_silent_worker
-- The running jobs a worker claimed in its lifetime: since its row was made (its first
-- heartbeat comes before its first claim), and before a newer worker with the same
-- host:pid appeared (pids are reused). Rows locked by a frozen renewal are left to their lease.
SELECT id, project, lease_token, claimed_by, attempts, max_attempts, run_id, cancel_reason, cancel_requested_at
FROM jobs
WHERE state = 'running' AND claimed_by = %(holder)s AND started_at >= %(since)s
  AND NOT EXISTS (SELECT 1 FROM workers AS newer
                  WHERE newer.host = %(host)s AND newer.pid = %(pid)s AND newer.started_at > %(since)s
                    AND newer.started_at <= jobs.started_at)
FOR UPDATE SKIP LOCKED;

-- name: job_orphan_fail
-- %(state)s as in job_fail_lapsed.
UPDATE jobs
SET state = %(state)s, error = %(error)s, lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: worker_exited
UPDATE workers SET exit_code = %(code)s, stopped_at = coalesce(stopped_at, rowfleet_now(%(now)s)), current_job = NULL
WHERE worker_id = (SELECT worker_id FROM workers WHERE host = %(host)s AND pid = %(pid)s
                   ORDER BY started_at DESC LIMIT 1)
RETURNING worker_id, host, pid, started_at;

-- name: workers_flagged_on_host
SELECT pid FROM workers
WHERE host = %(host)s AND flagged_dead_at IS NOT NULL AND stopped_at IS NULL;

-- Periodic schedules: a slot fires once however many schedulers race for it.

-- name: schedule_hold
-- The schedule's row, made on first use and locked for the rest of the transaction, so
-- schedulers firing the same schedule take turns and each reads the newest slot fired
-- (ON CONFLICT DO UPDATE waits for a concurrent holder, then sees its commit).
INSERT INTO schedules (project, name, last_slot, updated_at) VALUES (%(project)s, %(name)s, NULL, rowfleet_now(%(now)s))
ON CONFLICT (project, name) DO UPDATE SET updated_at = excluded.updated_at
RETURNING last_slot;

-- name: schedule_slot_insert
-- No row back: another scheduler fired this slot first.
INSERT INTO schedule_slots (project, name, slot, fired_at, fired_by)
VALUES (%(project)s, %(name)s, %(slot)s, rowfleet_now(%(now)s), %(fired_by)s)
ON CONFLICT (project, name, slot) DO NOTHING
RETURNING slot;

-- name: schedule_slot_set_job
UPDATE schedule_slots SET job_id = %(job_id)s WHERE project = %(project)s AND name = %(name)s AND slot = %(slot)s;

-- name: schedule_advance
UPDATE schedules SET last_slot = greatest(last_slot, %(slot)s), updated_at = rowfleet_now(%(now)s)
WHERE project = %(project)s AND name = %(name)s;

-- name: schedules_last_slots
SELECT name, last_slot, updated_at FROM schedules WHERE project = %(project)s ORDER BY name;

-- name: schedule_slots_list
SELECT name, slot, job_id, fired_at, fired_by FROM schedule_slots
WHERE project = %(project)s AND (%(name)s::text IS NULL OR name = %(name)s)
ORDER BY slot DESC, name
LIMIT %(limit)s;

-- name: prune_schedule_slots
-- The record of old slots; each schedule's newest slot stays in schedules.last_slot.
DELETE FROM schedule_slots
WHERE (project, name, slot) IN (SELECT project, name, slot FROM schedule_slots
                                WHERE fired_at < rowfleet_now(%(now)s) - %(retention)s
                                ORDER BY fired_at LIMIT %(limit)s);

-- Orchestrators: each beats once per sweep, so status can say whether a project is served.

-- name: orchestrator_beat
INSERT INTO orchestrators (orchestrator_id, project, host, pid, sweep_interval, started_at, last_seen)
VALUES (%(orchestrator_id)s, %(project)s, %(host)s, %(pid)s, %(sweep_interval)s, rowfleet_now(%(now)s),
        rowfleet_now(%(now)s))
ON CONFLICT (orchestrator_id) DO UPDATE
SET last_seen = excluded.last_seen, sweep_interval = excluded.sweep_interval, stopped_at = NULL;

-- name: orchestrator_stop
UPDATE orchestrators SET stopped_at = rowfleet_now(%(now)s), last_seen = rowfleet_now(%(now)s)
WHERE orchestrator_id = %(orchestrator_id)s;

-- name: project_services
-- Per project with jobs, an orchestrator or outbox events: its live orchestrators (judged
-- by each one's own sweep interval) and the outbox events waiting to be drained.
SELECT project,
       (SELECT count(*) FROM orchestrators AS o
        WHERE o.project = p.project AND o.stopped_at IS NULL
          AND o.last_seen >= rowfleet_now(%(now)s) - %(missed_beats)s * o.sweep_interval) AS orchestrators,
       (SELECT count(*) FROM dispatch_events AS e
        WHERE e.project = p.project AND e.processed_at IS NULL AND e.poisoned_at IS NULL) AS outbox_waiting,
       (SELECT min(created_at) FROM dispatch_events AS e
        WHERE e.project = p.project AND e.processed_at IS NULL AND e.poisoned_at IS NULL) AS outbox_oldest
FROM (SELECT DISTINCT project FROM jobs
      UNION SELECT project FROM orchestrators WHERE stopped_at IS NULL
      UNION SELECT project FROM dispatch_events WHERE processed_at IS NULL AND poisoned_at IS NULL) AS p
ORDER BY project;

-- name: prune_orchestrators
DELETE FROM orchestrators WHERE last_seen < rowfleet_now(%(now)s) - %(retention)s;
