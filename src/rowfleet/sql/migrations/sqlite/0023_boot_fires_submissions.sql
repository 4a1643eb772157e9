-- rowfleet schema version 23: what a restarted box, a fired schedule and a human in the
-- loop leave behind.

-- Who a worker process is, beyond its pid: the kernel's boot id and the process's start
-- time (clock ticks since boot, /proc/PID/stat), so that a worker starting on the same host
-- can tell a holder that is gone from a live process that reuses its pid.
ALTER TABLE workers ADD COLUMN boot_id TEXT;
ALTER TABLE workers ADD COLUMN pid_started TEXT;

-- Why a scheduled job exists: its schedule, the slot it fired for and the reason
-- (boot, tick, catch_up, manual); NULL for every other job. Kept on the slot's record too.
ALTER TABLE jobs ADD COLUMN schedule TEXT;
ALTER TABLE jobs ADD COLUMN schedule_slot REAL;
ALTER TABLE jobs ADD COLUMN fire_reason TEXT;
ALTER TABLE schedule_slots ADD COLUMN reason TEXT;

-- A queue's choice for a job whose worker was lost (a lapsed lease, a dead holder): 1 puts
-- it in the front band (run_next) so it does not wait behind newer work; 0, the default,
-- keeps its place.
ALTER TABLE flow_limits ADD COLUMN lost_first INTEGER NOT NULL DEFAULT 0;

-- Answers to input nodes, written by anyone (the CLI, the panel, another program's plain
-- INSERT) and applied by an orchestrator: pending -> processing -> processed or failed
-- (with the error). A submission stuck in processing (its orchestrator died) goes back
-- to pending after a while. value is JSON.
CREATE TABLE submissions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    project       TEXT    NOT NULL DEFAULT '',
    run_id        INTEGER NOT NULL,
    node_id       TEXT    NOT NULL,
    value         TEXT    NOT NULL DEFAULT 'null',
    state         TEXT    NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'processing', 'processed', 'failed')),
    error         TEXT,
    submitted_by  TEXT    NOT NULL DEFAULT '',
    created_at    REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    processing_by TEXT,
    processing_at REAL,
    processed_at  REAL
);
CREATE INDEX submissions_open ON submissions (project, id) WHERE state IN ('pending', 'processing');
CREATE INDEX submissions_run ON submissions (run_id);
