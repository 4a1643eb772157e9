-- rowfleet's queries for PostgreSQL: jobs: enqueue, the claim (its candidate rule and order, written once as fragments), finish, recovery, reads.

-- name: enqueue
-- A job due later is delayed: out of the claim index until a claim promotes it. A job a
-- schedule fired carries the schedule, the slot and why it fired; NULL for every other.
INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts,
                  idempotency_key, created_at, updated_at, run_id, node_id, node_generation,
                  timeout, required_model, vram_mb, delayed, unique_key, concurrency_key, gpus,
                  schedule, schedule_slot, fire_reason)
VALUES (%(project)s, %(queue)s, %(task)s, %(args)s, %(priority)s, %(run_next)s, coalesce(%(run_at)s::double precision, rowfleet_now(%(now)s) + %(delay)s),
        %(max_attempts)s, %(key)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s), %(run_id)s, %(node_id)s,
        %(node_generation)s, %(timeout)s, %(model)s, %(vram_mb)s,
        CASE WHEN coalesce(%(run_at)s::double precision, rowfleet_now(%(now)s) + %(delay)s) > rowfleet_now(%(now)s)
             THEN 1 ELSE 0 END, %(unique_key)s, %(concurrency_key)s, %(gpus)s::integer,
        %(schedule)s, %(schedule_slot)s::double precision, %(fire_reason)s)
ON CONFLICT (project, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *;

-- name: enqueue_many
-- One statement for a whole batch: %(args_list)s is a JSON array of each job's args, already
-- encoded as JSON text, so the rows are bound once instead of once per job. A map node's
-- items are numbered by their place in the array.
INSERT INTO jobs (project, queue, task, args, priority, run_next, run_at, max_attempts,
                  created_at, updated_at, run_id, node_id, node_item, node_generation,
                  timeout, required_model, vram_mb, delayed, concurrency_key, gpus)
SELECT %(project)s, %(queue)s, %(task)s, batch.value, %(priority)s, %(run_next)s,
       coalesce(%(run_at)s::double precision, rowfleet_now(%(now)s) + %(delay)s),
       %(max_attempts)s, rowfleet_now(%(now)s), rowfleet_now(%(now)s), %(run_id)s::bigint, %(node_id)s::text,
       CASE WHEN %(run_id)s::bigint IS NOT NULL THEN batch.n - 1 END, %(node_generation)s::integer,
       %(timeout)s::double precision, %(model)s::text, %(vram_mb)s::integer,
       CASE WHEN coalesce(%(run_at)s::double precision, rowfleet_now(%(now)s) + %(delay)s) > rowfleet_now(%(now)s)
            THEN 1 ELSE 0 END,
       %(concurrency_key)s::text, %(gpus)s::integer
FROM jsonb_array_elements_text(%(args_list)s::jsonb) WITH ORDINALITY AS batch(value, n)
ORDER BY batch.n;

-- name: lock_unique
-- Serialize the enqueues of one duplicate key across every connection until this
-- transaction ends, so that two concurrent enqueues of a duplicate write one job.
SELECT pg_advisory_xact_lock(hashtextextended(%(project)s || chr(31) || %(queue)s || chr(31) || %(unique_key)s, 0));

-- name: unique_pending
-- The jobs of a duplicate key that wait or run (jobs_unique).
SELECT * FROM jobs
WHERE project = %(project)s AND queue = %(queue)s AND unique_key = %(unique_key)s
  AND unique_key IS NOT NULL AND state IN ('queued', 'running')
ORDER BY id;

-- name: debounce
-- A duplicate enqueued within the debounce window pushes the waiting job's start: out of the
-- claim index (delayed) until it falls due.
UPDATE jobs SET run_at = greatest(run_at, rowfleet_now(%(now)s) + %(debounce)s), delayed = 1, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'queued'
RETURNING *;

-- name: job_by_key
SELECT * FROM jobs WHERE project = %(project)s AND idempotency_key = %(key)s;

-- name: get_job
SELECT * FROM jobs WHERE id = %(id)s AND project = %(project)s;

-- name: job_holder
-- Who holds a job now, and the attempt its row holds (whose claim and completion are no
-- event rows: Store.events gives them from here).
SELECT state, lease_token, claimed_by, attempts, started_at, finished_at FROM jobs WHERE id = %(id)s;

-- fragment: due_candidates
-- The jobs due in a claim's project and queue: queued, not delayed (so the jobs_claim and
-- jobs_model indexes hold them) and due. run_at is still compared: a row written by plain
-- SQL may be due later without being marked delayed.
state = 'queued' AND delayed = 0 AND project = %(project)s AND queue = %(queue)s AND run_at <= rowfleet_now(%(now)s)

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
(gpus IS NULL OR gpus <= %(gpus_free)s::integer)

