-- rowfleet's queries for PostgreSQL: workflow runs, their nodes and the outbox (dispatch events).

-- name: start_run
INSERT INTO runs (project, name, definition, args, created_at, updated_at)
VALUES (%(project)s, %(name)s, %(definition)s, %(args)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s))
RETURNING *;

-- name: run_node_insert
INSERT INTO run_nodes (run_id, node_id, updated_at) VALUES (%(run_id)s, %(node_id)s, rowfleet_now(%(now)s));

-- name: get_run
SELECT * FROM runs WHERE id = %(id)s AND project = %(project)s;

-- name: run_lock
-- The run's row, locked for the rest of the transaction so that changes to one run are
-- applied one at a time (two orchestrators draining events of one run take turns here).
SELECT * FROM runs WHERE id = %(id)s FOR UPDATE;

-- name: run_state_shared
-- The run's state, kept from changing until this transaction ends.
SELECT state FROM runs WHERE id = %(id)s FOR SHARE;

-- name: list_runs
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

-- name: run_node_cancel
-- A pending node, or one awaiting input, of a run that ended failed or cancelled. Touches no
-- other column: the row may hold what plain SQL wrote, shown as stored.
UPDATE run_nodes SET state = 'cancelled', result = NULL, error = %(error)s, updated_at = rowfleet_now(%(now)s)
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
SELECT jobs.id, jobs.node_id, jobs.node_item, jobs.state, jobs.result, jobs.error
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

-- name: reconcile_runs
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

-- name: dispatch_events
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

-- name: search_runs
-- A page of runs, newest first, of one project or all.
SELECT * FROM runs
WHERE id < %(before)s
  AND (%(project)s::text IS NULL OR project = %(project)s)
  AND (%(state)s::text IS NULL OR state = %(state)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: run_project
SELECT project FROM runs WHERE id = %(id)s;
