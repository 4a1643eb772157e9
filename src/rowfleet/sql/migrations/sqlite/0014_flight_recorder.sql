-- rowfleet schema version 14: the flight recorder (each host's telemetry samples, and which
-- sampler writes them) and the tallies of finished jobs that /metrics counts from.

-- One row per reading of a host. tier 'detail': one reading every few seconds, kept about an
-- hour, "at" the moment it was taken (the database's clock on PostgreSQL); tier 'minute': a
-- whole minute's readings folded into one (means, sums of counter deltas, peaks), "at" the
-- minute's start, kept about a week. readings: a JSON object of named readings (see
-- rowfleet.telemetry.readings), written by the host's sampler or by anyone's plain SQL.
CREATE TABLE host_samples (
    host     TEXT NOT NULL,
    tier     TEXT NOT NULL CHECK (tier IN ('detail', 'minute')),
    at       REAL NOT NULL,
    readings TEXT NOT NULL,
    PRIMARY KEY (host, tier, at)
);
-- Pruning by age reads the oldest rows of a tier across every host.
CREATE INDEX host_samples_age ON host_samples (tier, at);

-- One sampler writes each host's rows: the lease of that host's sampler. Another sampler of
-- the same host waits until it lapses; a released lease is lapsed, not deleted.
CREATE TABLE host_samplers (
    host        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,   -- "host:pid:nonce" of the sampler process
    acquired_at REAL NOT NULL,
    expires_at  REAL NOT NULL
);

-- Finished jobs counted, per (project, queue, task, model, state) and run-time bucket: model
-- is '' for a job that needs none; "le" is the bucket's upper bound in seconds as Prometheus
-- writes it ("0.5", "+Inf"), '' for jobs that never started; warm: how many of them were
-- last claimed by a worker that already held their model. Counts only go up: pruning a job
-- does not take it out of its tally.
CREATE TABLE job_tallies (
    project     TEXT    NOT NULL,
    queue       TEXT    NOT NULL,
    task        TEXT    NOT NULL,
    model       TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    le          TEXT    NOT NULL,
    jobs        INTEGER NOT NULL,
    warm        INTEGER NOT NULL,
    run_seconds REAL    NOT NULL,   -- the run times of those jobs, added up
    PRIMARY KEY (project, queue, task, model, state, le)
);

-- The finished_at of the finish that job_tallies counted: a job finished since (first, or
-- again after a retry) differs from it, and the orchestrator folds it in. The index holds
-- only those, so a fold or a scrape reads the few jobs not yet counted, never every job.
ALTER TABLE jobs ADD COLUMN tallied_at REAL;
CREATE INDEX jobs_untallied ON jobs (id) WHERE finished_at IS NOT NULL AND tallied_at IS NOT finished_at;
