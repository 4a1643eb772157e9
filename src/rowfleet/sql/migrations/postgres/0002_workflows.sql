-- rowfleet schema version 2 on PostgreSQL: workflow runs, their nodes, and the dispatch
-- outbox; the same tables, columns and indexes as on SQLite.

-- A workflow node's job knows its run, its node, which item of a map node it is, and the
-- node's generation (a restart bumps it; jobs of older generations are history).
ALTER TABLE jobs ADD COLUMN run_id bigint;
ALTER TABLE jobs ADD COLUMN node_id text;
ALTER TABLE jobs ADD COLUMN node_item integer;
ALTER TABLE jobs ADD COLUMN node_generation integer;
-- A node's time budget (seconds) and required model, recorded for the watchdogs and the
-- model-aware claim.
ALTER TABLE jobs ADD COLUMN timeout double precision;
ALTER TABLE jobs ADD COLUMN required_model text;
CREATE INDEX jobs_run ON jobs (run_id, node_id) WHERE run_id IS NOT NULL;

CREATE TABLE runs (
    id          bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- never reused
    project     text             NOT NULL DEFAULT '',
    name        text             NOT NULL,
    state       text             NOT NULL DEFAULT 'running'
                CHECK (state IN ('running', 'awaiting_input', 'completed', 'failed', 'cancelled')),
    definition  text             NOT NULL,              -- JSON: the workflow as it was at the start
    args        text             NOT NULL DEFAULT 'null', -- JSON: the run's arguments ($args)
    error       text,
    created_at  double precision NOT NULL,
    updated_at  double precision NOT NULL,
    finished_at double precision
);
CREATE INDEX runs_state ON runs (project, state);
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE run_nodes (
    run_id     bigint           NOT NULL,
    node_id    text             NOT NULL,
    state      text             NOT NULL DEFAULT 'pending'
               CHECK (state IN ('pending', 'queued', 'awaiting_input', 'completed', 'failed', 'cancelled',
                                'skipped')),
    generation integer          NOT NULL DEFAULT 0,
    items      integer,                                 -- a map node's item count, once enqueued
    result     text,                                    -- JSON
    error      text,
    updated_at double precision NOT NULL,
    PRIMARY KEY (run_id, node_id)
);

-- The outbox: a row per change the orchestrator must act on, written in the same
-- transaction as the change (a node's job finishing, an input, a start or restart).
CREATE TABLE dispatch_events (
    id           bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project      text             NOT NULL,
    run_id       bigint           NOT NULL,
    node_id      text,
    job_id       bigint,
    kind         text             NOT NULL,
    created_at   double precision NOT NULL,
    attempts     integer          NOT NULL DEFAULT 0,   -- drains that raised
    last_error   text,
    processed_at double precision,
    poisoned_at  double precision                       -- given up on after too many failed drains
);
CREATE INDEX dispatch_pending ON dispatch_events (project, id) WHERE processed_at IS NULL AND poisoned_at IS NULL;
CREATE INDEX dispatch_run ON dispatch_events (run_id);

-- Wake an orchestrator inside the writer's transaction; the payload is the project.
CREATE FUNCTION rowfleet_notify_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rowfleet_dispatch', NEW.project);
    RETURN NULL;
END $$;

CREATE TRIGGER dispatch_notify AFTER INSERT ON dispatch_events
    FOR EACH ROW EXECUTE FUNCTION rowfleet_notify_dispatch();
