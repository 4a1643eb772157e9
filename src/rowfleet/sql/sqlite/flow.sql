-- rowfleet's queries for SQLite: flow control: an operator's limits per (project, queue), and the reads and writes of a limited claim (rowfleet.flow states the rules).

-- name: set_limit
INSERT INTO flow_limits (project, queue, concurrency, per_key, rate_count, rate_seconds, key_rate_count,
                         key_rate_seconds, fair, lost_first, updated_at, updated_by)
VALUES (:project, :queue, :concurrency, :per_key, :rate_count, :rate_seconds, :key_rate_count, :key_rate_seconds,
        :fair, :lost_first, :now, :by)
ON CONFLICT (project, queue) DO UPDATE SET
    concurrency = excluded.concurrency, per_key = excluded.per_key, rate_count = excluded.rate_count,
    rate_seconds = excluded.rate_seconds, key_rate_count = excluded.key_rate_count,
    key_rate_seconds = excluded.key_rate_seconds, fair = excluded.fair, lost_first = excluded.lost_first, updated_at = excluded.updated_at,
    updated_by = excluded.updated_by
RETURNING *;

-- name: clear_limit
DELETE FROM flow_limits WHERE project = :project AND queue = :queue;

-- name: limit_of
SELECT * FROM flow_limits WHERE project = :project AND queue = :queue;

-- name: all_limits
SELECT *, :now AS now FROM flow_limits ORDER BY queue, project;

-- name: limited_queues
-- The queues of a project that some limit rows hold (its own, or every project's): a row
-- that only puts lost jobs first (lost_first) holds no claim.
SELECT DISTINCT queue FROM flow_limits WHERE project IN (:project, '*')
  AND (concurrency IS NOT NULL OR per_key IS NOT NULL OR rate_count IS NOT NULL OR key_rate_count IS NOT NULL
       OR fair <> 0);

-- name: flow_limits_read
-- The limits a claim of (project, queue) is under, with the time its rules compare against.
SELECT *, :now AS now FROM flow_limits WHERE queue = :queue AND project IN (:project, '*') ORDER BY project;

-- name: flow_limits_lock
-- As flow_limits_read, for the claim that follows: the claim's BEGIN IMMEDIATE already holds
-- the only write lock, so every other claim waits for this one's count and start.
SELECT *, :now AS now FROM flow_limits WHERE queue = :queue AND project IN (:project, '*') ORDER BY project;

-- name: flow_running
-- A queue's running jobs by key (jobs_state: as many as the fleet has workers).
SELECT concurrency_key, count(*) AS running FROM jobs
WHERE project = :project AND state = 'running' AND queue = :queue
GROUP BY concurrency_key;

-- name: flow_running_every
-- As flow_running, over every project (an every-project limit).
{{projects_seek}}
SELECT concurrency_key, count(*) AS running FROM {{running_rows}} AND queue = :queue
GROUP BY concurrency_key;

-- name: flow_window
SELECT starts, ready_at, last_started_at FROM flow_keys WHERE project = :scope AND queue = :queue AND key = :key;

-- name: flow_spent_keys
-- The keys whose rate window is full now (flow_keys_ready).
SELECT key FROM flow_keys WHERE project = :scope AND queue = :queue AND ready_at > :now AND key <> '';

-- name: flow_started
-- A start, recorded on a key's row: when it started and, for a rate (:windowed), the window
-- after it (its starts, and when a full one next allows another); a start no rate counts
-- keeps the window stored.
INSERT INTO flow_keys (project, queue, key, starts, ready_at, last_started_at)
VALUES (:scope, :queue, :key, :starts, :ready_at, :started_at)
ON CONFLICT (project, queue, key) DO UPDATE SET
    starts = CASE WHEN :windowed = 1 THEN excluded.starts ELSE flow_keys.starts END,
    ready_at = CASE WHEN :windowed = 1 THEN excluded.ready_at ELSE flow_keys.ready_at END,
    last_started_at = excluded.last_started_at;

-- fragment: claim_order
ORDER BY run_next DESC, priority, run_at, id

-- name: flow_ahead
-- The first jobs a claim could take, in claim order, with their keys: a keyed claim takes
-- the first whose key no rule holds (one walk of jobs_claim, :limit rows at most).
SELECT id, concurrency_key FROM jobs WHERE {{claim_candidates}} {{claim_order}} LIMIT :limit;

-- fragment: key_probe_end [look]
-- A keyed claim's probe of one key, and a look's (has_due): SQLite's write lock is the
-- claim's transaction's, so neither locks a row.
LIMIT 1

-- fragment: key_probe_end
LIMIT 1

-- fragment: same_kind
-- A plain claim's keyed pick takes any kind of job...
1

-- fragment: same_kind [kind]
-- ...and a GPU worker's takes the kind its routing chose (:model, NULL for plain jobs) at
-- the run-next and priority of the routed pick, fitting its free memory: fair share orders
-- the keys within what routing decided (flow.ORDER).
required_model IS :model AND run_next = :run_next AND priority = :priority AND {{memory_fit}}

-- name: flow_routed_pick
-- A GPU worker's routed pick (its claim's own forms, claim_forms), not yet taken: the job,
-- and the kind, run-next and priority that a fair share's pick then keeps to.
SELECT id, required_model, run_next, priority FROM jobs WHERE id = {{claim_pick}};

