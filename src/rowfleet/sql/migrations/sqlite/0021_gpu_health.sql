-- rowfleet schema version 21: the GPU health gate. One row per GPU of a host that the
-- host's sampler has judged (rowfleet.telemetry.gpu_health): its last verdict (health: ''
-- when healthy, else why not; health_at: when judged) and its switch. A failing verdict
-- switches the GPU off for new claims (desired 'off', changed_by 'health gate'); only an
-- operator switches it on again, and that acknowledges the verdict then in force
-- (cleared), so the gate trips again only on a new one (more errors than were cleared).
CREATE TABLE gpu_switches (
    host       TEXT    NOT NULL,
    gpu_index  INTEGER NOT NULL,
    desired    TEXT    NOT NULL DEFAULT 'on' CHECK (desired IN ('on', 'off')),
    reason     TEXT    NOT NULL DEFAULT '',
    changed_by TEXT    NOT NULL DEFAULT '',
    changed_at REAL    NOT NULL,
    health     TEXT    NOT NULL DEFAULT '',
    health_at  REAL,
    cleared    TEXT,
    PRIMARY KEY (host, gpu_index)
);