-- fragment: memory_fit
-- Whether a job fits the memory a GPU claim has free (%(vram_free_mb)s; NULL: no limit, and
-- a job that names no vram_mb fits anywhere). Written here only: every GPU form includes it.
(%(vram_free_mb)s::integer IS NULL OR vram_mb IS NULL OR vram_mb <= %(vram_free_mb)s::integer)

-- fragment: kind_candidates
-- A routed claim's candidates of one model (kind.model) that fit the free memory: what
-- each probe of jobs_model looks for.
{{claim_candidates}} AND required_model = kind.model AND {{memory_fit}} AND {{key_free}}

-- fragment: plain_kind
-- Plain jobs' (model NULL) best job that fits the free memory, in claim order, locked (SKIP
-- LOCKED), at %(plain_preference)s unless that is NULL (the lane leaves them out): a probe of
-- its own beside the models' (kind_probe), so that each probe is an index walk.
SELECT plain.*, %(plain_preference)s::integer FROM (
    SELECT id, run_next, priority, run_at FROM jobs
    WHERE {{claim_candidates}}
      AND required_model IS NULL AND {{memory_fit}} AND {{key_free}} AND %(plain_preference)s::integer IS NOT NULL
    ORDER BY run_next DESC, priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) AS plain

-- fragment: plain_kind [newest]
-- As kind_probe [newest], for plain jobs.
SELECT plain.*, %(plain_preference)s::integer FROM (
    SELECT id, run_next, priority, run_at FROM jobs
    WHERE {{claim_candidates}}
      AND required_model IS NULL AND {{memory_fit}} AND {{key_free}} AND %(plain_preference)s::integer IS NOT NULL
      AND (run_next, priority) = (
          SELECT run_next, priority FROM jobs
          WHERE {{claim_candidates}}
            AND required_model IS NULL AND {{memory_fit}} AND {{key_free}} AND %(plain_preference)s::integer IS NOT NULL
          ORDER BY run_next DESC, priority, run_at, id LIMIT 1)
    ORDER BY run_next DESC, priority, run_at DESC, id DESC LIMIT 1 FOR UPDATE SKIP LOCKED) AS plain

-- fragment: routed_kinds
-- The models a routed claim's gate lets in (%(gate)s, a JSON object of model -> preference),
-- each with its preference; plain jobs are probed on their own (plain_kind).
(SELECT gate.model, gate.preference::integer AS preference
 FROM jsonb_each_text(%(gate)s::jsonb) AS gate(model, preference)) AS kind

-- fragment: kind_probe
-- One model's (kind.model) best job that fits the free memory, in claim order, locked
-- (SKIP LOCKED): one walk of jobs_model, run once per model (LATERAL).
(SELECT id, run_next, priority, run_at FROM jobs
 WHERE {{kind_candidates}}
 ORDER BY run_next DESC, priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)

-- fragment: kind_probe [newest]
-- Newest first (an overflow box), keeping run-next and priority first: a first probe finds
-- the best (run_next, priority), a second the newest job of it, so both stay index walks.
(SELECT id, run_next, priority, run_at FROM jobs
 WHERE {{kind_candidates}}
   AND (run_next, priority) = (
       SELECT run_next, priority FROM jobs
       WHERE {{kind_candidates}}
       ORDER BY run_next DESC, priority, run_at, id LIMIT 1)
 ORDER BY run_next DESC, priority, run_at DESC, id DESC LIMIT 1 FOR UPDATE SKIP LOCKED)

-- fragment: pick_order
-- The order a routed claim puts its kinds' best jobs in: run-next, the kind's preference,
-- priority, then due order (oldest first; newest first for an overflow box).
ORDER BY c.run_next DESC, c.preference, c.priority, c.run_at, c.id

-- fragment: pick_order [newest]
ORDER BY c.run_next DESC, c.preference, c.priority, c.run_at DESC, c.id DESC

-- fragment: promotion_candidates
-- The delayed jobs of a claim's (project, queue) that have fallen due (the jobs_delayed index).
state = 'queued' AND delayed = 1 AND project = %(project)s AND queue = %(queue)s AND run_at <= rowfleet_now(%(now)s)

-- fragment: claim_pick
-- The id of the job a plain claim takes (NULL: none), locked (SKIP LOCKED: a job another
-- claim holds is passed over): one walk of jobs_claim in claim order. A fallen-due delayed
-- job waits for promotion.
(SELECT id FROM jobs
 WHERE {{claim_candidates}}
 ORDER BY run_next DESC, priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)

