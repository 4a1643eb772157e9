"""The hosts command: every host's newest telemetry at a glance (``rowfleet hosts``), and
one host's series over a window (``rowfleet hosts HOST --since 1h``), rendering the
hosts' read model (``rowfleet.views.hosts``). Formats only: what a reading means is decided
there and in ``rowfleet.telemetry.readings``; imports no driver and writes no SQL."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Iterable, Mapping

from rowfleet import config as configuration
from rowfleet import exitcodes, names
from rowfleet.cli.arguments import Parser, typed
from rowfleet.cli.output import escaped, print_json, say, table
from rowfleet.errors import ConfigError
from rowfleet.job import iso
from rowfleet.store import open_store
from rowfleet.store.telemetry import TIERS
from rowfleet.telemetry.readings import gpu_indexes
from rowfleet.views.hosts import GpuView, HostSeries, HostView, host_series, hosts, reading

DEFAULT_SINCE = "1h"
GIB = 2 ** 30
MIB_PER_GIB = 1024
NO_HOSTS = ("no host has sampled yet: run `rowfleet sampler` on each host, or a worker with --procs "
            "(its supervisor runs the host's sampler)")


def add_commands(command: Callable[..., Parser]) -> None:
    sub = command("hosts", cmd_hosts, "each host's newest telemetry (CPU, memory, temperature, GPUs with the "
                  "last hour's throttling) and the jobs running there, or one host's samples over a window",
                  reads=("database", "telemetry"))
    # Not "host": that is the --host setting's name (this machine's label).
    sub.add_argument("target", nargs="?", metavar="HOST", type=typed("host"), help="show this host's samples over --since instead")
    sub.add_argument("--since", default=None, metavar="DURATION",
                     help=f"with HOST: how far back, e.g. 90s, 30m, 1h, 7d (default {DEFAULT_SINCE})")
    sub.add_argument("--tier", choices=TIERS, default=None,
                     help="with HOST: detail (a row every few seconds, kept about an hour) or minute (a row a "
                          "minute, kept about a week); default: detail when --since fits what it keeps")
    sub.add_argument("--json", action="store_true")


def cmd_hosts(args: argparse.Namespace, config: configuration.Config) -> int:
    if args.target is None:
        if args.since is not None or args.tier is not None:
            raise ConfigError(f"--since and --tier go with a host, e.g. rowfleet hosts HOST --since {DEFAULT_SINCE}")
        return _show_hosts(config, args.json)
    host = args.target
    since = names.RULES["duration"].check("--since", DEFAULT_SINCE if args.since is None else args.since)
    with open_store(config) as store:
        store.require_schema()
        series = host_series(store, host, since, args.tier)
    if args.json:
        print_json(series.to_dict())
    else:
        say(series_table(series) or f"no samples of host {host} in the last {args.since or DEFAULT_SINCE} "
                                     f"({series.tier} tier)", lines=True)  # a table: its cells are escaped
    return exitcodes.OK


def _show_hosts(config: configuration.Config, as_json: bool) -> int:
    with open_store(config) as store:
        store.require_schema()
        views = hosts(store)
    if as_json:
        print_json({"hosts": [view.to_dict() for view in views]})
    else:
        print(hosts_table(views) or NO_HOSTS)
    return exitcodes.OK


def hosts_table(views: Iterable[HostView]) -> str:
    """One line per host: its figures in columns, then its GPUs and its jobs."""
    views = list(views)
    if not views:
        return ""
    rows = [[view.host, age_text(view.age) + (" stale" if view.stale else ""), percent(view.cpu_busy),
             "?" if view.load1 is None else f"{view.load1:.2f}", ram_text(view.ram_used, view.ram_total),
             celsius(view.hottest)] for view in views]
    lines = table(["host", "age", "cpu", "load", "ram", "hottest"], rows).splitlines()
    width = max(len(line) for line in lines)
    tails = ["gpus, jobs"] + [escaped(_tail(view)) for view in views]
    return "\n".join(f"{line.ljust(width)}  {tail}".rstrip() for line, tail in zip(lines, tails))


def _tail(view: HostView) -> str:
    if view.error is not None:
        return f"readings unreadable: {view.error}"
    parts = [gpu_text(gpu) for gpu in view.gpus]
    if view.gpu_error:
        parts.append(f"gpu: {view.gpu_error}")
    if view.jobs:
        parts.append("jobs: " + ", ".join(f"{job.job_id} ({job.queue})" for job in view.jobs))
    return "  ".join(parts)


def gpu_text(gpu: GpuView) -> str:
    """A GPU as the listing shows it; ``?`` where a reading is unknown.

    >>> gpu_text(GpuView(0, "H100", 87.0, 62668.8, 81920.0, 71.0, 305.2, 350.0, 1980.0, ("sw_power_cap",),
    ...                  {"sw_power_cap": 12.0}))
    'gpu0 87% 61.2/80.0 GiB 71°C 305/350 W 1980 MHz thr 12s [sw_power_cap]'
    >>> gpu_text(GpuView(1, None, None, None, None, None, None, None, None))
    'gpu1 ?% ?/? GiB ?°C ?/? W ? MHz thr 0s'
    >>> from rowfleet.control import GpuSwitch
    >>> gpu_text(GpuView(2, None, None, None, None, None, None, None, None,
    ...                  switch=GpuSwitch("box", 2, "off", "row remapping failed", "health gate")))
    'gpu2 ?% ?/? GiB ?°C ?/? W ? MHz thr 0s OFF by health gate: row remapping failed'
    """
    text = (f"gpu{gpu.index} {percent(gpu.util)} {_of(gpu.vram_used_mib, MIB_PER_GIB)}/"
            f"{_of(gpu.vram_total_mib, MIB_PER_GIB)} GiB {celsius(gpu.temp)} {_whole(gpu.power_w)}/"
            f"{_whole(gpu.power_limit_w)} W {_whole(gpu.sm_mhz)} MHz thr {gpu.throttled():.0f}s")
    text += f" [{', '.join(gpu.slowdowns)}]" if gpu.slowdowns else ""
    if gpu.off:
        text += f" OFF by {gpu.switch.changed_by or 'an operator'}" + (f": {gpu.switch.reason}" if gpu.switch.reason else "")
    elif gpu.switch is not None and gpu.switch.health:
        text += f" failing (cleared by an operator): {gpu.switch.health}"
    return text


def series_table(series: HostSeries) -> str:
    """A host's series as a table: time, CPU, RAM, hottest, and per GPU its utilisation,
    temperature and power; rows that did not decode say so."""
    indexes = _gpus_of(row["readings"] for row in series.rows)
    rows = []
    for row in series.rows:
        readings: Mapping[str, Any] = row["readings"]
        if "error" in row:
            rows.append([iso(row["at"]), f"readings unreadable: {row['error']}"] + [""] * (2 + len(indexes)))
            continue
        rows.append([iso(row["at"]), percent(reading(readings, "cpu.busy")),
                     ram_text(reading(readings, "mem.used"), reading(readings, "mem.total")),
                     celsius(reading(readings, "temp.hottest"))]
                    + [_gpu_cell(readings, index) for index in indexes])
    return table(["time", "cpu", "ram", "hottest", *(f"gpu{index}" for index in indexes)], rows)


def _gpus_of(readings: Iterable[Mapping[str, Any]]) -> list[str]:
    found = {index for one in readings for index in gpu_indexes(one) if index.isascii() and index.isdigit()}
    return sorted(found, key=int)


def _gpu_cell(readings: Mapping[str, Any], index: str) -> str:
    if not any(name.startswith(f"gpu.{index}.") for name in readings if isinstance(name, str)):
        return "-"
    return (f"{percent(reading(readings, f'gpu.{index}.util'))} {celsius(reading(readings, f'gpu.{index}.temp'))} "
            f"{_whole(reading(readings, f'gpu.{index}.power_w'))} W")


def age_text(seconds: float) -> str:
    """A sample's age as the listing shows it, in its largest whole unit.

    >>> age_text(3.2), age_text(125.0), age_text(7300.0), age_text(200000.0), age_text(-0.4)
    ('3s', '2m', '2h', '2d', '0s')
    """
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def ram_text(used: float | None, total: float | None) -> str:
    """
    >>> ram_text(13_000_000_000, 68_719_476_736), ram_text(None, 68_719_476_736)
    ('12.1/64.0 GiB', '?/64.0 GiB')
    """
    return f"{_of(used, GIB)}/{_of(total, GIB)} GiB"


def percent(value: float | None) -> str:
    return f"{_whole(value)}%"


def celsius(value: float | None) -> str:
    return f"{_whole(value)}°C"


def _whole(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}"


def _of(value: float | None, unit: float) -> str:
    return "?" if value is None else f"{value / unit:.1f}"
