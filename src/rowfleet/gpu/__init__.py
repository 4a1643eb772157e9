"""GPU fleets: where model jobs go (routing, pure), the GPU side of a worker process, inference sidecars."""