-- fragment: claim_pick [routed, newest]
-- The id of the job a routed claim takes (NULL: none), by the rules and order rowfleet.claim
-- documents (an overflow box's newest first: kind_probe, plain_kind, pick_order), locked
-- (SKIP LOCKED). Its gate (routed_kinds, and %(plain_preference)s for plain jobs) gives one
-- probe of jobs_model per model (LATERAL), and one for plain jobs, each the best of its kind
-- in claim order and fitting the free memory; the few found are then put in order by
-- run-next, their kind's preference, priority and due order. Each form is its own
-- statement, so that the planner plans only the probes it runs (planning dominated a claim
-- of all forms in one).
(SELECT c.id FROM (
    SELECT probe.*, kind.preference
    FROM {{routed_kinds}}
    CROSS JOIN LATERAL {{kind_probe}} AS probe
    UNION ALL
    {{plain_kind}}
 ) AS c
 {{pick_order}}
 LIMIT 1)

-- fragment: claim_pick [warm]
-- The first form of a claim whose warm model goes first (Claim.warm_first): while no
-- run-next job is due in the queue (jobs_claim's run-next range is empty), the warm model's
-- best job is the one the routed claim would take, so one probe of jobs_model finds it,
-- locked (SKIP LOCKED). NULL when that does not hold: the store then runs the routed form.
(SELECT id FROM jobs
 WHERE {{claim_candidates}}
   AND required_model = %(warm_model)s::text AND {{memory_fit}} AND {{key_free}}
   AND NOT EXISTS (SELECT 1 FROM jobs WHERE {{claim_candidates}} AND run_next >= 1)
 ORDER BY run_next DESC, priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)

-- fragment: claim_due
-- Whether claim_pick would find a job, as a condition: the same rules, asking only whether
-- a probe finds one, and locking nothing (the walk in its index's order, so that the
-- planner takes jobs_claim).
(SELECT 1 FROM jobs
 WHERE {{claim_candidates}}
 ORDER BY run_next DESC, priority, run_at, id LIMIT 1) IS NOT NULL

-- fragment: claim_due [routed, newest, warm]
EXISTS (SELECT 1 FROM jsonb_object_keys(%(gate)s::jsonb) AS kind(model)
        WHERE EXISTS (SELECT 1 FROM jobs
                      WHERE {{kind_candidates}}))
OR (%(plain_preference)s::integer IS NOT NULL
    AND EXISTS (SELECT 1 FROM jobs
                WHERE {{claim_candidates}}
                  AND required_model IS NULL AND {{memory_fit}} AND {{key_free}}))

-- fragment: promotion_allowed
-- A fallen-due delayed job counts for has_due only if the claim may take it once promoted:
-- claim_pick's rules as a condition on one row (a plain claim may take any).
TRUE

-- fragment: promotion_allowed [routed, newest, warm]
{{memory_fit}}
AND CASE WHEN required_model IS NULL THEN %(plain_preference)s::integer IS NOT NULL
         ELSE %(gate)s::jsonb ? required_model END

-- fragment: claimed_set
-- What a claim writes to the job it takes. warm_claim: the worker already held its model;
-- host: the holder's host, which stays when the job is requeued or ends.
state = 'running', attempts = attempts + 1, lease_token = lease_token + 1,
claimed_by = %(holder)s, host = %(host)s, lease_expires_at = rowfleet_now(%(now)s) + %(lease)s,
started_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s),
warm_claim = CASE WHEN required_model IS NOT NULL AND required_model = %(warm_model)s::text THEN 1 ELSE 0 END

-- name: claim
UPDATE jobs
SET {{claimed_set}}
WHERE id = {{claim_pick}} AND {{claim_candidates}}
RETURNING *;

-- name: claim_batch
-- Up to :limit jobs at once, for a worker that prefetches (worker --prefetch): the plain
-- claim's pick as a range of jobs_claim in claim order, locked (SKIP LOCKED), each given its
-- own token. The picked ids are an array, evaluated once, then each a probe of the key: as
-- a join or an IN (subquery) the planner may run the pick again per row (each run locking
-- :limit more), and with the claim's conditions repeated here, stale statistics led it to
-- walk every queued row of the queue through jobs_state to find the few picked (55 ms a
-- claim at 16,000 queued). The pick re-checked each row as it locked it, and the lock
-- keeps every other writer off it until this commits, so the state is all left to check.
-- RETURNING gives no order: the store sorts them.
UPDATE jobs
SET {{claimed_set}}
WHERE id = ANY (ARRAY(
        SELECT id FROM jobs
        WHERE {{claim_candidates}}
        ORDER BY run_next DESC, priority, run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED))
  AND state = 'queued'
RETURNING *;

-- name: has_due
-- A delayed job that has fallen due counts (if the claim may take it): the claim that
-- follows promotes it. The delayed half is ordered as jobs_delayed is, so that the planner
-- walks that index rather than every queued row of the queue.
SELECT 1 AS due
WHERE {{claim_due}}
   OR (SELECT 1 FROM jobs WHERE {{promotion_candidates}} AND {{promotion_allowed}} ORDER BY run_at LIMIT 1) IS NOT NULL;

-- name: promote_due
-- Delayed jobs that have fallen due join the claim index, soonest first, %(limit)s at most;
-- rows another transaction holds are left to the next promotion.
UPDATE jobs SET delayed = 0
WHERE id IN (SELECT id FROM jobs
             WHERE {{promotion_candidates}}
             ORDER BY run_at
             LIMIT %(limit)s
             FOR UPDATE SKIP LOCKED);

-- name: renew
-- Also tells the holder, at no extra cost, whether an operator asked it to stop the job.
UPDATE jobs SET lease_expires_at = rowfleet_now(%(now)s) + %(lease)s, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING lease_expires_at, cancel_requested_at, cancel_reason;

-- name: finish
UPDATE jobs
SET state = %(state)s, result = %(result)s, error = %(error)s, traceback = %(traceback)s,
    lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: finish_requeue
UPDATE jobs
SET state = 'queued', error = %(error)s, traceback = %(traceback)s, run_at = rowfleet_now(%(now)s) + %(delay)s,
    delayed = CASE WHEN %(delay)s > 0 THEN 1 ELSE 0 END, lease_expires_at = NULL, claimed_by = NULL, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
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
-- lease cost every claim, renewal and finish an index write, and kept renewals from being
-- heap-only updates). The projects as an array: as a join, a planner walked all of
-- jobs_state instead.
jobs
WHERE project = ANY (ARRAY(SELECT project FROM projects WHERE project IS NOT NULL)) AND state = 'running'

