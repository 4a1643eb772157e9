-- rowfleet schema version 15: why a switch was set, and the log of every switch rowfleet
-- wrote (the command line and the panel), so an operator can see who switched what when.

-- Why its writer switched it (free text, '' when none was given).
ALTER TABLE worker_controls ADD COLUMN reason TEXT NOT NULL DEFAULT '';

-- One row per switch written through rowfleet, in the transaction that wrote it. A row that
-- plain SQL writes to worker_controls is in force all the same; it is logged only there.
CREATE TABLE worker_control_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    project    TEXT NOT NULL,
    host       TEXT NOT NULL,
    queue      TEXT NOT NULL,
    desired    TEXT NOT NULL,
    policy     TEXT NOT NULL,
    reason     TEXT NOT NULL DEFAULT '',
    changed_by TEXT NOT NULL DEFAULT '',
    changed_at REAL NOT NULL
);
-- Pruning by age.
CREATE INDEX worker_control_log_age ON worker_control_log (changed_at);
