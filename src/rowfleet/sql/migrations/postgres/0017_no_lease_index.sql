-- rowfleet schema version 17: no index on a running job's lease. The running jobs are as
-- many as the fleet has workers, and jobs_state finds each project's in one range, so the
-- reclaim sweep and the list of running jobs read them there. The lease index cost every
-- claim, every renewal and every finish a page of writes (a busy worker's commits are most
-- of its cost); on PostgreSQL a renewal can now be a heap-only update.
DROP INDEX IF EXISTS jobs_lease;