-- name: reclaim_lapsed
{{projects_seek}}
SELECT id, project, lease_token, claimed_by, lease_expires_at, attempts, max_attempts, watchdog_retries, run_id,
       cancel_reason, cancel_requested_at
FROM {{running_rows}} AND lease_expires_at < coalesce(%(as_of)s::double precision, rowfleet_now(%(now)s))
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE OF jobs SKIP LOCKED;

-- name: reclaim_unheld
-- Running jobs whose row names no holder a sweep could see lose them (liveness.unheld): no
-- lease, a lease that is no time (NaN sorts after every number, and an infinity is no
-- sooner, so neither ever lapses), or no worker named.
{{projects_seek}}
SELECT id, project, lease_token, claimed_by, lease_expires_at, attempts, max_attempts, run_id, cancel_reason,
       cancel_requested_at
FROM {{running_rows}}
  AND (lease_expires_at IS NULL OR claimed_by IS NULL OR NOT (lease_expires_at < 'Infinity'::double precision))
LIMIT %(limit)s
FOR UPDATE OF jobs SKIP LOCKED;

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
    error = %(error)s, delayed = 0, lease_expires_at = NULL, claimed_by = NULL,
    {{lost_band}}, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s AND lease_expires_at < rowfleet_now(%(now)s)
RETURNING id;

-- name: job_fail_lapsed
-- %(state)s is failed, or cancelled for a job that was not to run again (its run ended, or
-- an operator asked for it to be cancelled).
UPDATE jobs
SET state = %(state)s, error = %(error)s, lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s AND lease_expires_at < rowfleet_now(%(now)s)
RETURNING id;

-- name: cancel
UPDATE jobs SET state = 'cancelled', error = %(reason)s, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND project = %(project)s AND state = 'queued'
RETURNING *;

-- name: cancel_unheld
-- A running job whose row names no holder that could be asked to stop it
-- (liveness.unheld) is cancelled at once, if its row is still the one read.
UPDATE jobs SET state = 'cancelled', error = %(reason)s, lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s),
    updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND project = %(project)s AND state = 'running' AND lease_token = %(token)s
RETURNING *;

-- name: never_due
-- Queued jobs whose run_at is no number: NaN sorts after every number, so no claim's due
-- filter (run_at <= now) ever matches one. Found without walking the queue: a claim index
-- keeps them last in each of its parts (jobs_claim: per project, queue, run-next and
-- priority; jobs_delayed: per project and queue), so the parts' first rows are found one
-- seek each (claim_parts, delayed_parts: the next part's first row after a part's), and
-- one seek more past each part's numbers finds them.
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
WHERE id IN (SELECT id FROM jobs
             WHERE state = 'queued' AND delayed = 0 AND run_at = 'NaN'::double precision
               AND (project, queue, run_next, priority) IN (SELECT project, queue, run_next, priority FROM jobs
                                                            WHERE id IN (SELECT id FROM claim_parts))
             UNION ALL
             SELECT id FROM jobs
             WHERE state = 'queued' AND delayed = 1 AND run_at = 'NaN'::double precision
               AND (project, queue) IN (SELECT project, queue FROM jobs WHERE id IN (SELECT id FROM delayed_parts)))
