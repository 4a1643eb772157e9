-- rowfleet's queries for PostgreSQL: the fleet: worker heartbeats, operators' switches, orchestrators.

-- name: worker_beat
-- A GPU worker's advert (models to flags) comes with each beat; a worker without a GPU writes NULLs.
INSERT INTO workers (worker_id, project, host, queue, pid, current_job, state, heartbeat, lease, started_at, last_seen,
                     models, gpu_index, vram_total_mb, vram_free_mb, warm_model, warm_since, loading, lane, host_priority, sidecar, queues,
                     boot_id, pid_started)
VALUES (%(worker_id)s, %(project)s, %(host)s, %(queue)s, %(pid)s, %(current_job)s, %(state)s, %(heartbeat)s, %(lease)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s),
        %(models)s, %(gpu_index)s, %(vram_total_mb)s, %(vram_free_mb)s, %(warm_model)s, %(warm_since)s, %(loading)s, %(lane)s, %(host_priority)s, %(sidecar)s, %(queues)s,
        %(boot_id)s, %(pid_started)s)
ON CONFLICT (worker_id) DO UPDATE
SET current_job = excluded.current_job, state = excluded.state, heartbeat = excluded.heartbeat,
    lease = excluded.lease, last_seen = excluded.last_seen,
    flagged_dead_at = NULL,
    models = excluded.models, gpu_index = excluded.gpu_index, vram_total_mb = excluded.vram_total_mb, vram_free_mb = excluded.vram_free_mb, warm_model = excluded.warm_model, warm_since = excluded.warm_since, loading = excluded.loading, lane = excluded.lane, host_priority = excluded.host_priority,
    sidecar = excluded.sidecar, queues = excluded.queues;

-- name: host_workers_holding
-- The workers of one host and project that never said they stopped and whose holder name
-- still holds running jobs: what a worker starting on that host checks are gone (a row of
-- a reused pid is one more row; the jobs of each lifetime are told apart by their start).
SELECT w.worker_id, w.host, w.pid, w.started_at, w.boot_id, w.pid_started FROM workers AS w
WHERE w.host = %(host)s AND w.project = %(project)s AND w.stopped_at IS NULL
  AND EXISTS (SELECT 1 FROM jobs
              WHERE jobs.project = w.project AND jobs.state = 'running' AND jobs.claimed_by = w.host || ':' || w.pid::text)
ORDER BY w.started_at;

-- name: worker_gone
-- A worker found gone by its host's next worker: listed as dead from now on.
UPDATE workers SET flagged_dead_at = coalesce(flagged_dead_at, rowfleet_now(%(now)s)), current_job = NULL
WHERE worker_id = %(worker_id)s;

-- name: worker_stopped
UPDATE workers SET stopped_at = rowfleet_now(%(now)s), current_job = NULL, last_seen = rowfleet_now(%(now)s)
WHERE worker_id = %(worker_id)s;

-- fragment: worker_listed
-- Live workers (however long their cadence), and any row seen since :since: a stopped,
-- dead or silent worker stays listed for a while, then leaves the default listings.
(w.last_seen >= %(since)s
 OR (w.stopped_at IS NULL AND w.flagged_dead_at IS NULL
     AND w.last_seen >= rowfleet_now(%(now)s) - %(missed_beats)s * w.heartbeat))

-- name: workers
SELECT w.* FROM workers AS w
WHERE {{worker_listed}}
ORDER BY w.project, w.host, w.queue, w.pid;

-- name: flag_stale_workers
-- Judged by each worker's own cadence: a worker beating every 40 s is not late at 30.
-- A row locked by a heartbeat that froze before its commit is skipped, not waited for:
-- one frozen process must not hold up the whole sweep. The next sweep sees it.
UPDATE workers SET flagged_dead_at = rowfleet_now(%(now)s)
WHERE worker_id IN (SELECT worker_id FROM workers
                    WHERE stopped_at IS NULL AND flagged_dead_at IS NULL
                      AND last_seen < rowfleet_now(%(now)s) - %(missed_beats)s * heartbeat
                    FOR UPDATE SKIP LOCKED)
RETURNING *;

-- name: heartbeat_ages
-- Every live worker's heartbeat, its cadence and the clock the dead-worker sweep judges it
-- by (one row, of NULLs, when no worker is live).
SELECT n.now, w.project, w.heartbeat, w.last_seen
FROM (SELECT rowfleet_now(%(now)s) AS now) AS n
LEFT JOIN workers AS w ON w.stopped_at IS NULL AND w.flagged_dead_at IS NULL;

