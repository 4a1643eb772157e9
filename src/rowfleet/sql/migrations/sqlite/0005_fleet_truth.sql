-- rowfleet schema version 5: each worker's own cadence, a running job's cancel request,
-- spaced-out outbox retries, and the orchestrators' own heartbeats.

-- A worker is judged silent by its own figures, never by the sweeper's: the seconds
-- between its heartbeats and its lease, as it was started with.
ALTER TABLE workers ADD COLUMN heartbeat REAL NOT NULL DEFAULT 10.0;
ALTER TABLE workers ADD COLUMN lease REAL NOT NULL DEFAULT 600.0;

-- An operator asked a running job's worker to stop it; the job ends cancelled.
ALTER TABLE jobs ADD COLUMN cancel_requested_at REAL;
ALTER TABLE jobs ADD COLUMN cancel_reason TEXT;

-- A drain that failed is not tried again before this moment (a growing backoff).
ALTER TABLE dispatch_events ADD COLUMN next_attempt_at REAL;

-- One row per orchestrator process: which project it serves and when it last swept, so
-- status can say whether a project has a live orchestrator.
CREATE TABLE orchestrators (
    orchestrator_id TEXT NOT NULL PRIMARY KEY,   -- "host:pid:started"
    project         TEXT NOT NULL,
    host            TEXT NOT NULL,
    pid             INTEGER NOT NULL,
    sweep_interval  REAL NOT NULL,               -- seconds between its sweeps
    started_at      REAL NOT NULL,
    last_seen       REAL NOT NULL,
    stopped_at      REAL
);
CREATE INDEX orchestrators_project ON orchestrators (project, last_seen);
