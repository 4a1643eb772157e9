-- rowfleet's queries for SQLite: workflow runs, their nodes and the outbox (dispatch events).

-- name: start_run
INSERT INTO runs (project, name, definition, args, created_at, updated_at)
VALUES (:project, :name, :definition, :args, :now, :now)
RETURNING *;

-- name: run_node_insert
INSERT INTO run_nodes (run_id, node_id, updated_at) VALUES (:run_id, :node_id, :now);

-- name: get_run
SELECT * FROM runs WHERE id = :id AND project = :project;

-- name: run_lock
-- The run's row, locked for the rest of the transaction so that changes to one run are
-- applied one at a time (BEGIN IMMEDIATE already holds the write lock here).
SELECT * FROM runs WHERE id = :id;

-- name: run_state_shared
-- The run's state, kept from changing until this transaction ends.
SELECT state FROM runs WHERE id = :id;

-- name: list_runs
SELECT * FROM runs
WHERE project = :project AND (:state IS NULL OR state = :state)
ORDER BY id DESC
LIMIT :limit;

-- name: run_set_state
UPDATE runs
SET state = :state, error = :error, updated_at = :now,
    finished_at = CASE WHEN :state IN ('completed', 'failed', 'cancelled') THEN :now END
WHERE id = :id;

-- name: run_nodes_of
SELECT * FROM run_nodes WHERE run_id = :run_id;

-- name: run_node_set
UPDATE run_nodes SET state = :state, result = :result, error = :error, items = :items, updated_at = :now
WHERE run_id = :run_id AND node_id = :node_id;

-- name: run_node_cancel
-- A pending node, or one awaiting input, of a run that ended failed or cancelled. Touches no
-- other column: the row may hold what plain SQL wrote, shown as stored.
UPDATE run_nodes SET state = 'cancelled', result = NULL, error = :error, updated_at = :now
WHERE run_id = :run_id AND node_id = :node_id;

-- name: run_node_reset
UPDATE run_nodes
SET state = 'pending', generation = generation + 1, items = NULL, result = NULL, error = NULL, updated_at = :now
WHERE run_id = :run_id AND node_id = :node_id;

-- name: run_node_submit
UPDATE run_nodes SET state = 'completed', result = :result, error = NULL, updated_at = :now
WHERE run_id = :run_id AND node_id = :node_id AND state = 'awaiting_input'
RETURNING node_id;

-- name: run_queued_node_jobs
-- The current jobs of the run's queued nodes (older generations are history).
SELECT jobs.id, jobs.node_id, jobs.node_item, jobs.state, jobs.result, jobs.error
FROM jobs JOIN run_nodes ON run_nodes.run_id = jobs.run_id AND run_nodes.node_id = jobs.node_id
                        AND run_nodes.generation = jobs.node_generation
WHERE jobs.run_id = :run_id AND run_nodes.state = 'queued';

-- name: run_jobs
SELECT id, node_id, node_item, node_generation, state, attempts FROM jobs WHERE run_id = :run_id ORDER BY id;

-- name: run_jobs_cancel
UPDATE jobs SET state = 'cancelled', error = :reason, finished_at = :now, updated_at = :now
WHERE run_id = :run_id AND state = 'queued'
RETURNING id;

-- name: run_jobs_running
SELECT count(*) AS n FROM jobs WHERE run_id = :run_id AND state = 'running';

-- name: reconcile_runs
-- Unfinished runs that have nothing that would move them on: no queued or
-- running job, no event waiting to be drained, and no node waiting for input.
SELECT id FROM runs
WHERE project = :project AND state IN ('running', 'awaiting_input') AND updated_at < :now - :grace
  AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.run_id = runs.id AND jobs.state IN ('queued', 'running'))
  AND NOT EXISTS (SELECT 1 FROM dispatch_events AS e
                  WHERE e.run_id = runs.id AND e.processed_at IS NULL AND e.poisoned_at IS NULL)
  AND NOT EXISTS (SELECT 1 FROM run_nodes AS n WHERE n.run_id = runs.id AND n.state = 'awaiting_input')
LIMIT :limit;

-- name: dispatch_insert
INSERT INTO dispatch_events (project, run_id, node_id, job_id, kind, created_at)
VALUES (:project, :run_id, :node_id, :job_id, :kind, :now);

-- name: dispatch_waiting
-- An event whose drain failed waits for its next attempt.
SELECT 1 AS waiting FROM dispatch_events
WHERE project = :project AND processed_at IS NULL AND poisoned_at IS NULL
  AND (next_attempt_at IS NULL OR next_attempt_at <= :now)
LIMIT 1;

-- name: dispatch_next
SELECT * FROM dispatch_events
WHERE project = :project AND processed_at IS NULL AND poisoned_at IS NULL AND id > :after
  AND (next_attempt_at IS NULL OR next_attempt_at <= :now)
ORDER BY id
LIMIT 1;

-- name: dispatch_absorb
-- Every pending event of a run, answered by the one walk that follows.
UPDATE dispatch_events SET processed_at = :now
WHERE run_id = :run_id AND processed_at IS NULL AND poisoned_at IS NULL;

-- name: dispatch_failed
UPDATE dispatch_events SET attempts = attempts + 1, last_error = :error, next_attempt_at = :now + :delay
WHERE id = :id AND processed_at IS NULL AND poisoned_at IS NULL
RETURNING *;

-- name: dispatch_poison
UPDATE dispatch_events SET poisoned_at = :now WHERE id = :id;

-- name: dispatch_events
SELECT * FROM dispatch_events WHERE run_id = :run_id ORDER BY id;

-- name: prune_dispatch
DELETE FROM dispatch_events
WHERE id IN (SELECT id FROM dispatch_events
             WHERE processed_at < :now - :retention
                OR run_id IN (SELECT id FROM runs WHERE finished_at < :now - :retention)
             LIMIT :limit);

-- name: prune_run_nodes
DELETE FROM run_nodes
WHERE run_id IN (SELECT id FROM runs WHERE finished_at < :now - :retention ORDER BY finished_at LIMIT :limit);

-- name: prune_runs
DELETE FROM runs
WHERE id IN (SELECT id FROM runs WHERE finished_at < :now - :retention ORDER BY finished_at LIMIT :limit)
  AND NOT EXISTS (SELECT 1 FROM run_nodes WHERE run_nodes.run_id = runs.id);

-- name: search_runs
-- A page of runs, newest first, of one project or all.
SELECT * FROM runs
WHERE id < :before
  AND (:project IS NULL OR project = :project)
  AND (:state IS NULL OR state = :state)
ORDER BY id DESC
LIMIT :limit;

-- name: run_project
SELECT project FROM runs WHERE id = :id;

-- name: bell_dispatched
-- The orchestrator's doorbell for a dispatch event of its project (the stand-in for LISTEN
-- rowfleet_dispatch); a TEMP trigger, as bell_requeued is.
CREATE TEMP TRIGGER IF NOT EXISTS rowfleet_bell_dispatched AFTER INSERT ON main.dispatch_events
BEGIN
    SELECT rowfleet_dispatched(NEW.project);
END;