LIMIT %(limit)s
FOR UPDATE OF jobs SKIP LOCKED;

-- name: fail_never_due
UPDATE jobs SET state = 'failed', error = %(error)s, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'queued'
RETURNING *;

-- name: request_cancel
-- Asks the worker holding a running job to stop it; the first request's time and reason stay.
UPDATE jobs SET cancel_requested_at = rowfleet_now(%(now)s), cancel_reason = %(reason)s,
    updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND project = %(project)s AND state = 'running' AND cancel_requested_at IS NULL
RETURNING *;

-- name: prioritize
UPDATE jobs SET run_next = 1, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND project = %(project)s AND state = 'queued' AND run_next = 0
RETURNING *;

-- name: retry
UPDATE jobs
SET state = 'queued', run_at = rowfleet_now(%(now)s), delayed = 0, max_attempts = greatest(max_attempts, attempts + 1),
    error = NULL, traceback = NULL, finished_at = NULL, lease_expires_at = NULL, claimed_by = NULL, updated_at = rowfleet_now(%(now)s),
    cancel_requested_at = NULL, cancel_reason = NULL
WHERE id = %(id)s AND project = %(project)s AND state IN ('failed', 'cancelled')
RETURNING *;

-- name: list_jobs
SELECT * FROM jobs
WHERE project = %(project)s
  AND (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: counts
SELECT project, queue, state, count(*) AS n FROM jobs
GROUP BY project, queue, state
ORDER BY project, queue, state;

-- name: record_event
INSERT INTO job_events (job_id, at, kind, detail) VALUES (%(job_id)s, rowfleet_now(%(now)s), %(kind)s, %(detail)s);

-- name: events
-- In time order: an attempt's events written when the attempt was over (the
-- jobs_attempt_history trigger) carry the moments they happened at.
SELECT * FROM job_events WHERE job_id = %(job_id)s ORDER BY at, id;

-- fragment: prunable
-- A finished job past the retention period whose finish the tallies have counted, oldest first.
SELECT id FROM jobs
WHERE finished_at < rowfleet_now(%(now)s) - %(retention)s AND state IN ('completed', 'failed', 'cancelled')
  AND tallied_at IS NOT DISTINCT FROM finished_at
ORDER BY finished_at LIMIT %(limit)s

-- name: prune_events
DELETE FROM job_events WHERE job_id IN ({{prunable}});

-- name: prune_jobs
DELETE FROM jobs WHERE id IN ({{prunable}});

-- fragment: finished_turn
-- A terminal outcome as common table expressions: the job's terminal state (``finished``,
-- only while the token still holds the lease), its event (none for a completion: the row
-- holds it) and a workflow node's dispatch event.
finished AS (
    UPDATE jobs
    SET state = %(state)s, result = %(result)s, error = %(error)s, traceback = %(traceback)s,
        lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
    WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
    RETURNING id, project, run_id, node_id
), finished_event AS (
    INSERT INTO job_events (job_id, at, kind, detail)
    SELECT id, rowfleet_now(%(now)s), %(kind)s, %(detail)s FROM finished WHERE %(kind)s <> 'completed'
), finished_dispatch AS (
    INSERT INTO dispatch_events (project, run_id, node_id, job_id, kind, created_at)
    SELECT project, run_id, node_id, id, 'job_finished', rowfleet_now(%(now)s) FROM finished
    WHERE run_id IS NOT NULL
)

-- name: finish_terminal
-- A terminal outcome with no claim after it in one statement (one round trip, atomic in
-- autocommit): a prefetching worker's job whose next one it holds already.
WITH {{finished_turn}}
SELECT count(*) AS finished FROM finished;

