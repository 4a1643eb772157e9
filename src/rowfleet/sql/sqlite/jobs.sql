-- rowfleet's queries for SQLite: jobs: enqueue, the claim (its candidate rule and order, written once as fragments), finish, recovery, reads.

-- name: enqueue
-- A job due later is delayed: out of the claim index until a claim promotes it. A job a
-- schedule fired carries the schedule, the slot and why it fired; NULL for every other.
INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts,
                  idempotency_key, created_at, updated_at, run_id, node_id, node_generation,
                  timeout, required_model, vram_mb, delayed, unique_key, concurrency_key, gpus,
                  schedule, schedule_slot, fire_reason)
VALUES (:project, :queue, :task, :args, :priority, :run_next, coalesce(:run_at, :now + :delay),
        :max_attempts, :key, :now, :now, :run_id, :node_id, :node_generation, :timeout, :model, :vram_mb,
        CASE WHEN coalesce(:run_at, :now + :delay) > :now THEN 1 ELSE 0 END, :unique_key, :concurrency_key, :gpus,
        :schedule, :schedule_slot, :fire_reason)
ON CONFLICT (project, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *;

-- name: enqueue_many
-- One statement for a whole batch: :args_list is a JSON array of each job's args, already
-- encoded as JSON text, so the rows are bound once instead of once per job. A map node's
-- items are numbered by their place in the array.
INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts,
                  created_at, updated_at, run_id, node_id, node_item, node_generation,
                  timeout, required_model, vram_mb, delayed, concurrency_key, gpus)
SELECT :project, :queue, :task, value, :priority, :run_next, coalesce(:run_at, :now + :delay),
       :max_attempts, :now, :now, :run_id, :node_id, CASE WHEN :run_id IS NOT NULL THEN key END,
       :node_generation, :timeout, :model, :vram_mb, CASE WHEN coalesce(:run_at, :now + :delay) > :now THEN 1 ELSE 0 END,
       :concurrency_key, :gpus
FROM json_each(:args_list)
ORDER BY key;

-- name: lock_unique
-- Serialize the enqueues of one duplicate key: on SQLite the enqueue's BEGIN IMMEDIATE
-- already holds the only write lock, so there is nothing more to take.
SELECT 1 WHERE :unique_key IS NOT NULL;

-- name: unique_pending
-- The jobs of a duplicate key that wait or run (jobs_unique: its condition, term for term).
SELECT * FROM jobs
WHERE project = :project AND queue = :queue AND unique_key = :unique_key
  AND unique_key IS NOT NULL AND state IN ('queued', 'running')
ORDER BY id;

-- name: debounce
-- A duplicate enqueued within the debounce window pushes the waiting job's start: out of the
-- claim index (delayed) until it falls due.
UPDATE jobs SET run_at = max(run_at, :now + :debounce), delayed = 1, updated_at = :now
WHERE id = :id AND state = 'queued'
RETURNING *;

-- name: job_by_key
SELECT * FROM jobs WHERE project = :project AND idempotency_key = :key;

-- name: get_job
SELECT * FROM jobs WHERE id = :id AND project = :project;

-- name: job_holder
-- Who holds a job now, and the attempt its row holds (whose claim and completion are no
-- event rows: Store.events gives them from here).
SELECT state, lease_token, claimed_by, attempts, started_at, finished_at FROM jobs WHERE id = :id;

-- fragment: due_candidates
-- The jobs due in a claim's project and queue: queued, not delayed (so the jobs_claim and
-- jobs_model indexes hold them) and due. run_at is still compared: a row written by plain
-- SQL may be due later without being marked delayed.
state = 'queued' AND delayed = 0 AND project = :project AND queue = :queue AND run_at <= :now

-- fragment: claim_candidates
-- The jobs a claim may take: due, and asking for no more GPUs than its worker can hold. The
-- claim's candidate rule, written here only: every probe of claim_pick, claim_due and
-- claim_batch includes it, so "is anything due?" and "take it" cannot disagree, and every
-- claim re-checks the row it takes against it.
{{due_candidates}} AND {{gpus_fit}}

