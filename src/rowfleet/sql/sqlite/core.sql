-- rowfleet's queries for SQLite: the schema's bookkeeping and the savepoint a caller's connection gets.
-- Every statement takes :now from the writer's clock.
-- Each block is one statement; the same names exist for every dialect.

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at REAL    NOT NULL
);

-- name: migrations_exists
SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations';

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM schema_migrations;

-- name: schema_columns
-- Every table of the database with its columns, reading no row: whether it is rowfleet's
-- database is decided on these before anything else is read or written.
SELECT tables.name AS table_name, columns.name AS column_name
FROM sqlite_master AS tables, pragma_table_info(tables.name) AS columns
WHERE tables.type = 'table' AND tables.name NOT LIKE 'sqlite\_%' ESCAPE '\';

-- name: schema_tables
-- Names every table of the current schema and reads no row: fails naming a table that is gone.
SELECT 1 AS present FROM jobs, job_events, workers, worker_controls, runs, run_nodes, dispatch_events,
    schedules, schedule_slots, orchestrators, gpu_leases, model_stats, model_controls WHERE 1 = 0;

-- name: migration_record
INSERT INTO schema_migrations (version, name, applied_at) VALUES (:version, :name, :now);

-- name: savepoint_begin
-- A composite write inside a caller's open transaction runs in this savepoint, so a failure
-- undoes only our statements. A fixed name: savepoints of one name nest, innermost first.
SAVEPOINT rowfleet_write;

-- name: savepoint_release
RELEASE SAVEPOINT rowfleet_write;

-- name: savepoint_rollback
-- Leaves the savepoint in place, empty; savepoint_release then ends it.
ROLLBACK TO SAVEPOINT rowfleet_write;
