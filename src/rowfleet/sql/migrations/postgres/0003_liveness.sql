-- rowfleet schema version 3 on PostgreSQL: what the watchdogs and the supervisor record.

ALTER TABLE jobs ADD COLUMN watchdog_retries integer NOT NULL DEFAULT 0;  -- watchdog trips so far
ALTER TABLE jobs ADD COLUMN progress double precision;                      -- 0..1, from rowfleet.progress()
ALTER TABLE jobs ADD COLUMN progress_message text;
ALTER TABLE jobs ADD COLUMN progress_at double precision;                   -- the last progress beat

ALTER TABLE workers ADD COLUMN exit_code integer;       -- how the process ended, if its supervisor saw it
