-- rowfleet schema version 3: what the watchdogs and the supervisor record.

ALTER TABLE jobs ADD COLUMN watchdog_retries INTEGER NOT NULL DEFAULT 0;  -- watchdog trips so far
ALTER TABLE jobs ADD COLUMN progress REAL;              -- 0..1, from rowfleet.progress()
ALTER TABLE jobs ADD COLUMN progress_message TEXT;
ALTER TABLE jobs ADD COLUMN progress_at REAL;           -- the last progress beat

ALTER TABLE workers ADD COLUMN exit_code INTEGER;       -- how the process ended, if its supervisor saw it
