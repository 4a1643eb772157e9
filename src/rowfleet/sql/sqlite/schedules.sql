-- rowfleet's queries for SQLite: periodic schedules and their fired slots.

-- name: fire_slot
-- The schedule's row, made on first use and locked for the rest of the transaction, so
-- schedulers firing the same schedule take turns and each reads the newest slot fired.
INSERT INTO schedules (project, name, last_slot, updated_at) VALUES (:project, :name, NULL, :now)
ON CONFLICT (project, name) DO UPDATE SET updated_at = excluded.updated_at
RETURNING last_slot;

-- name: schedule_slot_insert
-- No row back: another scheduler fired this slot first. reason: why it fired (tick, boot,
-- catch_up, manual), as on its job.
INSERT INTO schedule_slots (project, name, slot, fired_at, fired_by, reason)
VALUES (:project, :name, :slot, :now, :fired_by, :reason)
ON CONFLICT (project, name, slot) DO NOTHING
RETURNING slot;

-- name: schedule_slot_set_job
UPDATE schedule_slots SET job_id = :job_id WHERE project = :project AND name = :name AND slot = :slot;

-- name: schedule_advance
UPDATE schedules SET last_slot = max(coalesce(last_slot, :slot), :slot), updated_at = :now
WHERE project = :project AND name = :name;

-- name: last_slots
SELECT name, last_slot, updated_at FROM schedules WHERE project = :project ORDER BY name;

-- name: fired_slots
SELECT name, slot, job_id, fired_at, fired_by, reason FROM schedule_slots
WHERE project = :project AND (:name IS NULL OR name = :name)
ORDER BY slot DESC, name
LIMIT :limit;

-- name: prune_schedule_slots
-- The record of old slots; each schedule's newest slot stays in schedules.last_slot.
DELETE FROM schedule_slots
WHERE (project, name, slot) IN (SELECT project, name, slot FROM schedule_slots
                                WHERE fired_at < :now - :retention
                                ORDER BY fired_at LIMIT :limit);

-- Orchestrators: each beats once per sweep, so status can say whether a project is served.