-- name: prune_workers
DELETE FROM workers WHERE last_seen < rowfleet_now(%(now)s) - %(retention)s AND (stopped_at IS NOT NULL OR flagged_dead_at IS NOT NULL);

-- name: set_switch
INSERT INTO worker_controls (project, host, queue, desired, policy, reason, changed_by, changed_at)
VALUES (%(project)s, %(host)s, %(queue)s, %(desired)s, %(policy)s, %(reason)s, %(changed_by)s, rowfleet_now(%(now)s))
ON CONFLICT (project, host, queue) DO UPDATE
SET desired = excluded.desired, policy = excluded.policy, reason = excluded.reason, changed_by = excluded.changed_by,
    changed_at = excluded.changed_at
RETURNING *;

-- name: switches_in_force
-- Every row that applies to the workers of (project, host), of any queue, wildcards included.
SELECT * FROM worker_controls
WHERE host IN (%(host)s, '*') AND project IN (%(project)s, '*');

-- name: switches
SELECT * FROM worker_controls ORDER BY project, host, queue;

-- name: listen_control
-- Workers wait on this channel for their switch; the control_notify trigger sends the host.
LISTEN rowfleet_control;

-- name: worker_exited
UPDATE workers SET exit_code = %(code)s, stopped_at = coalesce(stopped_at, rowfleet_now(%(now)s)), current_job = NULL
WHERE worker_id = (SELECT worker_id FROM workers WHERE host = %(host)s AND pid = %(pid)s
                   ORDER BY started_at DESC LIMIT 1)
RETURNING worker_id, host, pid, started_at;

-- name: flagged_workers
SELECT pid FROM workers
WHERE host = %(host)s AND flagged_dead_at IS NOT NULL AND stopped_at IS NULL;

-- Orchestrators: one row per process, beaten once per sweep.

-- name: orchestrator_beat
INSERT INTO orchestrators (orchestrator_id, project, host, pid, sweep_interval, started_at, last_seen)
VALUES (%(orchestrator_id)s, %(project)s, %(host)s, %(pid)s, %(sweep_interval)s, rowfleet_now(%(now)s),
        rowfleet_now(%(now)s))
ON CONFLICT (orchestrator_id) DO UPDATE
SET last_seen = excluded.last_seen, sweep_interval = excluded.sweep_interval, stopped_at = NULL;

-- name: orchestrator_stopped
UPDATE orchestrators SET stopped_at = rowfleet_now(%(now)s), last_seen = rowfleet_now(%(now)s)
WHERE orchestrator_id = %(orchestrator_id)s;

