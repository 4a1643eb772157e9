"""Probes of the machine: for the watchdogs that decide whether a job is hung, and for the
host sampler that records how each box is doing.

``gpu`` reads the NVIDIA GPUs through the ``nvidia-smi`` command (never NVML bindings) and
``gpu_readings`` what a sampler records of them (temperatures, power, clocks, throttle
reasons and their durations); ``memory`` reads a process tree's memory from ``/proc`` and
cgroup v2; ``cpu`` (utilisation per core, frequency, load, pressure, thermal throttling),
``host_memory`` (RAM, swap, the cgroup's usage and limit), ``disk_net`` (filesystem usage,
disk and network rates) and ``sensors`` (temperatures, RAPL power) read the host from
``/proc`` and ``/sys``; ``text`` is how all of them read a file and an integer. Each module
keeps its parsers pure and its readers thin, readers take a root folder (tests point them at
fixture trees), and none raises for a machine that lacks the thing probed: an answer says
"unknown" (None, or empty) and, where it can, why.

Stdlib only; imports nothing else from rowfleet, so the worker, CLI and panel may all use it.
"""
