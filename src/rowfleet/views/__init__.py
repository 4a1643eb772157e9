"""Read models an operator sees: the fleet snapshot, the hosts, why a job waits."""
