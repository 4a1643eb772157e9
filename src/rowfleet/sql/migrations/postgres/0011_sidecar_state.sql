-- rowfleet schema version 11: what a worker's sidecar is doing, on its heartbeat row.

-- A JSON object (NULL: the worker owns no sidecar): {"state": "up" | "stopped" |
-- "stuck_vram" | "down", "pid", "at", and for a stop its "reason", the "footprint_mb" and
-- "freed_mb" it measured and, when stuck, the "holders": pids still holding GPU memory}.
ALTER TABLE workers ADD COLUMN sidecar TEXT;
