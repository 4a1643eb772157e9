-- rowfleet's queries for PostgreSQL: periodic schedules and their fired slots.

-- name: fire_slot
-- The schedule's row, made on first use and locked for the rest of the transaction, so
-- schedulers firing the same schedule take turns and each reads the newest slot fired
-- (ON CONFLICT DO UPDATE waits for a concurrent holder, then sees its commit).
INSERT INTO schedules (project, name, last_slot, updated_at) VALUES (%(project)s, %(name)s, NULL, rowfleet_now(%(now)s))
ON CONFLICT (project, name) DO UPDATE SET updated_at = excluded.updated_at
RETURNING last_slot;

-- name: schedule_slot_insert
-- No row back: another scheduler fired this slot first. reason: why it fired (tick, boot,
-- catch_up, manual), as on its job.
INSERT INTO schedule_slots (project, name, slot, fired_at, fired_by, reason)
VALUES (%(project)s, %(name)s, %(slot)s, rowfleet_now(%(now)s), %(fired_by)s, %(reason)s)
ON CONFLICT (project, name, slot) DO NOTHING
RETURNING slot;

-- name: schedule_slot_set_job
UPDATE schedule_slots SET job_id = %(job_id)s WHERE project = %(project)s AND name = %(name)s AND slot = %(slot)s;

-- name: schedule_advance
UPDATE schedules SET last_slot = greatest(last_slot, %(slot)s), updated_at = rowfleet_now(%(now)s)
WHERE project = %(project)s AND name = %(name)s;

-- name: last_slots
SELECT name, last_slot, updated_at FROM schedules WHERE project = %(project)s ORDER BY name;

-- name: fired_slots
SELECT name, slot, job_id, fired_at, fired_by, reason FROM schedule_slots
WHERE project = %(project)s AND (%(name)s::text IS NULL OR name = %(name)s)
ORDER BY slot DESC, name
LIMIT %(limit)s;

-- name: prune_schedule_slots
-- The record of old slots; each schedule's newest slot stays in schedules.last_slot.
DELETE FROM schedule_slots
WHERE (project, name, slot) IN (SELECT project, name, slot FROM schedule_slots
                                WHERE fired_at < rowfleet_now(%(now)s) - %(retention)s
                                ORDER BY fired_at LIMIT %(limit)s);

-- Orchestrators: each beats once per sweep, so status can say whether a project is served.
