-- rowfleet's queries for PostgreSQL: flow control: an operator's limits per (project, queue), and the reads and writes of a limited claim (rowfleet.flow states the rules).

-- name: set_limit
INSERT INTO flow_limits (project, queue, concurrency, per_key, rate_count, rate_seconds, key_rate_count,
                         key_rate_seconds, fair, lost_first, updated_at, updated_by)
VALUES (%(project)s, %(queue)s, %(concurrency)s, %(per_key)s, %(rate_count)s, %(rate_seconds)s, %(key_rate_count)s, %(key_rate_seconds)s,
        %(fair)s, %(lost_first)s, rowfleet_now(%(now)s), %(by)s)
ON CONFLICT (project, queue) DO UPDATE SET
    concurrency = excluded.concurrency, per_key = excluded.per_key, rate_count = excluded.rate_count,
    rate_seconds = excluded.rate_seconds, key_rate_count = excluded.key_rate_count,
    key_rate_seconds = excluded.key_rate_seconds, fair = excluded.fair, lost_first = excluded.lost_first, updated_at = excluded.updated_at,
    updated_by = excluded.updated_by
RETURNING *;

-- name: clear_limit
DELETE FROM flow_limits WHERE project = %(project)s AND queue = %(queue)s;

-- name: limit_of
SELECT * FROM flow_limits WHERE project = %(project)s AND queue = %(queue)s;

-- name: all_limits
SELECT *, rowfleet_now(%(now)s) AS now FROM flow_limits ORDER BY queue, project;

-- name: limited_queues
-- The queues of a project that some limit rows hold (its own, or every project's): a row
-- that only puts lost jobs first (lost_first) holds no claim.
SELECT DISTINCT queue FROM flow_limits WHERE project IN (%(project)s, '*')
  AND (concurrency IS NOT NULL OR per_key IS NOT NULL OR rate_count IS NOT NULL OR key_rate_count IS NOT NULL
       OR fair <> 0);

-- name: flow_limits_read
-- The limits a claim of (project, queue) is under, with the time its rules compare against.
SELECT *, rowfleet_now(%(now)s) AS now FROM flow_limits WHERE queue = %(queue)s AND project IN (%(project)s, '*') ORDER BY project;

-- name: flow_limits_lock
-- As flow_limits_read, for the claim that follows, locking the rows: every other claim of
-- the queue waits here for this one's count and start (what makes a limit exact across
-- boxes). Its time is read once the rows are locked (now() would be the transaction's
-- start, from before the wait), and the claim's statements then take it as theirs.
WITH locked AS MATERIALIZED (
    SELECT * FROM flow_limits WHERE queue = %(queue)s AND project IN (%(project)s, '*') ORDER BY project FOR UPDATE)
SELECT locked.*, coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision) AS now
FROM locked ORDER BY project;

-- name: flow_running
-- A queue's running jobs by key (jobs_state: as many as the fleet has workers).
SELECT concurrency_key, count(*) AS running FROM jobs
WHERE project = %(project)s AND state = 'running' AND queue = %(queue)s
GROUP BY concurrency_key;

-- name: flow_running_every
-- As flow_running, over every project (an every-project limit).
{{projects_seek}}
SELECT concurrency_key, count(*) AS running FROM {{running_rows}} AND queue = %(queue)s
GROUP BY concurrency_key;

-- name: flow_window
SELECT starts, ready_at, last_started_at FROM flow_keys WHERE project = %(scope)s AND queue = %(queue)s AND key = %(key)s;

-- name: flow_spent_keys
-- The keys whose rate window is full now (flow_keys_ready).
SELECT key FROM flow_keys WHERE project = %(scope)s AND queue = %(queue)s AND ready_at > rowfleet_now(%(now)s) AND key <> '';

-- name: flow_started
-- A start, recorded on a key's row: when it started and, for a rate (the flag), the window
-- after it (its starts, and when a full one next allows another); a start no rate counts
-- keeps the window stored.
INSERT INTO flow_keys (project, queue, key, starts, ready_at, last_started_at)
VALUES (%(scope)s, %(queue)s, %(key)s, %(starts)s, %(ready_at)s, %(started_at)s)
ON CONFLICT (project, queue, key) DO UPDATE SET
    starts = CASE WHEN %(windowed)s = 1 THEN excluded.starts ELSE flow_keys.starts END,
    ready_at = CASE WHEN %(windowed)s = 1 THEN excluded.ready_at ELSE flow_keys.ready_at END,
    last_started_at = excluded.last_started_at;

-- fragment: claim_order
ORDER BY run_next DESC, priority, run_at, id

-- name: flow_ahead
-- The first jobs a claim could take, in claim order, with their keys: a keyed claim takes
-- the first whose key no rule holds (one walk of jobs_claim, %(limit)s rows at most).
SELECT id, concurrency_key FROM jobs WHERE {{claim_candidates}} {{claim_order}} LIMIT %(limit)s;

