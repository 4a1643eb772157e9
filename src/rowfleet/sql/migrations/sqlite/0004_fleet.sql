-- rowfleet schema version 4: operators' worker controls, workers' parked state, and the
-- slots periodic schedules have fired.

-- What operators want of the workers of (project, host, queue). No row means on. '*' in
-- a column matches every project, host or queue: a row for (project, host, '*') is a
-- box-wide switch. Any app sharing the database may write these rows with plain SQL;
-- changed_at defaults to now so such an INSERT need not compute a time.
CREATE TABLE worker_controls (
    project    TEXT NOT NULL,
    host       TEXT NOT NULL,
    queue      TEXT NOT NULL,
    desired    TEXT NOT NULL CHECK (desired IN ('on', 'off')),
    policy     TEXT NOT NULL DEFAULT 'drain' CHECK (policy IN ('hard', 'drain')),
    changed_by TEXT NOT NULL DEFAULT '',
    changed_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    PRIMARY KEY (project, host, queue)
);
CREATE INDEX worker_controls_host ON worker_controls (host);

-- What a worker is doing about its control: serving, draining (off, finishing its job),
-- or parked (off: claims nothing until turned on).
ALTER TABLE workers ADD COLUMN state TEXT NOT NULL DEFAULT 'serving';

-- One row per periodic schedule and project: the newest slot fired, so a scheduler that
-- starts after a gap knows which slots it missed.
CREATE TABLE schedules (
    project    TEXT NOT NULL,
    name       TEXT NOT NULL,
    last_slot  REAL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (project, name)
);

-- Every slot fired, keyed so that a slot fires once however many schedulers race for it.
CREATE TABLE schedule_slots (
    project  TEXT    NOT NULL,
    name     TEXT    NOT NULL,
    slot     REAL    NOT NULL,   -- the slot's time, epoch seconds
    job_id   INTEGER,
    fired_at REAL    NOT NULL,
    fired_by TEXT,
    PRIMARY KEY (project, name, slot)
);
CREATE INDEX schedule_slots_fired ON schedule_slots (fired_at);