-- fragment: gpus_fit
-- Whether a claim may take a job for the GPUs it asks for: one that asks for none, or for no
-- more than the claiming worker can hold now (gpus_free; NULL: a worker of no GPU, which
-- takes only jobs that ask for none). Written here only: claim_candidates includes it.
(gpus IS NULL OR gpus <= :gpus_free)

-- fragment: memory_fit
-- Whether a job fits the memory a GPU claim has free (:vram_free_mb; NULL: no limit, and a
-- job that names no vram_mb fits anywhere). Written here only: every GPU form includes it.
(:vram_free_mb IS NULL OR vram_mb IS NULL OR vram_mb <= :vram_free_mb)

-- fragment: kind_candidates
-- A routed claim's candidates of one kind of job (kind.model, NULL for plain jobs) that fit
-- the free memory: what each probe of jobs_model looks for.
{{claim_candidates}} AND required_model IS kind.model AND {{memory_fit}} AND {{key_free}}

-- fragment: plain_kind
-- Plain jobs (model NULL) as one more kind of a routed claim's, at :plain_preference, unless
-- that is NULL (the lane leaves them out): the models' probe serves them too.
SELECT NULL, :plain_preference WHERE :plain_preference IS NOT NULL

-- fragment: plain_kind [newest]
-- The same row: newest first is the probe's business (kind_probe), which serves plain jobs
-- too. (PostgreSQL probes plain jobs on their own, so its plain_kind has a newest form.)
SELECT NULL, :plain_preference WHERE :plain_preference IS NOT NULL

-- fragment: routed_kinds
-- The kinds of job a routed claim's gate lets in, each with its preference: the models of
-- :gate (a JSON object of model -> preference), and plain jobs.
(SELECT gate.key AS model, gate.value AS preference FROM json_each(:gate) AS gate
 UNION ALL
 {{plain_kind}}) AS kind

-- fragment: kind_probe
-- The id of one kind's best job (kind.model) that fits the free memory, in claim order:
-- one walk of jobs_model.
(SELECT id FROM jobs
 WHERE {{kind_candidates}}
 ORDER BY run_next DESC, priority, run_at, id LIMIT 1)

-- fragment: kind_probe [newest]
-- Newest first (an overflow box), keeping run-next and priority first: a first probe finds
-- the best (run_next, priority), a second the newest job of it, so both stay index walks.
(SELECT id FROM jobs
 WHERE {{kind_candidates}}
   AND (run_next, priority) = (
       SELECT run_next, priority FROM jobs
       WHERE {{kind_candidates}}
       ORDER BY run_next DESC, priority, run_at, id LIMIT 1)
 ORDER BY run_next DESC, priority, run_at DESC, id DESC LIMIT 1)

-- fragment: pick_order
-- The order a routed claim puts its kinds' best jobs in: run-next, the kind's preference,
-- priority, then due order (oldest first; newest first for an overflow box).
ORDER BY best.run_next DESC, kind.preference, best.priority, best.run_at, best.id

-- fragment: pick_order [newest]
ORDER BY best.run_next DESC, kind.preference, best.priority, best.run_at DESC, best.id DESC

-- fragment: promotion_candidates
-- The delayed jobs of a claim's (project, queue) that have fallen due (the jobs_delayed index).
state = 'queued' AND delayed = 1 AND project = :project AND queue = :queue AND run_at <= :now

-- fragment: claim_pick
-- The id of the job a plain claim takes (NULL: none): one walk of jobs_claim in claim
-- order. A fallen-due delayed job waits for promotion.
(SELECT id FROM jobs
 WHERE {{claim_candidates}}
 ORDER BY run_next DESC, priority, run_at, id LIMIT 1)

