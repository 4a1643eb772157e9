-- rowfleet schema version 9: operators' rules for the models of a box.

-- (host, model, action): pin keeps the model warm on the host, forbid keeps it off; both
-- stand until the row is deleted. unload and preload are requests that a worker of the
-- host carries out once and marks done (done_at). host '*': every host.
CREATE TABLE model_controls (
    host       text NOT NULL,
    model      text NOT NULL,
    action     text NOT NULL CHECK (action IN ('pin', 'forbid', 'unload', 'preload')),
    changed_by text NOT NULL DEFAULT '',
    changed_at double precision NOT NULL,
    done_at    double precision,
    PRIMARY KEY (host, model, action)
);
