-- rowfleet schema version 12: a worker may serve several queues, in order.

-- A JSON array of every queue the worker serves, first first (queue holds the first);
-- NULL for a worker of one queue.
ALTER TABLE workers ADD COLUMN queues TEXT;