-- fragment: claim_pick [routed, newest]
-- The id of the job a routed claim takes (NULL: none), by the rules and order
-- rowfleet.claim documents (an overflow box's newest first: kind_probe, pick_order). Its
-- gate (routed_kinds) gives one probe of jobs_model per kind of job, each the best of its
-- kind in claim order and fitting the free memory, joined to its row (CROSS JOIN keeps the
-- few kinds the outer loop) and put in order by run-next, the kind's preference, priority
-- and due order.
(SELECT best.id
 FROM {{routed_kinds}}
 CROSS JOIN jobs AS best
 WHERE best.id = {{kind_probe}}
 {{pick_order}}
 LIMIT 1)

-- fragment: claim_pick [warm]
-- The first form of a claim whose warm model goes first (Claim.warm_first): while no
-- run-next job is due in the queue (jobs_claim's run-next range is empty), the warm model's
-- best job is the one the routed claim would take, so one probe of jobs_model finds it.
-- NULL when that does not hold: the store then runs the routed form.
(SELECT id FROM jobs
 WHERE {{claim_candidates}}
   AND required_model = :warm_model AND {{memory_fit}} AND {{key_free}}
   AND NOT EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_claim WHERE {{claim_candidates}} AND run_next >= 1)
 ORDER BY run_next DESC, priority, run_at, id LIMIT 1)

-- fragment: claim_due
-- Whether claim_pick would find a job, as a condition: the same rules, asking only whether
-- a probe finds one (the walk in its index's order, so that the planner takes jobs_claim).
(SELECT 1 FROM jobs
 WHERE {{claim_candidates}}
 ORDER BY run_next DESC, priority, run_at, id LIMIT 1) IS NOT NULL

-- fragment: claim_due [routed, newest, warm]
EXISTS (SELECT 1
        FROM (SELECT gate.key AS model FROM json_each(:gate) AS gate
              UNION ALL
              SELECT NULL WHERE :plain_preference IS NOT NULL) AS kind
        WHERE EXISTS (SELECT 1 FROM jobs WHERE {{kind_candidates}}))

-- fragment: promotion_allowed
-- A fallen-due delayed job counts for has_due only if the claim may take it once promoted:
-- claim_pick's rules as a condition on one row (a plain claim may take any).
1

-- fragment: promotion_allowed [routed, newest, warm]
{{memory_fit}}
AND CASE WHEN required_model IS NULL THEN :plain_preference IS NOT NULL
         ELSE required_model IN (SELECT gate.key FROM json_each(:gate) AS gate) END

-- fragment: claimed_set
-- What a claim writes to the job it takes. warm_claim: the worker already held its model;
-- host: the holder's host, which stays when the job is requeued or ends.
state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
claimed_by = :holder, host = :host, lease_expires_at = :now + :lease, started_at = :now, updated_at = :now,
warm_claim = CASE WHEN required_model IS NOT NULL AND required_model = :warm_model THEN 1 ELSE 0 END

-- name: claim
UPDATE jobs
SET {{claimed_set}}
WHERE id = {{claim_pick}} AND {{claim_candidates}}
RETURNING *;

-- name: claim_batch
-- Up to :limit jobs at once, for a worker that prefetches (worker --prefetch): the plain
-- claim's pick written as a range of jobs_claim in claim order, each row re-checked and
-- given its own token. RETURNING gives no order: the store sorts them as claimed.
UPDATE jobs
SET {{claimed_set}}
WHERE id IN (SELECT id FROM jobs
             WHERE {{claim_candidates}}
             ORDER BY run_next DESC, priority, run_at, id LIMIT :limit)
  AND {{claim_candidates}}
RETURNING *;

-- name: has_due
-- A delayed job that has fallen due counts (if the claim may take it): the claim that
-- follows promotes it. The delayed half is ordered as jobs_delayed is, so that the planner
-- walks that index rather than every queued row of the queue.
SELECT 1 AS due
WHERE {{claim_due}}
   OR (SELECT 1 FROM jobs WHERE {{promotion_candidates}} AND {{promotion_allowed}} ORDER BY run_at LIMIT 1) IS NOT NULL;

-- name: promote_due
-- Delayed jobs that have fallen due join the claim index, soonest first, :limit at most.
UPDATE jobs SET delayed = 0
WHERE id IN (SELECT id FROM jobs
             WHERE {{promotion_candidates}}
             ORDER BY run_at
             LIMIT :limit);

-- name: renew
-- Also tells the holder, at no extra cost, whether an operator asked it to stop the job.
UPDATE jobs SET lease_expires_at = :now + :lease, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING lease_expires_at, cancel_requested_at, cancel_reason;

-- name: finish
UPDATE jobs
SET state = :state, result = :result, error = :error, traceback = :traceback,
    lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- name: finish_requeue
UPDATE jobs
SET state = 'queued', error = :error, traceback = :traceback, run_at = :now + :delay,
    delayed = CASE WHEN :delay > 0 THEN 1 ELSE 0 END, lease_expires_at = NULL, claimed_by = NULL, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- fragment: projects_seek
-- Every project that has jobs, found one seek at a time (never a walk of the table).
WITH RECURSIVE projects(project) AS (
    SELECT min(project) FROM jobs
    UNION ALL
    SELECT (SELECT min(project) FROM jobs WHERE project > projects.project) FROM projects
    WHERE projects.project IS NOT NULL
)

-- fragment: running_rows
-- The running jobs (after projects_seek), read through jobs_state, one range per project:
-- they are as many as the fleet has workers, so they have no index of their own (one on the
-- lease cost every claim, renewal and finish a page of writes). INDEXED BY: a planner that
-- knows of one project only would walk the table.
jobs INDEXED BY jobs_state
WHERE project IN (SELECT project FROM projects) AND state = 'running'

-- name: reclaim_lapsed
{{projects_seek}}
SELECT id, project, lease_token, claimed_by, lease_expires_at, attempts, max_attempts, watchdog_retries, run_id,
       cancel_reason, cancel_requested_at
FROM {{running_rows}} AND lease_expires_at < coalesce(:as_of, :now)
ORDER BY lease_expires_at
LIMIT :limit;

-- name: reclaim_unheld
-- Running jobs whose row names no holder a sweep could see lose them (liveness.unheld): no
-- lease, a lease that is no time (text and bytes sort after every number, and an infinity
-- is no sooner, so none ever lapses), or no worker named.
{{projects_seek}}
SELECT id, project, lease_token, claimed_by, lease_expires_at, attempts, max_attempts, run_id, cancel_reason,
       cancel_requested_at
FROM {{running_rows}}
  AND (lease_expires_at IS NULL OR claimed_by IS NULL OR NOT (lease_expires_at < 9e999))
LIMIT :limit;

-- fragment: lost_band
-- A job lost with its worker goes back in its place, or into the front band (run_next)
-- where its queue asks for that (flow_limits.lost_first: its project's row or every
-- project's), so that it does not wait behind newer work.
run_next = CASE WHEN EXISTS (SELECT 1 FROM flow_limits AS lost
                             WHERE lost.project IN (jobs.project, '*') AND lost.queue = jobs.queue
                               AND lost.lost_first = 1) THEN 1 ELSE run_next END

-- name: job_reclaim
-- run_at is left as it was (due, since it was claimed): the lapsed job keeps its place
-- ahead of fresh work. A lost lease is no fault of the job's: the attempt its claim counted
-- is given back and a watchdog retry spent instead (liveness.lapse_outcome).
UPDATE jobs
SET state = 'queued', attempts = attempts - 1, watchdog_retries = watchdog_retries + 1,
    error = :error, delayed = 0, lease_expires_at = NULL, claimed_by = NULL,
    {{lost_band}}, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token AND lease_expires_at < :now
RETURNING id;

-- name: job_fail_lapsed
-- :state is failed, or cancelled for a job that was not to run again (its run ended, or
-- an operator asked for it to be cancelled).
UPDATE jobs
SET state = :state, error = :error, lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token AND lease_expires_at < :now
RETURNING id;

-- name: cancel
UPDATE jobs SET state = 'cancelled', error = :reason, finished_at = :now, updated_at = :now
WHERE id = :id AND project = :project AND state = 'queued'
RETURNING *;

-- name: cancel_unheld
-- A running job whose row names no holder that could be asked to stop it
-- (liveness.unheld) is cancelled at once, if its row is still the one read.
UPDATE jobs SET state = 'cancelled', error = :reason, lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE id = :id AND project = :project AND state = 'running' AND lease_token = :token
RETURNING *;

-- name: never_due
-- Queued jobs whose run_at is no number: text and bytes sort after every number, so no
-- claim's due filter (run_at <= :now) ever matches one. Found without walking the queue: a
-- claim index keeps them last in each of its parts (jobs_claim: per project, queue,
-- run-next and priority; jobs_delayed: per project and queue), so the parts' first rows
-- are found one seek each (claim_parts, delayed_parts: the next part's first row after a
-- part's), and one seek more past each part's numbers finds them (INDEXED BY, and the
-- parts as a list rather than a join: a planner that knows of few parts would otherwise
-- walk the queue to build a filter or an index of its own).
WITH RECURSIVE claim_parts(id) AS (
    SELECT (SELECT id FROM jobs WHERE state = 'queued' AND delayed = 0
            ORDER BY project, queue, run_next DESC, priority, run_at, id LIMIT 1)
    UNION ALL
    SELECT coalesce(
        (SELECT id FROM jobs WHERE state = 'queued' AND delayed = 0 AND project = part.project
           AND queue = part.queue AND run_next = part.run_next AND priority > part.priority
         ORDER BY priority, run_at, id LIMIT 1),
        (SELECT id FROM jobs WHERE state = 'queued' AND delayed = 0 AND project = part.project
           AND queue = part.queue AND run_next < part.run_next
         ORDER BY run_next DESC, priority, run_at, id LIMIT 1),
        (SELECT id FROM jobs WHERE state = 'queued' AND delayed = 0 AND project = part.project AND queue > part.queue
         ORDER BY queue, run_next DESC, priority, run_at, id LIMIT 1),
        (SELECT id FROM jobs WHERE state = 'queued' AND delayed = 0 AND project > part.project
         ORDER BY project, queue, run_next DESC, priority, run_at, id LIMIT 1))
    FROM claim_parts JOIN jobs AS part ON part.id = claim_parts.id
),
delayed_parts(id) AS (
    SELECT (SELECT id FROM jobs WHERE state = 'queued' AND delayed = 1 ORDER BY project, queue, run_at LIMIT 1)
    UNION ALL
    SELECT coalesce(
        (SELECT id FROM jobs WHERE state = 'queued' AND delayed = 1 AND project = part.project AND queue > part.queue
         ORDER BY queue, run_at LIMIT 1),
        (SELECT id FROM jobs WHERE state = 'queued' AND delayed = 1 AND project > part.project
         ORDER BY project, queue, run_at LIMIT 1))
    FROM delayed_parts JOIN jobs AS part ON part.id = delayed_parts.id
)
SELECT * FROM jobs
WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_claim
             WHERE state = 'queued' AND delayed = 0 AND run_at >= ''
               AND (project, queue, run_next, priority) IN (SELECT project, queue, run_next, priority FROM jobs
                                                            WHERE id IN (SELECT id FROM claim_parts))
             UNION ALL
             SELECT id FROM jobs INDEXED BY jobs_delayed
             WHERE state = 'queued' AND delayed = 1 AND run_at >= ''
               AND (project, queue) IN (SELECT project, queue FROM jobs WHERE id IN (SELECT id FROM delayed_parts)))
LIMIT :limit;

-- name: fail_never_due
UPDATE jobs SET state = 'failed', error = :error, finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'queued'
RETURNING *;

-- name: request_cancel
-- Asks the worker holding a running job to stop it; the first request's time and reason stay.
UPDATE jobs SET cancel_requested_at = :now, cancel_reason = :reason, updated_at = :now
WHERE id = :id AND project = :project AND state = 'running' AND cancel_requested_at IS NULL
RETURNING *;

-- name: prioritize
UPDATE jobs SET run_next = 1, updated_at = :now
WHERE id = :id AND project = :project AND state = 'queued' AND run_next = 0
RETURNING *;

-- name: retry
UPDATE jobs
SET state = 'queued', run_at = :now, delayed = 0, max_attempts = max(max_attempts, attempts + 1),
    error = NULL, traceback = NULL, finished_at = NULL, lease_expires_at = NULL, claimed_by = NULL, updated_at = :now,
    cancel_requested_at = NULL, cancel_reason = NULL
WHERE id = :id AND project = :project AND state IN ('failed', 'cancelled')
RETURNING *;

-- name: list_jobs
SELECT * FROM jobs
WHERE project = :project
  AND (:state IS NULL OR state = :state)
  AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC
LIMIT :limit;

-- name: counts
SELECT project, queue, state, count(*) AS n FROM jobs
GROUP BY project, queue, state
ORDER BY project, queue, state;

-- name: record_event
INSERT INTO job_events (job_id, at, kind, detail) VALUES (:job_id, :now, :kind, :detail);

-- name: events
-- In time order: an attempt's events written when the attempt was over (the
-- jobs_attempt_history trigger) carry the moments they happened at.
SELECT * FROM job_events WHERE job_id = :job_id ORDER BY at, id;

-- fragment: prunable
-- A finished job past the retention period whose finish the tallies have counted, oldest first.
SELECT id FROM jobs
WHERE finished_at < :now - :retention AND state IN ('completed', 'failed', 'cancelled')
  AND tallied_at IS finished_at
ORDER BY finished_at LIMIT :limit

-- name: prune_events
DELETE FROM job_events WHERE job_id IN ({{prunable}});

-- name: prune_jobs
DELETE FROM jobs WHERE id IN ({{prunable}});

-- name: progress
UPDATE jobs SET progress = :progress, progress_message = :message, progress_at = :now, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- name: watchdog_trip
-- A watchdog fault spends a watchdog retry; an operator stop gives back the attempt.
UPDATE jobs SET watchdog_retries = watchdog_retries + :spent, attempts = attempts - :refund, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- name: job_hand_back
-- Back to the queue at once, keeping its run_at: it goes ahead of fresh work again.
UPDATE jobs
SET state = 'queued', error = :error, delayed = 0, lease_expires_at = NULL, claimed_by = NULL, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- name: job_lost
-- As job_hand_back, for a job lost with its worker (gone, exited, or never named): in its
-- place or the front band, as its queue chooses.
UPDATE jobs
SET state = 'queued', error = :error, delayed = 0, lease_expires_at = NULL, claimed_by = NULL,
    {{lost_band}}, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- name: job_lease_lost
-- As job_hand_back, for a holder that lost its lease (it exited 81, cut off): the attempt
-- given back and a watchdog retry spent instead, as a lapse would (liveness.lapse_outcome).
UPDATE jobs
SET state = 'queued', attempts = attempts - 1, watchdog_retries = watchdog_retries + 1,
    error = :error, delayed = 0, lease_expires_at = NULL, claimed_by = NULL,
    {{lost_band}}, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- name: hand_back
-- A claimed job given back unrun, which is no fault: queued again at once with its run_at
-- (ahead of fresh work), and the attempt its claim counted given back.
UPDATE jobs
SET state = 'queued', attempts = attempts - 1, delayed = 0, lease_expires_at = NULL, claimed_by = NULL,
    updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- name: model_backlog
-- Per model, the due queued jobs of one queue and how long the oldest of them has waited
-- (read from the jobs_model index).
SELECT required_model AS model, count(*) AS queued, :now - min(run_at) AS oldest_wait
FROM jobs
WHERE {{due_candidates}}
  AND required_model IS NOT NULL
GROUP BY required_model
ORDER BY required_model;

-- name: jobs_of_silent_worker
-- The running jobs a worker claimed in its lifetime: since its row was made (its first
-- heartbeat comes before its first claim), and before a newer worker with the same
-- host:pid appeared (pids are reused).
SELECT id, project, lease_token, claimed_by, attempts, max_attempts, watchdog_retries, run_id, cancel_reason,
       cancel_requested_at
FROM jobs
WHERE state = 'running' AND claimed_by = :holder AND started_at >= :since
  AND NOT EXISTS (SELECT 1 FROM workers AS newer
                  WHERE newer.host = :host AND newer.pid = :pid AND newer.started_at > :since
                    AND newer.started_at <= jobs.started_at);

-- name: job_orphan_fail
-- :state as in job_fail_lapsed.
UPDATE jobs
SET state = :state, error = :error, lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'running' AND lease_token = :token
RETURNING id;

-- Placement: which queued model jobs no GPU worker can hold (the orchestrator's sweep).

-- name: model_demand
-- The project's model jobs that are queued or running, one row per (queue, model, job
-- vram_mb, state, unplaceable reason) with its count: what placement is decided on, a
-- group at a time, never job by job. :limit groups at most.
SELECT queue, required_model AS model, vram_mb, state, unplaceable, count(*) AS n,
       min(created_at) AS oldest, min(unplaceable_at) AS unplaceable_since
FROM jobs
WHERE project = :project AND state IN ('queued', 'running') AND required_model IS NOT NULL
GROUP BY queue, required_model, vram_mb, state, unplaceable
ORDER BY queue, required_model, vram_mb, state, unplaceable
LIMIT :limit;

-- name: flag_unplaceable
-- One batch of a group's queued jobs whose reason is still :was (NULL: placeable) gets
-- :reason. unplaceable_at keeps the start of the stretch: a reason that changes does not
-- restart it.
UPDATE jobs
SET unplaceable = :reason, unplaceable_at = CASE WHEN unplaceable IS NULL THEN :now ELSE unplaceable_at END,
    updated_at = :now
WHERE id IN (SELECT id FROM jobs
             WHERE project = :project AND queue = :queue AND state = 'queued' AND required_model = :model
               AND vram_mb IS :vram_mb AND unplaceable IS :was
             ORDER BY id LIMIT :limit)
  AND state = 'queued' AND unplaceable IS :was
RETURNING id;

-- name: clear_unplaceable
-- One batch of a group's jobs (queued, or running: a worker took it) flagged :was is placeable again.
UPDATE jobs SET unplaceable = NULL, unplaceable_at = NULL, updated_at = :now
WHERE id IN (SELECT id FROM jobs
             WHERE project = :project AND queue = :queue AND state = :state AND required_model = :model
               AND vram_mb IS :vram_mb AND unplaceable = :was
             ORDER BY id LIMIT :limit)
  AND state = :state AND unplaceable = :was
RETURNING id;

-- name: fail_unplaceable
-- One batch of a group's queued jobs unplaceable (for :reason now) since :before or earlier: failed.
UPDATE jobs
SET state = 'failed', error = :error, lease_expires_at = NULL, finished_at = :now, updated_at = :now
WHERE id IN (SELECT id FROM jobs
             WHERE project = :project AND queue = :queue AND state = 'queued' AND required_model = :model
               AND vram_mb IS :vram_mb AND unplaceable = :reason AND unplaceable_at <= :before
             ORDER BY id LIMIT :limit)
  AND state = 'queued' AND unplaceable = :reason AND unplaceable_at <= :before
RETURNING *;

-- name: model_claims
-- Per model, the claims since :since of its jobs running now or finished since (the last
-- :cap finished, by the jobs_finished index), and how many of them were warm: no job is
-- read that finished before :since.
SELECT model, count(*) AS claims, coalesce(sum(warm_claim), 0) AS warm
FROM (SELECT * FROM (SELECT required_model AS model, warm_claim FROM jobs INDEXED BY jobs_finished
                     WHERE finished_at >= :since AND project = :project AND required_model IS NOT NULL
                       AND started_at >= :since
                     ORDER BY finished_at DESC LIMIT :cap)
      UNION ALL
      SELECT required_model, warm_claim FROM jobs
      WHERE project = :project AND state = 'running' AND required_model IS NOT NULL AND started_at >= :since)
GROUP BY model
ORDER BY model;

-- name: find_job
SELECT * FROM jobs WHERE id = :id;

-- name: search_jobs
-- A page of the panel's job search, newest first: only ids in [floor, before), a window the
-- caller bounds, so a filter that matches little never walks every kept job in one request.
SELECT * FROM jobs
WHERE id < :before AND id >= :floor
  AND (:project IS NULL OR project = :project)
  AND (:state IS NULL OR state = :state)
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:host IS NULL OR host = :host)
  AND (:model IS NULL OR required_model = :model)
  AND (:needle IS NULL OR instr(args, :needle) > 0)
ORDER BY id DESC
LIMIT :limit;

-- name: jobs_in_state
-- The jobs of one project in one state that match the panel's filter, for a bulk action:
-- jobs_state serves (project, state[, queue]), in no order, so the cap bounds the walk.
SELECT id FROM jobs
WHERE project = :project AND state = :state
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:host IS NULL OR host = :host)
  AND (:model IS NULL OR required_model = :model)
  AND (:needle IS NULL OR instr(args, :needle) > 0)
