"""The long-running processes: orchestrator, scheduler, sampler, supervisor, the ``/metrics`` exporter and the web server they share."""
