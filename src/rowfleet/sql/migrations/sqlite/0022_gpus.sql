-- rowfleet schema version 22: jobs that need GPUs. gpus is how many GPUs of one host a job
-- needs (NULL: it asks for none, and any worker may run it): a job that asks for GPUs is
-- claimed only by a GPU worker that can hold that many of its host's GPUs now, through
-- the same per-GPU leases as a model's (gpu_leases). No index: a claim's walk of jobs_claim
-- reads the row it stops at anyway, and jobs that ask for more GPUs than a worker has are few.
ALTER TABLE jobs ADD COLUMN gpus INTEGER;
