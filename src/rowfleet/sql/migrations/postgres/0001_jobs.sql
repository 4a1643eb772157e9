-- rowfleet schema version 1 on PostgreSQL: the same tables, columns and indexes as on
-- SQLite. Times are UNIX epoch seconds (double precision) from the database's clock.

-- The database's clock, so hosts with skewed clocks agree; a test passes a time of its own.
CREATE FUNCTION rowfleet_now(fixed double precision) RETURNS double precision
    LANGUAGE sql STABLE AS $$ SELECT coalesce(fixed, extract(epoch FROM now())::double precision) $$;

CREATE TABLE jobs (
    id               bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- never reused
    project          text             NOT NULL DEFAULT '',
    queue            text             NOT NULL,
    task             text             NOT NULL,
    args             text             NOT NULL DEFAULT 'null',   -- JSON
    state            text             NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    priority         integer          NOT NULL DEFAULT 0,        -- lower runs sooner
    run_next         integer          NOT NULL DEFAULT 0,        -- 1 sorts before every priority
    run_at           double precision NOT NULL,                  -- not claimable before this
    attempts         integer          NOT NULL DEFAULT 0,
    max_attempts     integer          NOT NULL DEFAULT 5,
    idempotency_key  text,
    lease_token      bigint           NOT NULL DEFAULT 0,        -- fencing token, +1 on every claim
    claimed_by       text,                                       -- "host:pid" of the holder
    lease_expires_at double precision,
    result           text,                                       -- JSON
    error            text,
    traceback        text,
    created_at       double precision NOT NULL,
    updated_at       double precision NOT NULL,
    started_at       double precision,
    finished_at      double precision
);

-- Serves the claim; partial, so dead tuples of finished jobs never slow the hot path.
CREATE INDEX jobs_claim ON jobs (project, queue, run_next DESC, priority, run_at, id) WHERE state = 'queued';
-- The second condition keeps the planner from scanning this index (dead entries and all)
-- for the guarded updates (WHERE id = ? AND state = 'running' ...), which the key serves.
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'running' AND lease_expires_at IS NOT NULL;
CREATE UNIQUE INDEX jobs_idempotency ON jobs (project, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_state ON jobs (project, state, queue);

CREATE TABLE job_events (
    id      bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id  bigint           NOT NULL,
    at      double precision NOT NULL,
    kind    text             NOT NULL,
    detail  text                                               -- JSON object
);
CREATE INDEX job_events_job ON job_events (job_id, id);

CREATE TABLE workers (
    worker_id        text             NOT NULL PRIMARY KEY,      -- "host:pid:started"
    project          text             NOT NULL,
    host             text             NOT NULL,
    queue            text             NOT NULL,
    pid              integer          NOT NULL,
    current_job      bigint,
    started_at       double precision NOT NULL,
    last_seen        double precision NOT NULL,
    stopped_at       double precision,
    flagged_dead_at  double precision
);
CREATE INDEX workers_seen ON workers (last_seen);

-- Wake idle workers inside the writer's transaction: on every enqueue and every re-queue
-- (retry, reclaim, revive). The payload is the queue; identical notifications in one
-- transaction are folded into one, so a batch enqueue sends one per queue.
CREATE FUNCTION rowfleet_notify_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rowfleet_jobs', NEW.queue);
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify_queued AFTER INSERT OR UPDATE OF state ON jobs
    FOR EACH ROW WHEN (NEW.state = 'queued') EXECUTE FUNCTION rowfleet_notify_queued();
