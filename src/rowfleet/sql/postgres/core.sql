-- rowfleet's queries for PostgreSQL: the schema's bookkeeping and the savepoint a caller's connection gets.
-- rowfleet's queries for PostgreSQL (psycopg placeholders). Time is the database's clock,
-- rowfleet_now(%(now)s), where %(now)s is NULL but in tests. The same names exist for every dialect.

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer          PRIMARY KEY,
    name       text             NOT NULL,
    applied_at double precision NOT NULL
);

-- name: migrations_exists
SELECT count(*) AS n FROM information_schema.tables
WHERE table_schema = current_schema() AND table_name = 'schema_migrations';

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM schema_migrations;

-- name: schema_columns
-- Every table (and view) of the schema rowfleet uses with its columns, reading no row: whether
-- it is rowfleet's database is decided on these before anything else is read or written.
SELECT table_name::text AS table_name, column_name::text AS column_name FROM information_schema.columns
WHERE table_schema = current_schema();

-- name: schema_tables
-- Names every table of the current schema and reads no row: fails naming a table that is gone.
SELECT 1 AS present FROM jobs, job_events, workers, worker_controls, runs, run_nodes, dispatch_events,
    schedules, schedule_slots, orchestrators, gpu_leases, model_stats, model_controls, gpu_switches WHERE 1 = 0;

-- name: migration_record
INSERT INTO schema_migrations (version, name, applied_at) VALUES (%(version)s, %(name)s, rowfleet_now(%(now)s));

-- name: savepoint_begin
-- A composite write inside a caller's open transaction runs in this savepoint, so a failure
-- undoes only our statements. A fixed name: savepoints of one name nest, innermost first.
SAVEPOINT rowfleet_write;

-- name: savepoint_release
RELEASE SAVEPOINT rowfleet_write;

-- name: savepoint_rollback
-- Leaves the savepoint in place, empty; savepoint_release then ends it.
ROLLBACK TO SAVEPOINT rowfleet_write;

-- name: session_bounds
-- Each connection's own bounds (store/postgres.py, connection_bounds); NULL keeps the value the
-- URL's options set. One statement, so a pooler in transaction mode sees no open transaction.
SELECT set_config('statement_timeout', coalesce(%(statement_timeout)s, current_setting('statement_timeout')), false),
       set_config('idle_in_transaction_session_timeout',
                  coalesce(%(idle_in_transaction_session_timeout)s, current_setting('idle_in_transaction_session_timeout')),
                  false);

-- name: transaction_bounds
-- The same bounds for one transaction of the store's own, where --db goes through a pooler in
-- transaction mode: a session's settings would stay on a server connection others then use.
SELECT set_config('statement_timeout', %(statement_timeout)s, true),
       set_config('idle_in_transaction_session_timeout', %(idle_in_transaction_session_timeout)s, true);

-- name: migration_unbounded
-- A migration may rewrite a large table: its transaction alone runs without a statement timeout.
SET LOCAL statement_timeout = 0;

-- name: database_time
-- The database's clock (or a test's), as every statement here reads it.
SELECT coalesce(%(now)s::double precision, extract(epoch FROM now())::double precision) AS now;
