-- rowfleet schema version 8: GPU placement: what a job needs and how it was claimed, what a
-- GPU worker offers, one model per GPU, and the measured figures of each model.

-- GPU memory a job needs, in MiB (NULL: unknown, so it fits any GPU).
ALTER TABLE jobs ADD COLUMN vram_mb INTEGER;
-- Why no worker of the fleet can place the job (NULL: placeable), and since when.
ALTER TABLE jobs ADD COLUMN unplaceable TEXT;
ALTER TABLE jobs ADD COLUMN unplaceable_at REAL;
-- 1 when its last claim was by a worker already holding its model (no load paid).
ALTER TABLE jobs ADD COLUMN warm_claim INTEGER NOT NULL DEFAULT 0;

-- What a GPU worker advertises with its heartbeat; every column NULL for a worker without
-- a GPU. models: a JSON array of the models it can load. loading: the model it is loading.
-- lane: which jobs it takes: any, only those needing a model, or only those needing none.
ALTER TABLE workers ADD COLUMN models TEXT;
ALTER TABLE workers ADD COLUMN gpu_index INTEGER;
ALTER TABLE workers ADD COLUMN vram_total_mb INTEGER;
ALTER TABLE workers ADD COLUMN vram_free_mb INTEGER;
ALTER TABLE workers ADD COLUMN warm_model TEXT;
ALTER TABLE workers ADD COLUMN warm_since REAL;
ALTER TABLE workers ADD COLUMN loading TEXT;
ALTER TABLE workers ADD COLUMN lane TEXT CHECK (lane IS NULL OR lane IN ('any', 'model', 'plain'));
ALTER TABLE workers ADD COLUMN host_priority INTEGER;

-- One model per GPU: the lease of a physical GPU (a host's device), whoever's project its
-- holders serve. Holders of the same model share it; another model takes it only once it
-- has lapsed (expires_at), and then the fence token goes up, so a holder of the old model
-- learns on its next renewal that the GPU is no longer its. A released lease stays, lapsed,
-- so that its token is never given out twice.
CREATE TABLE gpu_leases (
    host        TEXT    NOT NULL,
    gpu_index   INTEGER NOT NULL,
    model       TEXT    NOT NULL,
    holder      TEXT    NOT NULL,   -- "host:pid" that last took or renewed it
    token       INTEGER NOT NULL,   -- fence token: +1 each time the lease changes hands
    acquired_at REAL    NOT NULL,
    expires_at  REAL    NOT NULL,
    PRIMARY KEY (host, gpu_index)
);

-- What loading each model measured, per project: the last load's seconds and footprint,
-- and how many loads succeeded and failed.
CREATE TABLE model_stats (
    project        TEXT    NOT NULL,
    model          TEXT    NOT NULL,
    load_seconds   REAL,
    footprint_mb   INTEGER,
    loads          INTEGER NOT NULL DEFAULT 0,
    failed_loads   INTEGER NOT NULL DEFAULT 0,
    last_failed_at REAL,
    updated_at     REAL    NOT NULL,
    PRIMARY KEY (project, model)
);

-- Serves a claim that names the models it can take: one probe per model (and one for jobs
-- needing none, required_model IS NULL), each walked in claim order, so that affinity costs
-- a handful of index seeks rather than a sort of the queue. vram_mb last, so that a probe
-- that skips jobs too big for the GPU reads them from the index alone.
CREATE INDEX jobs_model ON jobs (project, queue, required_model, run_next DESC, priority, run_at, id, vram_mb)
    WHERE state = 'queued' AND delayed = 0;
