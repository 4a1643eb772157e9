-- rowfleet schema version 8: GPU placement: what a job needs and how it was claimed, what a
-- GPU worker offers, one model per GPU, and the measured figures of each model.

-- GPU memory a job needs, in MiB (NULL: unknown, so it fits any GPU).
ALTER TABLE jobs ADD COLUMN vram_mb integer;
-- Why no worker of the fleet can place the job (NULL: placeable), and since when.
ALTER TABLE jobs ADD COLUMN unplaceable text;
ALTER TABLE jobs ADD COLUMN unplaceable_at double precision;
-- 1 when its last claim was by a worker already holding its model (no load paid).
ALTER TABLE jobs ADD COLUMN warm_claim integer NOT NULL DEFAULT 0;

-- What a GPU worker advertises with its heartbeat; every column NULL for a worker without
-- a GPU. models: a JSON array of the models it can load. loading: the model it is loading.
-- lane: which jobs it takes: any, only those needing a model, or only those needing none.
ALTER TABLE workers ADD COLUMN models text;
ALTER TABLE workers ADD COLUMN gpu_index integer;
ALTER TABLE workers ADD COLUMN vram_total_mb integer;
ALTER TABLE workers ADD COLUMN vram_free_mb integer;
ALTER TABLE workers ADD COLUMN warm_model text;
ALTER TABLE workers ADD COLUMN warm_since double precision;
ALTER TABLE workers ADD COLUMN loading text;
ALTER TABLE workers ADD COLUMN lane text CHECK (lane IS NULL OR lane IN ('any', 'model', 'plain'));
ALTER TABLE workers ADD COLUMN host_priority integer;

-- One model per GPU: the lease of a physical GPU (a host's device), whoever's project its
-- holders serve. Holders of the same model share it; another model takes it only once it
-- has lapsed (expires_at), and then the fence token goes up, so a holder of the old model
-- learns on its next renewal that the GPU is no longer its. A released lease stays, lapsed,
-- so that its token is never given out twice.
CREATE TABLE gpu_leases (
    host        text    NOT NULL,
    gpu_index   integer NOT NULL,
    model       text    NOT NULL,
    holder      text    NOT NULL,   -- "host:pid" that last took or renewed it
    token       integer NOT NULL,   -- fence token: +1 each time the lease changes hands
    acquired_at double precision NOT NULL,
    expires_at  double precision NOT NULL,
    PRIMARY KEY (host, gpu_index)
);

-- What loading each model measured, per project: the last load's seconds and footprint,
-- and how many loads succeeded and failed.
CREATE TABLE model_stats (
    project        text    NOT NULL,
    model          text    NOT NULL,
    load_seconds   double precision,
    footprint_mb   integer,
    loads          integer NOT NULL DEFAULT 0,
    failed_loads   integer NOT NULL DEFAULT 0,
    last_failed_at double precision,
    updated_at     double precision NOT NULL,
    PRIMARY KEY (project, model)
);

-- Serves a claim that names the models it can take: one probe per model (and one for jobs
-- needing none, required_model IS NULL), each walked in claim order, so that affinity costs
-- a handful of index seeks rather than a sort of the queue. vram_mb last, so that a probe
-- that skips jobs too big for the GPU reads them from the index alone.
CREATE INDEX jobs_model ON jobs (project, queue, required_model, run_next DESC, priority, run_at, id, vram_mb)
    WHERE state = 'queued' AND delayed = 0;