-- name: finish_many
-- Several terminal outcomes in one statement (worker --batch): finished_turn for each row
-- of the arrays, each guarded by its own token; the ids written come back, and a job whose
-- token is stale is simply not among them.
WITH outcome AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(states)s::text[], %(results)s::text[],
                         %(errors)s::text[], %(tracebacks)s::text[], %(kinds)s::text[], %(details)s::text[])
        AS given (id, token, state, result, error, traceback, kind, detail)
), finished AS (
    UPDATE jobs
    SET state = outcome.state, result = outcome.result, error = outcome.error, traceback = outcome.traceback,
        lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
    FROM outcome
    WHERE jobs.id = outcome.id AND jobs.state = 'running' AND jobs.lease_token = outcome.token
    RETURNING jobs.id, jobs.project, jobs.run_id, jobs.node_id
), finished_event AS (
    INSERT INTO job_events (job_id, at, kind, detail)
    SELECT finished.id, rowfleet_now(%(now)s), outcome.kind, outcome.detail
    FROM finished JOIN outcome ON outcome.id = finished.id WHERE outcome.kind <> 'completed'
), finished_dispatch AS (
    INSERT INTO dispatch_events (project, run_id, node_id, job_id, kind, created_at)
    SELECT project, run_id, node_id, id, 'job_finished', rowfleet_now(%(now)s) FROM finished
    WHERE run_id IS NOT NULL
)
SELECT id FROM finished;

-- name: finish_and_claim
-- A busy worker's whole turn in one statement (one round trip, atomic in autocommit): the
-- terminal outcome, then the claim of the next job of the queue, but only if the finish
-- still held the lease.
WITH {{finished_turn}}, claimed AS (
    UPDATE jobs
    SET {{claimed_set}}
    WHERE id = {{claim_pick}} AND {{claim_candidates}}
      AND EXISTS (SELECT 1 FROM finished)
    RETURNING *
)
SELECT (SELECT count(*) FROM finished) AS finished, claimed.*
FROM (SELECT 1) AS turn LEFT JOIN claimed ON true;

-- name: listen_done
-- A waiter for jobs (rowfleet.wait) waits on this channel; the jobs_notify_done trigger sends
-- the id of each job marked waited as it ends.
LISTEN rowfleet_done;

