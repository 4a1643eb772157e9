-- rowfleet's queries for SQLite: telemetry: each host's samples and the lease of its one
-- sampler, and the tallies of finished jobs that /metrics counts from.

-- name: acquire_sampler
-- Taken when free (no row), lapsed, or already the caller's; refused (no row) while another
-- sampler of the host holds it.
INSERT INTO host_samplers (host, holder, acquired_at, expires_at) VALUES (:host, :holder, :now, :now + :ttl)
ON CONFLICT (host) DO UPDATE
SET acquired_at = CASE WHEN host_samplers.holder = excluded.holder THEN host_samplers.acquired_at
                       ELSE excluded.acquired_at END,
    holder = excluded.holder, expires_at = excluded.expires_at
WHERE host_samplers.expires_at <= :now OR host_samplers.holder = excluded.holder
RETURNING *;

-- name: renew_sampler
UPDATE host_samplers SET expires_at = :now + :ttl
WHERE host = :host AND holder = :holder AND expires_at > :now
RETURNING *;

-- name: release_sampler
UPDATE host_samplers SET expires_at = :now WHERE host = :host AND holder = :holder AND expires_at > :now;

-- name: host_sampler
SELECT * FROM host_samplers WHERE host = :host;

-- name: record_host_sample
INSERT INTO host_samples (host, tier, at, readings) VALUES (:host, 'detail', :now, :readings)
RETURNING at;

-- name: record_host_minute
-- A minute already folded (by this sampler before a restart, or another) stays as it was.
INSERT INTO host_samples (host, tier, at, readings) VALUES (:host, 'minute', :at, :readings)
ON CONFLICT (host, tier, at) DO NOTHING;

-- name: host_samples
-- One host's rows of one tier from :since up to (not including) :until, oldest first.
SELECT host, tier, at, readings FROM host_samples
WHERE host = :host AND tier = :tier AND at >= :since AND at < :until
ORDER BY at;

-- name: samples_since
-- Every host's rows of one tier from :since on (host_samples_age serves it), by host, oldest
-- first: what a reader that keeps the last hour asks for between its whole reads.
SELECT host, tier, at, readings FROM host_samples
WHERE tier = :tier AND at >= :since
ORDER BY host, at;

-- name: host_sample_times
SELECT at FROM host_samples WHERE host = :host AND tier = :tier AND at >= :since ORDER BY at;

-- name: latest_host_samples
-- Each host's newest detail row: the hosts found by walking the primary key one host at a
-- time (a seek each, however many rows a host keeps), then one seek per host for its newest.
WITH RECURSIVE hosts(host) AS (
    SELECT min(host) FROM host_samples
    UNION ALL
    SELECT (SELECT min(host) FROM host_samples WHERE host > hosts.host) FROM hosts WHERE hosts.host IS NOT NULL
)
SELECT s.host, s.tier, s.at, s.readings
FROM hosts
JOIN host_samples AS s ON s.host = hosts.host AND s.tier = 'detail'
                       AND s.at = (SELECT max(at) FROM host_samples WHERE host = hosts.host AND tier = 'detail')
ORDER BY s.host;

-- name: sampled_hosts
-- Every host with rows of a tier since :since, and its rows' span.
SELECT host, min(at) AS first_at, max(at) AS last_at, count(*) AS n FROM host_samples
WHERE tier = :tier AND at >= :since GROUP BY host ORDER BY host;

-- name: prune_host_samples
DELETE FROM host_samples WHERE tier = :tier AND at < :now - :keep;

-- The tallies of finished jobs.

-- fragment: untallied
-- A finished job whose finish job_tallies has not counted (jobs_untallied holds only these).
finished_at IS NOT NULL AND tallied_at IS NOT finished_at

-- fragment: tallied_columns
project, queue, task, required_model, state, started_at, finished_at, warm_claim

-- name: tally_finished
-- Marks up to :limit finished jobs as counted and returns them, for their counts to be added
-- in the same transaction.
UPDATE jobs SET tallied_at = finished_at
WHERE id IN (SELECT id FROM jobs WHERE {{untallied}} ORDER BY id LIMIT :limit)
RETURNING {{tallied_columns}};

-- name: add_tally
INSERT INTO job_tallies (project, queue, task, model, state, le, jobs, warm, run_seconds)
VALUES (:project, :queue, :task, :model, :state, :le, :jobs, :warm, :run_seconds)
ON CONFLICT (project, queue, task, model, state, le) DO UPDATE
SET jobs = job_tallies.jobs + excluded.jobs, warm = job_tallies.warm + excluded.warm,
    run_seconds = job_tallies.run_seconds + excluded.run_seconds;

-- name: job_tallies
SELECT * FROM job_tallies ORDER BY project, queue, task, model, state, le;

-- name: untallied_jobs
SELECT {{tallied_columns}} FROM jobs WHERE {{untallied}} ORDER BY id LIMIT :limit;

-- name: oldest_queued
-- A (project, queue)'s oldest queued job (the lowest id: ids go up as jobs are enqueued),
-- one seek along jobs_state; its enqueue and due times.
SELECT created_at, run_at FROM jobs
WHERE id = (SELECT id FROM jobs WHERE project = :project AND state = 'queued' AND queue = :queue ORDER BY id LIMIT 1);
