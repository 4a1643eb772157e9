-- rowfleet schema version 10: how long each model's jobs run.

-- run_seconds: a moving mean of the model's completed jobs' run times (each new one weighs
-- a fifth), which preloading weighs against the load time; runs: how many it has seen.
ALTER TABLE model_stats ADD COLUMN run_seconds REAL;
ALTER TABLE model_stats ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;
