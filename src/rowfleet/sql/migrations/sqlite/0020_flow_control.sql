-- rowfleet schema version 20: flow control. A job may carry a concurrency key (a customer,
-- a tenant) that per-key limits and fair share count by. flow_limits holds an operator's
-- limits per (project, queue), project '*' for every project of the database; flow_keys
-- holds each rate window (the times of its last starts within it, as JSON, and when a full
-- window next allows one; key '' is the queue's own) and when a key last started (fair
-- share; key '' for jobs without one). jobs_flow serves a keyed
-- claim's probe of one key's best job, and holds only keyed jobs that wait, so every other
-- job's writes pass it by.
ALTER TABLE jobs ADD COLUMN concurrency_key TEXT;
CREATE INDEX jobs_flow ON jobs (project, queue, concurrency_key, run_next DESC, priority, run_at, id)
    WHERE state = 'queued' AND delayed = 0 AND concurrency_key IS NOT NULL;
CREATE TABLE flow_limits (
    project          TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    concurrency      INTEGER,
    per_key          INTEGER,
    rate_count       INTEGER,
    rate_seconds     REAL,
    key_rate_count   INTEGER,
    key_rate_seconds REAL,
    fair             INTEGER NOT NULL DEFAULT 0,
    updated_at       REAL    NOT NULL,
    updated_by       TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (project, queue)
);
CREATE TABLE flow_keys (
    project         TEXT NOT NULL,
    queue           TEXT NOT NULL,
    key             TEXT NOT NULL,
    starts          TEXT,
    ready_at        REAL,
    last_started_at REAL,
    PRIMARY KEY (project, queue, key)
);
CREATE INDEX flow_keys_ready ON flow_keys (project, queue, ready_at) WHERE ready_at IS NOT NULL;
