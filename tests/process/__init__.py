"""Real processes: the command line, workers, supervisors and servers started, killed with SIGKILL, frozen, cut off, failed over, run out of disk or clock."""
