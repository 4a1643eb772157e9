"""One worker process: the claim loop, its next-action rule, the keeper (lease and heartbeat), the watchdog, and what a handler calls."""