-- name: flow_pick
-- A keyed claim's pick, key by key, so that a held key's backlog is never walked: each key
-- with due jobs (a skip over jobs_flow, one seek per key), less the held keys (:held, a JSON
-- array), gives its best job; jobs without a key give theirs from the first :limit in claim
-- order. Then run-next, priority, and with :fair the key that started least recently (one
-- never started first), then due order.
WITH RECURSIVE keys(key) AS (
    SELECT (SELECT concurrency_key FROM jobs WHERE {{claim_candidates}} AND {{same_kind}} AND concurrency_key IS NOT NULL
            ORDER BY concurrency_key LIMIT 1)
    UNION ALL
    SELECT (SELECT concurrency_key FROM jobs WHERE {{claim_candidates}} AND {{same_kind}} AND concurrency_key > keys.key
            ORDER BY concurrency_key LIMIT 1)
    FROM keys WHERE keys.key IS NOT NULL
),
best(id, key) AS (
    SELECT (SELECT id FROM jobs WHERE {{claim_candidates}} AND {{same_kind}} AND concurrency_key = keys.key {{claim_order}}
            {{key_probe_end}}),
           keys.key
    FROM keys
    WHERE keys.key IS NOT NULL AND keys.key NOT IN (SELECT value FROM json_each(:held))
    UNION ALL
    SELECT (SELECT ahead.id FROM (SELECT id, concurrency_key FROM jobs WHERE {{claim_candidates}} AND {{same_kind}} {{claim_order}}
                                  LIMIT :limit) AS ahead
            WHERE ahead.concurrency_key IS NULL LIMIT 1), ''
)
SELECT jobs.id FROM best
JOIN jobs ON jobs.id = best.id
LEFT JOIN flow_keys AS seen ON seen.project = :project AND seen.queue = :queue AND seen.key = best.key
ORDER BY jobs.run_next DESC, jobs.priority,
         CASE WHEN :fair THEN coalesce(seen.last_started_at, -1) ELSE 0 END, jobs.run_at, jobs.id
LIMIT 1;

-- name: claim_job
-- A limited claim takes the job its pick chose, re-checked against the candidate rule.
UPDATE jobs SET {{claimed_set}} WHERE id = :id AND {{claim_candidates}} RETURNING *;

-- name: flow_promotable
-- Whether a delayed job of the queue has fallen due (the claim promotes it first).
SELECT 1 FROM jobs WHERE {{promotion_candidates}} ORDER BY run_at LIMIT 1;

-- name: prune_flow_keys
-- Keys not started within the retention whose window is not full: one seen again starts
-- as never seen (first in fair share, an empty window).
DELETE FROM flow_keys WHERE (ready_at IS NULL OR ready_at < :now) AND last_started_at < :now - :retention;

-- fragment: key_free
-- A routed claim's candidates pass over the jobs of the keys its limits hold now
-- (:held_keys, a JSON array; NULL: none held, as for every claim of an unlimited queue).
(:held_keys IS NULL OR concurrency_key IS NULL OR concurrency_key NOT IN (SELECT value FROM json_each(:held_keys)))