-- name: project_services
-- Per project with jobs, an orchestrator or outbox events: its live orchestrators (judged
-- by each one's own sweep interval) and the outbox events waiting to be drained. The
-- projects with jobs are found by hopping along the jobs_state index, one seek per
-- project, never by reading every job (a DISTINCT would, at a million rows).
WITH RECURSIVE job_projects(project) AS (
    SELECT (SELECT project FROM jobs ORDER BY project LIMIT 1)
    UNION ALL
    SELECT (SELECT j.project FROM jobs AS j WHERE j.project > p.project ORDER BY j.project LIMIT 1)
    FROM job_projects AS p WHERE p.project IS NOT NULL
)
SELECT project,
       (SELECT count(*) FROM orchestrators AS o
        WHERE o.project = p.project AND o.stopped_at IS NULL
          AND o.last_seen >= rowfleet_now(%(now)s) - %(missed_beats)s * o.sweep_interval) AS orchestrators,
       (SELECT count(*) FROM dispatch_events AS e
        WHERE e.project = p.project AND e.processed_at IS NULL AND e.poisoned_at IS NULL) AS outbox_waiting,
       (SELECT min(created_at) FROM dispatch_events AS e
        WHERE e.project = p.project AND e.processed_at IS NULL AND e.poisoned_at IS NULL) AS outbox_oldest
FROM (SELECT project FROM job_projects WHERE project IS NOT NULL
      UNION SELECT project FROM orchestrators WHERE stopped_at IS NULL
      UNION SELECT project FROM dispatch_events WHERE processed_at IS NULL AND poisoned_at IS NULL) AS p
ORDER BY project;

-- name: prune_orchestrators
DELETE FROM orchestrators WHERE last_seen < rowfleet_now(%(now)s) - %(retention)s;

-- The fleet in one consistent read (fleet_rows): a read transaction around the statements
-- below, so counts, workers, switches and services all show one moment.

-- name: fleet_rows_begin
-- Repeatable read: every statement sees the snapshot of the first, and now() is that moment.
BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: fleet_rows
-- The moment the snapshot shows, as every statement of it reads now. No JIT, for this
-- transaction only: the counts' subqueries are planned for any (project, state, queue), as
-- if each group held a large share of the jobs, and that guess would have them compiled
-- (half a second at a million jobs) to run a few milliseconds of index steps.
SELECT rowfleet_now(%(now)s) AS now, set_config('jit', 'off', true) AS jit;

-- name: fleet_rows_counts
-- Jobs per (project, queue, state), cheap at a million rows. The groups are found by hopping
-- along the jobs_state index (project, state, queue, id), one seek per group, never by
-- reading every job. A live state (:queued, :running) is counted exactly: only its own index
-- entries are read. A finished state is counted up to :cap + 1 entries, the group's first in
-- id order, which the index holds in that order: more than :cap reads as "over the cap"
-- (exact false and n = :cap + 1), so a million completed jobs cost 10,001 steps.
WITH RECURSIVE groups(project, state, queue) AS (
    (SELECT project, state, queue FROM jobs ORDER BY project, state, queue LIMIT 1)
    UNION ALL
    SELECT j.project, j.state, j.queue FROM groups AS g
    JOIN jobs AS j ON j.id = coalesce(
        (SELECT n.id FROM jobs AS n WHERE n.project = g.project AND n.state = g.state AND n.queue > g.queue
         ORDER BY n.project, n.state, n.queue LIMIT 1),
        (SELECT n.id FROM jobs AS n WHERE n.project = g.project AND n.state > g.state
         ORDER BY n.project, n.state, n.queue LIMIT 1),
        (SELECT n.id FROM jobs AS n WHERE n.project > g.project ORDER BY n.project, n.state, n.queue LIMIT 1))
)
SELECT g.project, g.queue, g.state, g.state IN (%(queued)s, %(running)s) AS exact,
       CASE WHEN g.state IN (%(queued)s, %(running)s)
            THEN (SELECT count(*) FROM jobs AS c WHERE c.project = g.project AND c.state = g.state
                                                   AND c.queue = g.queue)
            ELSE (SELECT count(*) FROM (SELECT 1 FROM jobs AS c WHERE c.project = g.project AND c.state = g.state
                                                                AND c.queue = g.queue ORDER BY c.id LIMIT %(cap)s + 1) AS capped)
       END AS n
FROM groups AS g
ORDER BY g.project, g.queue, g.state;

-- name: fleet_rows_workers
-- The listed workers, each with what its current job last reported (joined here, not read
-- job by job).
SELECT w.*, j.progress AS job_progress, j.progress_message AS job_progress_message,
       j.progress_at AS job_progress_at
FROM workers AS w LEFT JOIN jobs AS j ON j.id = w.current_job AND j.project = w.project
WHERE {{worker_listed}}
ORDER BY w.project, w.host, w.queue, w.pid;

-- name: fleet_rows_unplaceable
-- Queued jobs per (project, queue) that the orchestrator flagged as placeable on no GPU
-- worker: only queued model jobs are read (the jobs_model and jobs_delayed indexes hold
-- them), never a finished one.
SELECT project, queue, count(*) AS n
FROM (SELECT project, queue FROM jobs
      WHERE state = 'queued' AND delayed = 0 AND required_model IS NOT NULL AND unplaceable IS NOT NULL
      UNION ALL
      SELECT project, queue FROM jobs
      WHERE state = 'queued' AND delayed = 1 AND required_model IS NOT NULL AND unplaceable IS NOT NULL) AS flagged
GROUP BY project, queue
ORDER BY project, queue;

-- name: fleet_rows_end
-- Ends the read transaction (it wrote nothing).
COMMIT;

-- GPU leases: one model per physical GPU (host, gpu_index), shared by its holders.

-- name: acquire_gpu
-- Taken when free (no row), lapsed, or held for the same model (shared: its token stays,
-- and the later deadline stands); refused (no row) while another model holds it. A lease
-- that changes hands gets the next token.
INSERT INTO gpu_leases (host, gpu_index, model, holder, token, acquired_at, expires_at)
VALUES (%(host)s, %(gpu_index)s, %(model)s, %(holder)s, 1, rowfleet_now(%(now)s), rowfleet_now(%(now)s) + %(ttl)s)
ON CONFLICT (host, gpu_index) DO UPDATE
SET token = CASE WHEN (gpu_leases.expires_at > rowfleet_now(%(now)s) AND gpu_leases.model = excluded.model) THEN gpu_leases.token ELSE gpu_leases.token + 1 END,
    acquired_at = CASE WHEN (gpu_leases.expires_at > rowfleet_now(%(now)s) AND gpu_leases.model = excluded.model) THEN gpu_leases.acquired_at ELSE excluded.acquired_at END,
    expires_at = CASE WHEN (gpu_leases.expires_at > rowfleet_now(%(now)s) AND gpu_leases.model = excluded.model) THEN greatest(gpu_leases.expires_at, excluded.expires_at)
                      ELSE excluded.expires_at END,
    model = excluded.model, holder = excluded.holder
WHERE gpu_leases.expires_at <= rowfleet_now(%(now)s) OR gpu_leases.model = excluded.model
RETURNING *;

-- name: renew_gpu
-- Only while the lease still has the holder's token and model (nobody took it since).
UPDATE gpu_leases SET expires_at = greatest(expires_at, rowfleet_now(%(now)s) + %(ttl)s), holder = %(holder)s
WHERE host = %(host)s AND gpu_index = %(gpu_index)s AND token = %(token)s AND model = %(model)s
RETURNING *;

-- name: release_gpu
-- Lapsed now rather than deleted, so that its token is never given out again.
UPDATE gpu_leases SET expires_at = rowfleet_now(%(now)s)
WHERE host = %(host)s AND gpu_index = %(gpu_index)s AND token = %(token)s AND holder = %(holder)s
  AND expires_at > rowfleet_now(%(now)s)
RETURNING *;

-- name: gpu_lease
SELECT * FROM gpu_leases WHERE host = %(host)s AND gpu_index = %(gpu_index)s;

-- name: host_gpu_leases
SELECT * FROM gpu_leases WHERE host = %(host)s ORDER BY gpu_index;

-- Measured figures of each model's loads.

-- name: record_model_load
-- A good load sets the figures it measured; a failed one counts and is timed.
INSERT INTO model_stats (project, model, load_seconds, footprint_mb, loads, failed_loads, last_failed_at, updated_at)
VALUES (%(project)s, %(model)s, CASE WHEN %(ok)s = 1 THEN %(seconds)s::double precision END,
        CASE WHEN %(ok)s = 1 THEN %(footprint_mb)s::integer END, %(ok)s, 1 - %(ok)s,
        CASE WHEN %(ok)s = 1 THEN NULL ELSE rowfleet_now(%(now)s) END, rowfleet_now(%(now)s))
ON CONFLICT (project, model) DO UPDATE
SET load_seconds = coalesce(excluded.load_seconds, model_stats.load_seconds),
    footprint_mb = coalesce(excluded.footprint_mb, model_stats.footprint_mb),
    loads = model_stats.loads + excluded.loads, failed_loads = model_stats.failed_loads + excluded.failed_loads,
    last_failed_at = coalesce(excluded.last_failed_at, model_stats.last_failed_at),
    updated_at = excluded.updated_at;

-- name: record_model_run
-- A completed job of the model ran %(seconds)s: the moving mean moves a fifth of the way.
-- updated_at stays the time of the last load (good or failed), which placement reads.
INSERT INTO model_stats (project, model, run_seconds, runs, updated_at)
VALUES (%(project)s, %(model)s, %(seconds)s::double precision, 1, rowfleet_now(%(now)s))
ON CONFLICT (project, model) DO UPDATE
SET run_seconds = coalesce(model_stats.run_seconds + (excluded.run_seconds - model_stats.run_seconds) * 0.2,
                           excluded.run_seconds),
    runs = model_stats.runs + 1;

-- name: model_stats
SELECT * FROM model_stats WHERE project = %(project)s ORDER BY model;

-- name: set_model_control
-- A rule or request written again is written afresh: a request done before is pending again.
INSERT INTO model_controls (host, model, action, changed_by, changed_at, done_at)
VALUES (%(host)s, %(model)s, %(action)s, %(changed_by)s, rowfleet_now(%(now)s), NULL)
ON CONFLICT (host, model, action) DO UPDATE
SET changed_by = excluded.changed_by, changed_at = excluded.changed_at, done_at = NULL
RETURNING *;

-- name: clear_model_control
DELETE FROM model_controls WHERE host = %(host)s AND model = %(model)s AND action = %(action)s;

-- name: model_controls
-- Every rule and request for the workers of :host (its own rows and the '*' ones), or of
-- every host when :host is NULL.
SELECT * FROM model_controls WHERE %(host)s::text IS NULL OR host IN (%(host)s, '*') ORDER BY host, model, action;

-- name: model_control_done
-- A worker carried out a request: it is done, unless written again since (changed_at).
UPDATE model_controls SET done_at = rowfleet_now(%(now)s)
WHERE host = %(host)s AND model = %(model)s AND action = %(action)s AND done_at IS NULL
  AND changed_at <= %(changed_at)s;

-- name: log_switch
-- The switch just written, in the same transaction, as the panel's audit list shows it.
INSERT INTO worker_control_log (project, host, queue, desired, policy, reason, changed_by, changed_at)
VALUES (%(project)s, %(host)s, %(queue)s, %(desired)s, %(policy)s, %(reason)s, %(changed_by)s, %(changed_at)s);

-- name: switch_log
-- The newest switches written through rowfleet, of one host (and its box-wide '*' rows) or all.
SELECT * FROM worker_control_log
WHERE (%(host)s::text IS NULL OR host IN (%(host)s, '*'))
ORDER BY id DESC
LIMIT %(limit)s;

-- name: prune_switch_log
DELETE FROM worker_control_log WHERE changed_at < rowfleet_now(%(now)s) - %(retention)s;

-- name: gpu_adverts
-- The GPU workers of one project (a heartbeat with an advert), listed as fleet_rows_workers
-- lists workers, with only the columns that judge them and their advert: the engine's narrow
-- read of the fleet, inside the same read transaction as fleet_rows (its now) and switches.
SELECT w.worker_id, w.project, w.host, w.queue, w.queues, w.pid, w.state, w.current_job, w.last_seen,
       w.heartbeat, w.stopped_at, w.flagged_dead_at, w.exit_code, w.models, w.gpu_index, w.vram_total_mb,
       w.vram_free_mb, w.warm_model, w.warm_since, w.loading, w.lane, w.host_priority
FROM workers AS w
WHERE w.project = %(project)s AND w.models IS NOT NULL AND {{worker_listed}}
ORDER BY w.project, w.host, w.queue, w.pid;

-- The GPU health gate (rowfleet.telemetry.gpu_health): one switch per judged GPU of a host.

-- fragment: gpu_trips
-- Whether a verdict switches the GPU off: it is failing, the GPU is on, and it is not the
-- very verdict an operator cleared by switching the GPU on.
excluded.health <> '' AND gpu_switches.desired = 'on' AND gpu_switches.cleared IS DISTINCT FROM excluded.health

-- name: record_gpu_health
-- The sampler's verdict on one GPU (health '' when healthy): kept as its last verdict, and
-- a failing one switches the GPU off (changed_by gate) unless {{gpu_trips}} says no. The
-- gate never switches a GPU on.
INSERT INTO gpu_switches (host, gpu_index, desired, reason, changed_by, changed_at, health, health_at)
VALUES (%(host)s, %(gpu_index)s, CASE WHEN %(health)s::text = '' THEN 'on' ELSE 'off' END, %(health)s::text,
        CASE WHEN %(health)s::text = '' THEN '' ELSE %(gate)s::text END, rowfleet_now(%(now)s), %(health)s::text,
        rowfleet_now(%(now)s))
ON CONFLICT (host, gpu_index) DO UPDATE
SET desired = CASE WHEN {{gpu_trips}} THEN 'off' ELSE gpu_switches.desired END,
    reason = CASE WHEN {{gpu_trips}} THEN excluded.health ELSE gpu_switches.reason END,
    changed_by = CASE WHEN {{gpu_trips}} THEN excluded.changed_by ELSE gpu_switches.changed_by END,
    changed_at = CASE WHEN {{gpu_trips}} THEN excluded.changed_at ELSE gpu_switches.changed_at END,
    health = excluded.health, health_at = excluded.health_at
RETURNING *;

-- name: set_gpu_switch
-- An operator's switch. Switching on clears the verdict in force (cleared), so that only a
-- new verdict trips the gate again.
INSERT INTO gpu_switches (host, gpu_index, desired, reason, changed_by, changed_at)
VALUES (%(host)s, %(gpu_index)s, %(desired)s, %(reason)s, %(changed_by)s, rowfleet_now(%(now)s))
ON CONFLICT (host, gpu_index) DO UPDATE
SET desired = excluded.desired, reason = excluded.reason, changed_by = excluded.changed_by,
    changed_at = excluded.changed_at,
    cleared = CASE WHEN excluded.desired = 'on' THEN gpu_switches.health ELSE gpu_switches.cleared END
RETURNING *;

-- name: gpu_switch
SELECT * FROM gpu_switches WHERE host = %(host)s AND gpu_index = %(gpu_index)s;

-- name: gpu_switches
SELECT * FROM gpu_switches ORDER BY host, gpu_index;
