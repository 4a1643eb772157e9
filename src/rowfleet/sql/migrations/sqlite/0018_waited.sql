-- rowfleet schema version 18: a mark on a job somebody waits for (rowfleet.wait, `rowfleet
-- wait`). On PostgreSQL the mark makes the job's end a NOTIFY to its waiters, and only a
-- marked job's: every other job's finish pays nothing. On SQLite a waiter watches the file
-- as an idle worker does, so the column is only kept for the two schemas to match.
ALTER TABLE jobs ADD COLUMN waited INTEGER NOT NULL DEFAULT 0;
