-- rowfleet schema version 7: job counts that stay cheap however many finished jobs are kept.

-- Serves the state listings and the counts of `status` (the fleet snapshot), which walk it
-- one (project, state, queue) group at a time and count a finished state only up to a cap:
-- the first :cap entries of a group in id order. Ending in id, the index hands them over in
-- that order, so no planner prefers scanning the whole table to find them.
DROP INDEX jobs_state;
CREATE INDEX jobs_state ON jobs (project, state, queue, id);
