"""Probes of the machine a job runs on, for the watchdogs that decide whether it is hung.

``gpu`` reads the NVIDIA GPUs through the ``nvidia-smi`` command (never NVML bindings);
``memory`` reads a process tree's memory from ``/proc`` and cgroup v2. Each module keeps
its parsers pure and its readers thin, and neither raises for a machine that lacks the
thing probed: an answer says "unknown" and why.

Stdlib only; imports nothing else from rowfleet, so the worker, CLI and panel may all use it.
"""