LIMIT :limit;

-- name: newest_job_id
SELECT max(id) AS id FROM jobs;

-- name: finished_per_minute
-- Jobs finished since a time, per project, queue, state and minute (jobs_finished serves it).
SELECT project, queue, state, CAST(finished_at / 60 AS INTEGER) AS minute, count(*) AS n
FROM jobs
WHERE finished_at >= :since
GROUP BY project, queue, state, CAST(finished_at / 60 AS INTEGER);

-- name: jobs_ended_since
-- Jobs that ran somewhere and finished since a time, newest first, capped: the ticks of the
-- Flight Deck's time axis.
SELECT id, project, queue, task, state, host, started_at, finished_at FROM jobs
WHERE finished_at >= :since AND host IS NOT NULL
ORDER BY finished_at DESC
LIMIT :limit;

-- name: jobs_running
-- Every running job with a lease, where it runs and since when (the caller sorts).
{{projects_seek}}
SELECT id, project, queue, task, state, host, started_at, finished_at
FROM {{running_rows}} AND lease_expires_at IS NOT NULL;

-- name: jobs_ahead
-- How many due queued jobs of a job's (project, queue) a claim takes before a job sorting
-- at (:run_next, :priority, :run_at, :id), in claim order (run-next first, then priority,
-- due order, id), each part counted up to :cap + 1 so that a deep queue is never walked
-- whole: one range of jobs_claim per step of that order, and the delayed jobs that have
-- fallen due (a claim promotes them into its order; the jobs_delayed index).
SELECT (SELECT count(*) FROM (SELECT 1 FROM jobs
                              WHERE state = 'queued' AND delayed = 0 AND project = :project AND queue = :queue
                                AND run_next > :run_next AND run_at <= :now
                              LIMIT :cap + 1))
     + (SELECT count(*) FROM (SELECT 1 FROM jobs
                              WHERE state = 'queued' AND delayed = 0 AND project = :project AND queue = :queue
                                AND run_next = :run_next AND priority < :priority AND run_at <= :now
                              LIMIT :cap + 1))
     + (SELECT count(*) FROM (SELECT 1 FROM jobs
                              WHERE state = 'queued' AND delayed = 0 AND project = :project AND queue = :queue
                                AND run_next = :run_next AND priority = :priority AND run_at < :run_at
                                AND run_at <= :now
                              LIMIT :cap + 1))
     + (SELECT count(*) FROM (SELECT 1 FROM jobs
                              WHERE state = 'queued' AND delayed = 0 AND project = :project AND queue = :queue
                                AND run_next = :run_next AND priority = :priority AND run_at = :run_at
                                AND id < :id AND run_at <= :now
                              LIMIT :cap + 1))
     + (SELECT count(*) FROM (SELECT 1 FROM jobs
                              WHERE state = 'queued' AND delayed = 1 AND project = :project AND queue = :queue
                                AND run_at <= :now
                                AND (run_next > :run_next
                                     OR (run_next = :run_next AND (priority < :priority
                                         OR (priority = :priority AND (run_at < :run_at
                                             OR (run_at = :run_at AND id < :id))))))
                              LIMIT :cap + 1)) AS n;

-- name: bell_requeued
-- The doorbell of a job's queue when a job is queued again (a retry, a reclaim, a hand-back,
-- an operator's requeue or move): SQLite's stand-in for LISTEN rowfleet_jobs, which an
-- enqueue notes itself. A TEMP trigger, so it lives on rowfleet's own connection only, where
-- rowfleet_queued is defined; a plain-SQL writer's connection never sees it. The store rings
-- the queue's bell after the commit.
CREATE TEMP TRIGGER IF NOT EXISTS rowfleet_bell_requeued AFTER UPDATE OF state, run_at, queue ON main.jobs
WHEN NEW.state = 'queued'
BEGIN
    SELECT rowfleet_queued(NEW.queue);
END;
