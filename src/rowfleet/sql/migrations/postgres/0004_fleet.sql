-- rowfleet schema version 4 on PostgreSQL: operators' worker controls, workers' parked
-- state, and the slots periodic schedules have fired.

-- What operators want of the workers of (project, host, queue). No row means on. '*' in
-- a column matches every project, host or queue: a row for (project, host, '*') is a
-- box-wide switch. Any app sharing the database may write these rows with plain SQL;
-- changed_at defaults to now so such an INSERT need not compute a time.
CREATE TABLE worker_controls (
    project    text             NOT NULL,
    host       text             NOT NULL,
    queue      text             NOT NULL,
    desired    text             NOT NULL CHECK (desired IN ('on', 'off')),
    policy     text             NOT NULL DEFAULT 'drain' CHECK (policy IN ('hard', 'drain')),
    changed_by text             NOT NULL DEFAULT '',
    changed_at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
    PRIMARY KEY (project, host, queue)
);
CREATE INDEX worker_controls_host ON worker_controls (host);

-- Workers wait on this channel for their switch; the payload is the row's host ('*' for all).
CREATE FUNCTION rowfleet_notify_control() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('rowfleet_control', OLD.host);
    ELSE
        PERFORM pg_notify('rowfleet_control', NEW.host);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER control_notify AFTER INSERT OR UPDATE OR DELETE ON worker_controls
    FOR EACH ROW EXECUTE FUNCTION rowfleet_notify_control();

-- What a worker is doing about its control: serving, draining (off, finishing its job),
-- or parked (off: claims nothing until turned on).
ALTER TABLE workers ADD COLUMN state text NOT NULL DEFAULT 'serving';

-- One row per periodic schedule and project: the newest slot fired, so a scheduler that
-- starts after a gap knows which slots it missed.
CREATE TABLE schedules (
    project    text             NOT NULL,
    name       text             NOT NULL,
    last_slot  double precision,
    updated_at double precision NOT NULL,
    PRIMARY KEY (project, name)
);

-- Every slot fired, keyed so that a slot fires once however many schedulers race for it.
CREATE TABLE schedule_slots (
    project  text             NOT NULL,
    name     text             NOT NULL,
    slot     double precision NOT NULL,   -- the slot's time, epoch seconds
    job_id   bigint,
    fired_at double precision NOT NULL,
    fired_by text,
    PRIMARY KEY (project, name, slot)
);
CREATE INDEX schedule_slots_fired ON schedule_slots (fired_at);