-- fragment: key_probe_end
-- A keyed claim's probe of one key takes its job locked, skipping locked rows...
LIMIT 1 FOR UPDATE SKIP LOCKED

-- fragment: key_probe_end [look]
-- ...and a look (has_due, in a read-only transaction) locks nothing.
LIMIT 1

-- fragment: same_kind
-- A plain claim's keyed pick takes any kind of job...
TRUE

-- fragment: same_kind [kind]
-- ...and a GPU worker's takes the kind its routing chose (%(model)s, NULL for plain jobs) at
-- the run-next and priority of the routed pick, fitting its free memory: fair share orders
-- the keys within what routing decided (flow.ORDER).
required_model IS NOT DISTINCT FROM %(model)s::text AND run_next = %(run_next)s::integer
AND priority = %(priority)s::integer AND {{memory_fit}}

-- name: flow_routed_pick
-- A GPU worker's routed pick (its claim's own forms, claim_forms), not yet taken but locked:
-- the job, and the kind, run-next and priority that a fair share's pick then keeps to.
SELECT id, required_model, run_next, priority FROM jobs WHERE id = {{claim_pick}};

-- name: flow_pick
-- A keyed claim's pick, key by key, so that a held key's backlog is never walked: each key
-- with due jobs (a skip over jobs_flow, one seek per key), less the held keys (%(held)s, a
-- JSON array), gives its best job (LATERAL, one probe each, locked, SKIP LOCKED: a fair
-- share's claims take no limit's lock, so claims at once take different jobs, as the plain
-- claim's do); jobs without a key give theirs
-- from the first %(limit)s in claim order. Then run-next, priority, and with %(fair)s the key
-- that started least recently (one never started first), then due order. The best jobs
-- carry their order's columns, so that no join goes back to jobs (on a table not analyzed
-- yet, the planner hashed one over every row).
WITH RECURSIVE keys(key) AS (
    SELECT (SELECT concurrency_key FROM jobs WHERE {{claim_candidates}} AND {{same_kind}} AND concurrency_key IS NOT NULL
            ORDER BY concurrency_key LIMIT 1)
    UNION ALL
    SELECT (SELECT concurrency_key FROM jobs WHERE {{claim_candidates}} AND {{same_kind}} AND concurrency_key > keys.key
            ORDER BY concurrency_key LIMIT 1)
    FROM keys WHERE keys.key IS NOT NULL
),
best AS (
    SELECT pick.id, pick.run_next, pick.priority, pick.run_at, keys.key
    FROM keys CROSS JOIN LATERAL (
        SELECT id, run_next, priority, run_at FROM jobs
        WHERE {{claim_candidates}} AND {{same_kind}} AND concurrency_key = keys.key {{claim_order}} {{key_probe_end}}) AS pick
    WHERE keys.key IS NOT NULL AND keys.key NOT IN (SELECT jsonb_array_elements_text(%(held)s::jsonb))
    UNION ALL
    (SELECT ahead.id, ahead.run_next, ahead.priority, ahead.run_at, ''
     FROM (SELECT id, run_next, priority, run_at, concurrency_key FROM jobs WHERE {{claim_candidates}} AND {{same_kind}} {{claim_order}}
           LIMIT %(limit)s) AS ahead
     WHERE ahead.concurrency_key IS NULL
     ORDER BY ahead.run_next DESC, ahead.priority, ahead.run_at, ahead.id LIMIT 1)
)
SELECT best.id FROM best
LEFT JOIN flow_keys AS seen ON seen.project = %(project)s AND seen.queue = %(queue)s AND seen.key = best.key
ORDER BY best.run_next DESC, best.priority,
         CASE WHEN %(fair)s::integer = 1 THEN coalesce(seen.last_started_at, -1) ELSE 0 END, best.run_at, best.id
LIMIT 1;

-- name: claim_job
-- A limited claim takes the job its pick chose, re-checked against the candidate rule.
UPDATE jobs SET {{claimed_set}} WHERE id = %(id)s AND {{claim_candidates}} RETURNING *;

-- name: flow_promotable
-- Whether a delayed job of the queue has fallen due (the claim promotes it first).
SELECT 1 FROM jobs WHERE {{promotion_candidates}} ORDER BY run_at LIMIT 1;

-- name: prune_flow_keys
-- Keys not started within the retention whose window is not full: one seen again starts
-- as never seen (first in fair share, an empty window).
DELETE FROM flow_keys WHERE (ready_at IS NULL OR ready_at < rowfleet_now(%(now)s)) AND last_started_at < rowfleet_now(%(now)s) - %(retention)s;

-- fragment: key_free
-- A routed claim's candidates pass over the jobs of the keys its limits hold now
-- (a JSON array; NULL: none held, as for every claim of an unlimited queue).
(%(held_keys)s::jsonb IS NULL OR concurrency_key IS NULL OR NOT (%(held_keys)s::jsonb ? concurrency_key))
