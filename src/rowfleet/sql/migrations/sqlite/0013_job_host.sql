-- rowfleet schema version 13: the host each job ran on.

-- The host of the worker whose claim it last was ("box" of the holder "box:4242"). Kept
-- when the job is requeued or ends (claimed_by is not), so that any job can be lined up
-- against its host's telemetry.
ALTER TABLE jobs ADD COLUMN host TEXT;
