-- rowfleet schema version 1: jobs, their event log and worker heartbeats.
-- Times are UNIX epoch seconds (REAL) decided by the writer.

CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, even after pruning
    project          TEXT    NOT NULL DEFAULT '',
    queue            TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    args             TEXT    NOT NULL DEFAULT 'null',     -- JSON
    state            TEXT    NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,          -- lower runs sooner
    run_next         INTEGER NOT NULL DEFAULT 0,          -- 1 sorts before every priority
    run_at           REAL    NOT NULL,                    -- not claimable before this
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 5,
    idempotency_key  TEXT,
    lease_token      INTEGER NOT NULL DEFAULT 0,          -- fencing token, +1 on every claim
    claimed_by       TEXT,                                -- "host:pid" of the holder
    lease_expires_at REAL,
    result           TEXT,                                -- JSON
    error            TEXT,
    traceback        TEXT,
    created_at       REAL    NOT NULL,
    updated_at       REAL    NOT NULL,
    started_at       REAL,
    finished_at      REAL
);

-- Serves the claim: walked in claim order, and only queued rows live in it, so finished
-- jobs never slow the hot path. Within a priority, jobs run in due order (run_at, which is
-- the creation time unless delayed), so a job waiting out a delay or a retry backoff sits
-- behind due work instead of being stepped over by every claim.
CREATE INDEX jobs_claim ON jobs (project, queue, run_next DESC, priority, run_at, id)
    WHERE state = 'queued';

-- Serves the reclaim sweep. The second condition keeps a planner from taking this index
-- for the guarded updates (WHERE id = ? AND state = 'running' ...), which the key serves.
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'running' AND lease_expires_at IS NOT NULL;

-- One job per idempotency key and project, for as long as the job is kept.
CREATE UNIQUE INDEX jobs_idempotency ON jobs (project, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Serves pruning and the state listings.
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_state ON jobs (project, state, queue);

CREATE TABLE job_events (
    id      INTEGER PRIMARY KEY,                           -- events go with their job when pruned
    job_id  INTEGER NOT NULL,
    at      REAL    NOT NULL,
    kind    TEXT    NOT NULL,
    detail  TEXT                                           -- JSON object
);
CREATE INDEX job_events_job ON job_events (job_id, id);

CREATE TABLE workers (
    worker_id        TEXT    NOT NULL PRIMARY KEY,        -- "host:pid:started"
    project          TEXT    NOT NULL,
    host             TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    pid              INTEGER NOT NULL,
    current_job      INTEGER,
    started_at       REAL    NOT NULL,
    last_seen        REAL    NOT NULL,
    stopped_at       REAL,
    flagged_dead_at  REAL
);
CREATE INDEX workers_seen ON workers (last_seen);
