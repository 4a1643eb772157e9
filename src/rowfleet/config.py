"""The one configuration seam: a frozen, validated ``Config`` and ``configure()``.

Precedence is CLI flags > ``ROWFLEET_*`` environment > defaults. This is the only
module that reads the environment; everything below the CLI is handed a ``Config``.

Imports nothing of rowfleet's but the leaves ``errors`` and ``names`` (what a value may
be): every other module may import this one without pulling in the engine.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
from typing import Any, Mapping

from rowfleet import names
from rowfleet.errors import ConfigError

DEFAULT_DB = "rowfleet.db"
# The knobs that are durations; each must be a positive number of seconds within names.MAX_SECONDS.
SECONDS = ("lease", "renew", "heartbeat", "poll", "interval", "backoff_base", "backoff_max", "retention",
           "busy_timeout", "budget", "stall_window", "stall_spacing", "gpu_first_window", "gpu_window",
           "gpu_sample", "restart_delay", "restart_delay_max", "cancel_grace")


@dataclasses.dataclass(frozen=True)
class Config:
    """Every knob rowfleet has, with its default. Times are in seconds."""

    db: str = DEFAULT_DB
    project: str = ""
    host: str = ""
    lease: float = 600.0
    renew: float = 10.0
    heartbeat: float = 10.0
    poll: float = 1.0
    interval: float = 5.0
    backoff_base: float = 2.0
    backoff_max: float = 3600.0
    retention: float = 7 * 24 * 3600.0
    synchronous: str = "FULL"
    busy_timeout: float = 30.0
    # Watchdogs (see the README's liveness section).
    budget: float = 3600.0            # wall clock a job may take unless it or its task sets its own
    stall_window: float = 300.0       # no progress beat this long, once a job has beaten: suspect a stall
    stall_samples: int = 3            # readings that must all look hung before a stall trips ...
    stall_spacing: float = 1.0        # ... this many seconds apart
    idle_gpu: float = 5.0             # GPU utilisation (%) under this is idle
    memory_delta_mb: float = 5120.0   # memory moving less than this across a window is static
    gpu_first_window: float = 1200.0  # GPU jobs: idle window before the first beat (model load)
    gpu_window: float = 300.0         # GPU jobs: idle window once the job has beaten
    gpu_sample: float = 10.0          # GPU jobs: seconds between GPU readings
    watchdog_retries: int = 3         # watchdog trips a job may take; the next one fails it
    nvidia_smi: str = "nvidia-smi"    # the command the GPU readings run
    restart_delay: float = 0.5        # a supervisor's first wait before restarting a child that died ...
    restart_delay_max: float = 30.0   # ... doubling to this while children keep dying young
    cancel_grace: float = 30.0        # a cancelled running job's handler may take this long to stop
    allow_modules: tuple[str, ...] = ()  # module prefixes whose functions a worker runs by name

    def __post_init__(self) -> None:
        if not self.host:
            object.__setattr__(self, "host", socket.gethostname())
        names.check_text("db", self.db)
        if not self.db.strip():
            raise ConfigError("db must be a non-empty path or URL")
        names.check_name("project", self.project, empty=True)  # '*' means every one in a worker switch
        names.check_name("host", self.host)
        for name in SECONDS:
            object.__setattr__(self, name, names.check_seconds(name, getattr(self, name)))
        for name in ("idle_gpu", "memory_delta_mb"):
            object.__setattr__(self, name, names.check_number(name, getattr(self, name), positive=True))
        for name, least in (("stall_samples", 1), ("watchdog_retries", 0)):
            names.check_int(name, getattr(self, name), least=least, most=names.INT32_MAX)
        if not isinstance(self.nvidia_smi, str) or not self.nvidia_smi.strip():
            raise ConfigError("nvidia_smi must name a command")
        names.check_text("nvidia_smi", self.nvidia_smi)
        if self.renew >= self.lease:
            raise ConfigError(f"renew ({self.renew:g}s) must be shorter than lease ({self.lease:g}s)")
        synchronous = str(self.synchronous).upper()
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigError(f"synchronous must be FULL or NORMAL, got {self.synchronous!r}")
        object.__setattr__(self, "synchronous", synchronous)
        object.__setattr__(self, "allow_modules", _module_prefixes(self.allow_modules))

    @property
    def db_shown(self) -> str:
        """The database setting as messages and logs may show it: any password masked."""
        return redact_url(self.db)

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)


FIELDS = {field.name: field for field in dataclasses.fields(Config)}
ENV_PREFIX = "ROWFLEET_"


def from_env(environ: Mapping[str, str], **overrides: Any) -> Config:
    """Build a Config from ``ROWFLEET_<KNOB>`` variables, then explicit overrides.

    Overrides whose value is None are ignored, so argparse defaults of None fall through.

    >>> from_env({"ROWFLEET_LEASE": "30"}, project="alpha").lease
    30.0
    """
    values: dict[str, Any] = {}
    for name, field in FIELDS.items():
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is not None and raw != "":
            values[name] = _parse(name, field, raw)
    values.update({k: v for k, v in overrides.items() if v is not None})
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    return Config(**values)


def _parse(name: str, field: dataclasses.Field, raw: str) -> Any:
    if field.type in ("float", float):
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be a number, got {names.shown(raw)}") from None
    if field.type in ("int", int):
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"{ENV_PREFIX}{name.upper()} must be a whole number, got {names.shown(raw)}") from None
    if field.type == "tuple[str, ...]":
        return tuple(raw.split(","))
    return raw


def _module_prefixes(value: Any) -> tuple[str, ...]:
    """Module prefixes as a tuple: a comma list or an iterable of dotted module names.

    >>> _module_prefixes("app, lib.tasks"), _module_prefixes(["app"])
    (('app', 'lib.tasks'), ('app',))
    """
    items = value.split(",") if isinstance(value, str) else value
    try:
        prefixes = tuple(str(item).strip() for item in items if str(item).strip())
    except TypeError:
        raise ConfigError(f"allow_modules must be module names, got {names.shown(value)}") from None
    for prefix in prefixes:
        if not all(part.isidentifier() for part in prefix.split(".")):
            raise ConfigError(f"allow_modules: {names.shown(prefix)} is not a module name (like pkg or pkg.sub)")
    return prefixes


def redact_url(url: str) -> str:
    """A URL safe to print: any password is masked.

    >>> redact_url("postgresql://ops:s3cret@db:5432/fleet")
    'postgresql://ops:***@db:5432/fleet'
    """
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"


_lock = threading.Lock()
_current: Config | None = None


def configure(**settings: Any) -> Config:
    """Set the process-wide configuration used by the module-level API.

    Unspecified knobs come from ``ROWFLEET_*`` environment variables, then defaults.
    Returns the new Config. Calling it again replaces the configuration.
    """
    global _current
    config = from_env(os.environ, **settings)
    with _lock:
        _current = config
    return config


def current() -> Config:
    """The configuration set by ``configure()``, or one built from the environment."""
    global _current
    with _lock:
        if _current is None:
            _current = from_env(os.environ)
        return _current
