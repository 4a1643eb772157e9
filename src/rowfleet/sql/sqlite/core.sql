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
    schedules, schedule_slots, orchestrators, gpu_leases, model_stats, model_controls, gpu_switches WHERE 1 = 0;

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

-- name: clock_floor
-- SQLite only: the newest time written here that was "now" when written (a worker's heartbeat, an
-- orchestrator's beat, a fired slot, the newest job event, job and finish), none after :ceiling: the
-- floor a store opening the database raises the box's held clock to (rowfleet.store.clock). Each is
-- one seek along an index or the rowid. Text or bytes (plain SQL's) sort above every number, so the
-- ceiling passes over them too.
SELECT max(coalesce((SELECT last_seen FROM workers WHERE last_seen <= :ceiling
                     ORDER BY last_seen DESC LIMIT 1), 0),
           coalesce((SELECT max(last_seen) FROM orchestrators WHERE last_seen <= :ceiling), 0),
           coalesce((SELECT fired_at FROM schedule_slots WHERE fired_at <= :ceiling
                     ORDER BY fired_at DESC LIMIT 1), 0),
           coalesce((SELECT at FROM job_events WHERE id = (SELECT max(id) FROM job_events)
                     AND at <= :ceiling), 0),
           coalesce((SELECT created_at FROM jobs WHERE id = (SELECT max(id) FROM jobs)
                     AND created_at <= :ceiling), 0),
           coalesce((SELECT finished_at FROM jobs WHERE finished_at IS NOT NULL AND finished_at <= :ceiling
                     ORDER BY finished_at DESC LIMIT 1), 0)) AS floor;
