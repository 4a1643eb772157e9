-- rowfleet schema version 15: why a switch was set, the log of every switch rowfleet
-- wrote (the command line and the panel), so an operator can see who switched what when,
-- and an index of finished jobs that holds what the panel counts them by.

-- Why its writer switched it (free text, '' when none was given).
ALTER TABLE worker_controls ADD COLUMN reason text NOT NULL DEFAULT '';

-- One row per switch written through rowfleet, in the transaction that wrote it. A row that
-- plain SQL writes to worker_controls is in force all the same; it is logged only there.
CREATE TABLE worker_control_log (
    id         bigserial        PRIMARY KEY,
    project    text             NOT NULL,
    host       text             NOT NULL,
    queue      text             NOT NULL,
    desired    text             NOT NULL,
    policy     text             NOT NULL,
    reason     text             NOT NULL DEFAULT '',
    changed_by text             NOT NULL DEFAULT '',
    changed_at double precision NOT NULL
);
-- Pruning by age.
CREATE INDEX worker_control_log_age ON worker_control_log (changed_at);

-- The panel's last hour of finished jobs per project, queue, state and minute reads only
-- this index (it holds what it groups by); pruning and the hour's ticks read its first column.
DROP INDEX jobs_finished;
CREATE INDEX jobs_finished ON jobs (finished_at, project, queue, state) WHERE finished_at IS NOT NULL;
