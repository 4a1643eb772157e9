-- rowfleet schema version 2: workflow runs, their nodes, and the dispatch outbox.

-- A workflow node's job knows its run, its node, which item of a map node it is, and the
-- node's generation (a restart bumps it; jobs of older generations are history).
ALTER TABLE jobs ADD COLUMN run_id INTEGER;
ALTER TABLE jobs ADD COLUMN node_id TEXT;
ALTER TABLE jobs ADD COLUMN node_item INTEGER;
ALTER TABLE jobs ADD COLUMN node_generation INTEGER;
-- A node's time budget (seconds) and required model, recorded for the watchdogs and the
-- model-aware claim.
ALTER TABLE jobs ADD COLUMN timeout REAL;
ALTER TABLE jobs ADD COLUMN required_model TEXT;
CREATE INDEX jobs_run ON jobs (run_id, node_id) WHERE run_id IS NOT NULL;

CREATE TABLE runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, even after pruning
    project     TEXT    NOT NULL DEFAULT '',
    name        TEXT    NOT NULL,
    state       TEXT    NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'awaiting_input', 'completed', 'failed', 'cancelled')),
    definition  TEXT    NOT NULL,                   -- JSON: the workflow as it was at the start
    args        TEXT    NOT NULL DEFAULT 'null',    -- JSON: the run's arguments ($args)
    error       TEXT,
    created_at  REAL    NOT NULL,
    updated_at  REAL    NOT NULL,
    finished_at REAL
);
CREATE INDEX runs_state ON runs (project, state);
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE run_nodes (
    run_id     INTEGER NOT NULL,
    node_id    TEXT    NOT NULL,
    state      TEXT    NOT NULL DEFAULT 'pending'
               CHECK (state IN ('pending', 'queued', 'awaiting_input', 'completed', 'failed', 'cancelled',
                                'skipped')),
    generation INTEGER NOT NULL DEFAULT 0,
    items      INTEGER,                             -- a map node's item count, once enqueued
    result     TEXT,                                -- JSON
    error      TEXT,
    updated_at REAL    NOT NULL,
    PRIMARY KEY (run_id, node_id)
);

-- The outbox: a row per change the orchestrator must act on, written in the same
-- transaction as the change (a node's job finishing, an input, a start or restart).
CREATE TABLE dispatch_events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    project      TEXT    NOT NULL,
    run_id       INTEGER NOT NULL,
    node_id      TEXT,
    job_id       INTEGER,
    kind         TEXT    NOT NULL,
    created_at   REAL    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,        -- drains that raised
    last_error   TEXT,
    processed_at REAL,
    poisoned_at  REAL                               -- given up on after too many failed drains
);
CREATE INDEX dispatch_pending ON dispatch_events (project, id) WHERE processed_at IS NULL AND poisoned_at IS NULL;
CREATE INDEX dispatch_run ON dispatch_events (run_id);