-- name: mark_waited
-- Mark a job that has not ended as waited for, so that its end notifies (after the waiter's
-- LISTEN: an end before the mark is seen by the waiter's own read of the row).
UPDATE jobs SET waited = 1
WHERE id = %(id)s AND project = %(project)s AND waited = 0 AND state NOT IN ('completed', 'failed', 'cancelled');

-- name: listen_jobs
-- Idle workers wait on this channel; the jobs_notify_queued trigger sends the queue's name.
LISTEN rowfleet_jobs;

-- name: progress
UPDATE jobs SET progress = %(progress)s, progress_message = %(message)s, progress_at = rowfleet_now(%(now)s), updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: watchdog_trip
-- A watchdog fault spends a watchdog retry; an operator stop gives back the attempt.
UPDATE jobs SET watchdog_retries = watchdog_retries + %(spent)s, attempts = attempts - %(refund)s, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: job_hand_back
-- Back to the queue at once, keeping its run_at: it goes ahead of fresh work again.
UPDATE jobs
SET state = 'queued', error = %(error)s, delayed = 0, lease_expires_at = NULL, claimed_by = NULL, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: job_lost
-- As job_hand_back, for a job lost with its worker (gone, exited, or never named): in its
-- place or the front band, as its queue chooses.
UPDATE jobs
SET state = 'queued', error = %(error)s, delayed = 0, lease_expires_at = NULL, claimed_by = NULL,
    {{lost_band}}, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: job_lease_lost
-- As job_hand_back, for a holder that lost its lease (it exited 81, cut off): the attempt
-- given back and a watchdog retry spent instead, as a lapse would (liveness.lapse_outcome).
UPDATE jobs
SET state = 'queued', attempts = attempts - 1, watchdog_retries = watchdog_retries + 1,
    error = %(error)s, delayed = 0, lease_expires_at = NULL, claimed_by = NULL,
    {{lost_band}}, updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: hand_back
-- A claimed job given back unrun, which is no fault: queued again at once with its run_at
-- (ahead of fresh work), and the attempt its claim counted given back.
UPDATE jobs
SET state = 'queued', attempts = attempts - 1, delayed = 0, lease_expires_at = NULL, claimed_by = NULL,
    updated_at = rowfleet_now(%(now)s)
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
RETURNING id;

-- name: model_backlog
-- Per model, the due queued jobs of one queue and how long the oldest of them has waited
-- (read from the jobs_model index).
SELECT required_model AS model, count(*) AS queued, rowfleet_now(%(now)s) - min(run_at) AS oldest_wait
FROM jobs
WHERE {{due_candidates}}
  AND required_model IS NOT NULL
GROUP BY required_model
ORDER BY required_model;

-- name: jobs_of_silent_worker
-- The running jobs a worker claimed in its lifetime: since its row was made (its first
-- heartbeat comes before its first claim), and before a newer worker with the same
-- host:pid appeared (pids are reused). Rows locked by a frozen renewal are left to their lease.
SELECT id, project, lease_token, claimed_by, attempts, max_attempts, watchdog_retries, run_id, cancel_reason,
       cancel_requested_at
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

-- Placement: which queued model jobs no GPU worker can hold (the orchestrator's sweep).

-- name: model_demand
-- The project's model jobs that are queued or running, one row per (queue, model, job
-- vram_mb, state, unplaceable reason) with its count: what placement is decided on, a
-- group at a time, never job by job. %(limit)s groups at most.
SELECT queue, required_model AS model, vram_mb, state, unplaceable, count(*) AS n,
       min(created_at) AS oldest, min(unplaceable_at) AS unplaceable_since
FROM jobs
WHERE project = %(project)s AND state IN ('queued', 'running') AND required_model IS NOT NULL
GROUP BY queue, required_model, vram_mb, state, unplaceable
ORDER BY queue, required_model, vram_mb, state, unplaceable
LIMIT %(limit)s;

-- name: flag_unplaceable
-- One batch of a group's queued jobs whose reason is still %(was)s (NULL: placeable) gets
-- %(reason)s. unplaceable_at keeps the start of the stretch: a reason that changes does not
-- restart it. A row a claim holds is skipped, not waited for: the next sweep sees it.
UPDATE jobs
SET unplaceable = %(reason)s,
    unplaceable_at = CASE WHEN unplaceable IS NULL THEN rowfleet_now(%(now)s) ELSE unplaceable_at END,
    updated_at = rowfleet_now(%(now)s)
WHERE id IN (SELECT id FROM jobs
             WHERE project = %(project)s AND queue = %(queue)s AND state = 'queued' AND required_model = %(model)s
               AND vram_mb IS NOT DISTINCT FROM %(vram_mb)s::integer
               AND unplaceable IS NOT DISTINCT FROM %(was)s::text
             ORDER BY id LIMIT %(limit)s
             FOR UPDATE SKIP LOCKED)
  AND state = 'queued' AND unplaceable IS NOT DISTINCT FROM %(was)s::text
RETURNING id;

-- name: clear_unplaceable
-- One batch of a group's jobs (queued, or running: a worker took it) flagged %(was)s is placeable again.
UPDATE jobs SET unplaceable = NULL, unplaceable_at = NULL, updated_at = rowfleet_now(%(now)s)
WHERE id IN (SELECT id FROM jobs
             WHERE project = %(project)s AND queue = %(queue)s AND state = %(state)s AND required_model = %(model)s
               AND vram_mb IS NOT DISTINCT FROM %(vram_mb)s::integer AND unplaceable = %(was)s
             ORDER BY id LIMIT %(limit)s
             FOR UPDATE SKIP LOCKED)
  AND state = %(state)s AND unplaceable = %(was)s
RETURNING id;

-- name: fail_unplaceable
-- One batch of a group's queued jobs unplaceable (for %(reason)s now) since %(before)s or earlier: failed.
UPDATE jobs
SET state = 'failed', error = %(error)s, lease_expires_at = NULL, finished_at = rowfleet_now(%(now)s),
    updated_at = rowfleet_now(%(now)s)
WHERE id IN (SELECT id FROM jobs
             WHERE project = %(project)s AND queue = %(queue)s AND state = 'queued' AND required_model = %(model)s
               AND vram_mb IS NOT DISTINCT FROM %(vram_mb)s::integer AND unplaceable = %(reason)s
               AND unplaceable_at <= %(before)s
             ORDER BY id LIMIT %(limit)s
             FOR UPDATE SKIP LOCKED)
  AND state = 'queued' AND unplaceable = %(reason)s AND unplaceable_at <= %(before)s
RETURNING *;

-- name: model_claims
-- Per model, the claims since %(since)s of its jobs running now or finished since (the last
-- %(cap)s finished, by the jobs_finished index), and how many of them were warm: no job is
-- read that finished before %(since)s.
SELECT model, count(*) AS claims, coalesce(sum(warm_claim), 0) AS warm
FROM ((SELECT required_model AS model, warm_claim FROM jobs
       WHERE finished_at >= %(since)s AND project = %(project)s AND required_model IS NOT NULL
         AND started_at >= %(since)s
       ORDER BY finished_at DESC LIMIT %(cap)s)
      UNION ALL
      (SELECT required_model, warm_claim FROM jobs
       WHERE project = %(project)s AND state = 'running' AND required_model IS NOT NULL
         AND started_at >= %(since)s)) AS claimed
GROUP BY model
ORDER BY model;

-- name: find_job
SELECT * FROM jobs WHERE id = %(id)s;

-- name: search_jobs
-- A page of the panel's job search, newest first: only ids in [floor, before), a window the
-- caller bounds, so a filter that matches little never walks every kept job in one request.
SELECT * FROM jobs
WHERE id < %(before)s AND id >= %(floor)s
  AND (%(project)s::text IS NULL OR project = %(project)s)
  AND (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
  AND (%(host)s::text IS NULL OR host = %(host)s)
  AND (%(model)s::text IS NULL OR required_model = %(model)s)
  AND (%(needle)s::text IS NULL OR strpos(args, %(needle)s) > 0)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: jobs_in_state
-- The jobs of one project in one state that match the panel's filter, for a bulk action:
-- jobs_state serves (project, state[, queue]), in no order, so the cap bounds the walk.
SELECT id FROM jobs
WHERE project = %(project)s AND state = %(state)s
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
  AND (%(host)s::text IS NULL OR host = %(host)s)
  AND (%(model)s::text IS NULL OR required_model = %(model)s)
  AND (%(needle)s::text IS NULL OR strpos(args, %(needle)s) > 0)
LIMIT %(limit)s;

-- name: newest_job_id
SELECT max(id) AS id FROM jobs;

-- name: finished_per_minute
-- Jobs finished since a time, per project, queue, state and minute (jobs_finished serves it).
SELECT project, queue, state, floor(finished_at / 60)::bigint AS minute, count(*) AS n
FROM jobs
WHERE finished_at >= %(since)s
GROUP BY project, queue, state, floor(finished_at / 60)::bigint;

-- name: jobs_ended_since
-- Jobs that ran somewhere and finished since a time, newest first, capped: the ticks of the
-- Flight Deck's time axis.
SELECT id, project, queue, task, state, host, started_at, finished_at FROM jobs
WHERE finished_at >= %(since)s AND host IS NOT NULL
ORDER BY finished_at DESC
LIMIT %(limit)s;

-- name: jobs_running
-- Every running job with a lease, where it runs and since when (the caller sorts).
{{projects_seek}}
SELECT id, project, queue, task, state, host, started_at, finished_at
FROM {{running_rows}} AND lease_expires_at IS NOT NULL;

-- name: jobs_ahead
-- How many due queued jobs of a job's (project, queue) a claim takes before a job sorting
-- at (%(run_next)s, %(priority)s, %(run_at)s, %(id)s), in claim order (run-next first,
-- then priority, due order, id), each part counted up to %(cap)s + 1 so that a deep queue
-- is never walked whole: one range of jobs_claim per step of that order, and the delayed
-- jobs that have fallen due (a claim promotes them into its order; the jobs_delayed index).
SELECT (SELECT count(*) FROM (SELECT 1 FROM jobs
                              WHERE state = 'queued' AND delayed = 0 AND project = %(project)s AND queue = %(queue)s
                                AND run_next > %(run_next)s AND run_at <= rowfleet_now(%(now)s)
                              LIMIT %(cap)s + 1) AS part)
     + (SELECT count(*) FROM (SELECT 1 FROM jobs
                              WHERE state = 'queued' AND delayed = 0 AND project = %(project)s AND queue = %(queue)s
                                AND run_next = %(run_next)s AND priority < %(priority)s AND run_at <= rowfleet_now(%(now)s)
                              LIMIT %(cap)s + 1) AS part)
     + (SELECT count(*) FROM (SELECT 1 FROM jobs
                              WHERE state = 'queued' AND delayed = 0 AND project = %(project)s AND queue = %(queue)s
                                AND run_next = %(run_next)s AND priority = %(priority)s AND run_at < %(run_at)s
                                AND run_at <= rowfleet_now(%(now)s)
                              LIMIT %(cap)s + 1) AS part)
     + (SELECT count(*) FROM (SELECT 1 FROM jobs
                              WHERE state = 'queued' AND delayed = 0 AND project = %(project)s AND queue = %(queue)s
                                AND run_next = %(run_next)s AND priority = %(priority)s AND run_at = %(run_at)s
                                AND id < %(id)s AND run_at <= rowfleet_now(%(now)s)
                              LIMIT %(cap)s + 1) AS part)
     + (SELECT count(*) FROM (SELECT 1 FROM jobs
                              WHERE state = 'queued' AND delayed = 1 AND project = %(project)s AND queue = %(queue)s
                                AND run_at <= rowfleet_now(%(now)s)
                                AND (run_next > %(run_next)s
                                     OR (run_next = %(run_next)s AND (priority < %(priority)s
                                         OR (priority = %(priority)s AND (run_at < %(run_at)s
                                             OR (run_at = %(run_at)s AND id < %(id)s))))))
                              LIMIT %(cap)s + 1) AS part) AS n;
