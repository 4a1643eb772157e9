"""The one configuration seam: every setting declared once, a frozen, validated ``Config``
and ``configure()``.

Each setting is one ``Setting`` in ``SETTINGS``: its name (the ``Config`` field, the
``configure()`` keyword and, upper-cased, ``ROWFLEET_<NAME>``), default, kind (how its
text reads), the rule that checks it, its command-line flag and help, the families of
processes that read it (``GROUPS``) and the label the README's tables give it.
``Config``'s fields, its validation, the environment's reading, the command line's flags
(``cli.arguments``: each command takes the flags of the families it names), the listing
of ``rowfleet settings`` and the README's settings tables (``settings_table()``, kept in
step by ``python make.py settings-table`` and a test) are all derived from them.

Precedence is CLI flags > ``ROWFLEET_*`` environment > defaults. This is the only
module below the CLI that reads the environment; everything below the CLI is handed a
``Config``.

Imports nothing of rowfleet's but the leaves ``errors`` and ``names`` (what a value may
be): every other module may import this one without pulling in the engine.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
from functools import partial
from typing import Any, Callable, Mapping

from rowfleet import names
from rowfleet.errors import ConfigError

DEFAULT_DB = "rowfleet.db"
ENV_PREFIX = "ROWFLEET_"

# Where a setting's flag goes on the command line.
GLOBAL = "global"    # rowfleet's own flags, before the command (or after it)
COMMAND = "command"  # on the commands that read it: those naming a family of its ``read_by``
OWN = "own"          # added only by the commands it matters to (``--allow-module``: those that run tasks)

# The families of processes that read the settings of COMMAND scope, each with the heading
# its settings go under, in the order a command's help shows them. A command names the
# families it is (``rowfleet worker``: the database's, a worker's, its watchdogs', its
# supervisor's and its sampler's) and takes the flags of the settings they read.
GROUPS = {
    "database": "database settings",
    "connection": "PostgreSQL connection settings (its timeouts and keepalives follow them)",
    "worker": "worker settings",
    "watchdog": "watchdog settings",
    "supervisor": "supervisor settings",
    "sampler": "sampler settings",
    "orchestrator": "orchestrator settings",
    "scheduler": "scheduler settings",
    "switches": "switch settings",
    "waiting": "wait settings",
    "telemetry": "telemetry view settings",
    "panel": "panel settings",
}

# The README's tables of settings: the Settings section's, and the one under Liveness.
TABLES = ("general", "liveness")


@dataclasses.dataclass(frozen=True)
class Kind:
    """What sort of value a setting holds: the ``Config`` field's type, how its text (a
    flag's or a variable's) reads, and the rule every value of the kind passes (a field's
    of ``names.RULES``).

    ``read`` raises ``ValueError`` for text that is not a value of the kind; ``expected``
    says what it wants instead. A number's flag is checked while the command line is
    parsed, so its refusal names the flag; other flags are checked as the ``Config`` is
    built.
    """

    type: str
    read: Callable[[str], Any]
    expected: str
    check: Callable[[str, Any], Any] | None = None
    unit: str = ""          # of a number, where its default is shown: "s"
    repeated: bool = False  # a list: its flag repeats, its variable is a comma list


def _positive(unit: str) -> Kind:
    return Kind("float", names.read_float, "a number", names.RULES["positive number"].check, unit=unit)


def _count(field: str) -> Kind:
    """Whole numbers by the rule of ``field``: kept in 32-bit columns."""
    return Kind("int", names.read_int, "a whole number", names.RULES[field].check)


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(text.split(","))


SECONDS = Kind("float", names.read_float, "a number of seconds", names.RULES["seconds"].check, unit="s")
PERCENT = _positive("%")
MIB = _positive("MiB")
AT_LEAST_ONE = _count("count")
AT_LEAST_ZERO = _count("count or zero")
TEXT = Kind("str", str, "text")
MODULES = Kind("tuple[str, ...]", _comma_list, "module names", repeated=True)
PATHS = Kind("tuple[str, ...]", _comma_list, "paths", repeated=True)
HOST_NAMES = Kind("tuple[str, ...]", _comma_list, "host names", repeated=True)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting, declared once: everything else about it is derived from this.

    ``help`` is the flag's help without its default; ``doc`` the README's label for it;
    ``check`` the rule of its values where its kind's is not enough; ``shown`` its default
    in words where the value itself would mislead (the host's ``""`` means the hostname).
    ``scope`` is where its flag goes (``GLOBAL``, ``COMMAND`` or ``OWN``), ``table`` the
    README table that lists it, and ``in_config`` False for the one setting the command
    line reads for itself (the log level). ``read_by``, for a setting of ``COMMAND`` scope
    only, names the families of ``GROUPS`` whose processes read it, the one it is listed
    under first: its flag goes on every command that names one of them, and on no other.
    """

    name: str
    default: Any
    kind: Kind
    help: str
    doc: str
    check: Callable[[str, Any], Any] | None = None
    flag: str = ""
    scope: str = COMMAND
    table: str = "general"
    shown: str = ""
    in_config: bool = True
    read_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.flag:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))
        if (self.scope == COMMAND) != bool(self.read_by) or not set(self.read_by) <= set(GROUPS):
            raise ValueError(f"setting {self.name}: read_by must name families of GROUPS for, and only for, "
                             f"a setting of {COMMAND} scope, got {self.read_by!r}")

    @property
    def group(self) -> str:
        """The family it is listed under: the first that reads it, or its scope's name
        (``global``, ``own``) for a setting outside the families."""
        return self.read_by[0] if self.read_by else self.scope

    @property
    def env(self) -> str:
        """Its environment variable: ``ROWFLEET_<NAME>``."""
        return ENV_PREFIX + self.name.upper()

    def checked(self, value: Any) -> Any:
        """``value`` as the setting holds it, or a ``ConfigError`` naming the setting."""
        rule = self.check or self.kind.check
        return value if rule is None else rule(self.name, value)

    def read(self, text: str) -> Any:
        """The value a variable's ``text`` stands for (not yet checked).

        >>> SETTING["lease"].read("30"), SETTING["allow_modules"].read("app,lib")
        (30.0, ('app', 'lib'))
        """
        try:
            return self.kind.read(text)
        except ValueError:  # also int()'s refusal of more than 4300 digits
            raise ConfigError(f"{self.env} must be {self.kind.expected}, got {names.shown(text)}") from None

    def default_markdown(self) -> str:
        """The default as the README shows it.

        >>> [SETTING[name].default_markdown() for name in ("lease", "idle_gpu", "project", "host")]
        ['30 s', '5 %', '`""`', 'the hostname']
        """
        return self._default_shown(" ")

    def default_text(self) -> str:
        """The default as a flag's help shows it: plain text, a unit joined to its number
        so that the help never wraps between them.

        >>> [SETTING[name].default_text() for name in ("lease", "idle_gpu", "synchronous", "project")]
        ['30s', '5%', 'FULL', '""']
        """
        return self._default_shown("").replace("`", "")

    def _default_shown(self, before_unit: str) -> str:
        if self.shown:
            return self.shown
        if isinstance(self.default, str):
            return f"`{self.default}`" if self.default else '`""`'
        number = f"{self.default:g}" if isinstance(self.default, float) else str(self.default)
        return f"{number}{before_unit}{self.kind.unit}" if self.kind.unit else number

    def row(self) -> str:
        """The setting's row in its README table.

        >>> SETTING["lease"].row()
        '| lease length | `--lease` | `ROWFLEET_LEASE` | 30 s |'
        """
        flag, env = f"`{self.flag}`", f"`{self.env}`"
        if self.kind.repeated:
            flag, env = f"{flag} (repeatable)", f"{env} (comma list)"
        return f"| {self.doc} | {flag} | {env} | {self.default_markdown()} |"


def _check_db(what: str, value: Any) -> str:
    text = names.check_text(what, value)
    if not text.strip():
        raise ConfigError(f"{what} must be a non-empty path or URL")
    return text


def _check_host(what: str, value: Any) -> str:
    return names.RULES["host"].check(what, value or socket.gethostname())


def _check_synchronous(what: str, value: Any) -> str:
    mode = str(value).upper()
    if mode not in ("FULL", "NORMAL"):
        raise ConfigError(f"{what} must be FULL or NORMAL, got {value!r}")
    return mode


def _check_command(what: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{what} must name a command")
    return names.check_text(what, value)


POOLERS = ("none", "session", "transaction")


def _check_pooler(what: str, value: Any) -> str:
    mode = str(value).lower()
    if mode not in POOLERS:
        raise ConfigError(f"{what} must be none, session or transaction, got {names.shown(value)}")
    return mode


def _check_listen_url(what: str, value: Any) -> str:
    text = names.check_text(what, value, empty=True)
    if text and text.split("://", 1)[0] not in ("postgres", "postgresql"):
        raise ConfigError(f"{what} must be a postgresql:// URL straight to the server, got {redact_url(text)!r}")
    return text


def _items(what: str, value: Any, kind: str) -> tuple[str, ...]:
    """A list setting's items: a comma list or an iterable, stripped, blanks dropped.

    >>> _items("sample_paths", "/data, ,/scratch", "paths")
    ('/data', '/scratch')
    """
    items = value.split(",") if isinstance(value, str) else value
    try:
        return tuple(str(item).strip() for item in items if str(item).strip())
    except TypeError:
        raise ConfigError(f"{what} must be {kind}, got {names.shown(value)}") from None


def _module_prefixes(what: str, value: Any) -> tuple[str, ...]:
    """Module prefixes as a tuple: a comma list or an iterable of dotted module names.

    >>> _module_prefixes("allow_modules", "app, lib.tasks"), _module_prefixes("allow_modules", ["app"])
    (('app', 'lib.tasks'), ('app',))
    """
    return _checked_items(what, value, "module names", "module")


def _paths(what: str, value: Any) -> tuple[str, ...]:
    """Filesystem paths as a tuple: a comma list or an iterable of paths, blanks dropped.

    >>> _paths("sample_paths", "/data, /scratch"), _paths("sample_paths", ["/models"])
    (('/data', '/scratch'), ('/models',))
    """
    return _checked_items(what, value, "paths", "path")


def _checked_items(what: str, value: Any, kind: str, rule: str) -> tuple[str, ...]:
    """``_items`` of ``value``, each checked by ``names.RULES[rule]``."""
    items = _items(what, value, kind)
    for item in items:
        names.RULES[rule].check(what, item)
    return items


def _host_names(what: str, value: Any) -> tuple[str, ...]:
    """Host names as a tuple, lower case (a ``Host`` header's name is compared without case):
    a comma list or an iterable of names, each a name by ``names.check_name`` and without
    a port or brackets (an address in digits needs no allowing).

    >>> _host_names("allowed_hosts", "Panel.example, box")
    ('panel.example', 'box')
    >>> _host_names("allowed_hosts", "box:8465")
    Traceback (most recent call last):
    rowfleet.errors.ConfigError: allowed_hosts: 'box:8465' is not a host name (give the name alone, like panel.example)
    """
    hosts = _items(what, value, "host names")
    for host in hosts:
        names.check_name(what, host)
        if any(mark in host for mark in ":/[]@"):
            raise ConfigError(f"{what}: {names.shown(host)} is not a host name (give the name alone, like "
                              f"panel.example)")
    return tuple(host.lower() for host in hosts)


def _seconds(name: str, default: float, help: str, doc: str, **more: Any) -> Setting:
    return Setting(name, default, SECONDS, help, doc, **more)


# Every setting rowfleet has; Config's fields are those in_config, in this order. Times are in seconds.
SETTINGS: tuple[Setting, ...] = (
    Setting("db", DEFAULT_DB, TEXT, "database: a SQLite path, sqlite:///PATH or a postgresql:// URL", "database",
            check=_check_db, scope=GLOBAL),
    # '*' is no project's name: worker switches use it for every one.
    Setting("project", "", TEXT, "project tag", "project", check=names.RULES["project"].check, scope=GLOBAL),
    Setting("log_level", "INFO", TEXT, "DEBUG, INFO, WARNING or ERROR", "log level", scope=GLOBAL,
            in_config=False),
    Setting("host", "", TEXT, "this machine's label in holders and heartbeats", "host label", check=_check_host,
            shown="the hostname", read_by=("worker", "supervisor", "sampler", "orchestrator", "scheduler", "switches")),
    # A worker's; they also bound the timeouts and keepalives of every PostgreSQL connection,
    # which a long-running process needs to notice a server gone in time (a one-shot command's
    # connection keeps them from the environment or the defaults).
    _seconds("lease", 30.0, "seconds a claimed job's lease lasts (its holder stops it sooner if it cannot renew)",
             "lease length", read_by=("worker", "connection")),
    _seconds("renew", 5.0, "seconds between lease renewals", "lease renewal cadence",
             read_by=("worker", "connection")),
    _seconds("heartbeat", 10.0, "seconds between worker heartbeats",
             "heartbeat cadence (silent after 3 missed)", read_by=("worker", "supervisor", "connection")),
    # A floor: an idle worker that polls faster spins a core and gains nothing.
    _seconds("poll", 1.0, "safety poll of an idle worker, seconds", "idle safety poll",
             check=names.RULES["poll"].check, read_by=("worker", "sampler", "orchestrator", "scheduler", "waiting")),
    _seconds("interval", 5.0, "seconds between orchestrator sweeps", "orchestrator sweep", read_by=("orchestrator",)),
    _seconds("backoff_base", 2.0, "first retry delay, seconds, doubling per attempt", "first retry delay",
             read_by=("worker",)),
    _seconds("backoff_max", 3600.0, "longest retry delay, seconds", "longest retry delay", read_by=("worker",)),
    _seconds("retention", 7 * 24 * 3600.0, "seconds finished jobs are kept before pruning",
             "retention of finished jobs", shown="7 days", read_by=("orchestrator",)),
    Setting("synchronous", "FULL", TEXT, "SQLite durability: FULL or NORMAL", "SQLite durability",
            check=_check_synchronous, read_by=("database",)),
    _seconds("busy_timeout", 30.0, "seconds to wait for the SQLite write lock", "SQLite write-lock wait",
             read_by=("database",)),
    # Watchdogs (see the README's liveness section).
    _seconds("budget", 3600.0, "wall clock a job may run unless it or its task sets one", "job budget",
             table="liveness", read_by=("watchdog",)),
    _seconds("stall_window", 300.0, "seconds without a progress beat before a stall is suspected", "stall window",
             table="liveness", read_by=("watchdog",)),
    Setting("stall_samples", 3, AT_LEAST_ONE, "readings that confirm a stall",
            "confirming readings", table="liveness", read_by=("watchdog",)),
    _seconds("stall_spacing", 1.0, "seconds between those readings", "time between confirming readings",
             table="liveness", read_by=("watchdog",)),
    Setting("idle_gpu", 5.0, PERCENT, "GPU utilisation % under which a GPU is idle", "idle GPU below",
            table="liveness", read_by=("watchdog",)),
    Setting("memory_delta_mb", 5120.0, MIB, "memory moving less than this (MiB) is static",
            "static memory moves less than", table="liveness", read_by=("watchdog",)),
    _seconds("gpu_first_window", 1200.0, "GPU jobs: idle window before the first beat",
             "GPU window before the first beat", table="liveness", read_by=("watchdog",)),
    _seconds("gpu_window", 300.0, "GPU jobs: idle window after the first beat", "GPU window after the first beat",
             table="liveness", read_by=("watchdog",)),
    _seconds("gpu_sample", 10.0, "GPU jobs: seconds between GPU readings", "GPU readings every", table="liveness",
             read_by=("watchdog",)),
    Setting("watchdog_retries", 3, AT_LEAST_ZERO, "watchdog trips a job may take before it fails",
            "watchdog trips before a job fails", table="liveness", read_by=("watchdog", "orchestrator")),
    Setting("nvidia_smi", "nvidia-smi", TEXT, "the nvidia-smi command for GPU readings", "the nvidia-smi command",
            check=_check_command, table="liveness", read_by=("watchdog", "worker", "sampler")),
    _seconds("restart_delay", 0.5, "supervisor: first wait before restarting a dead child",
             "restart delay, first", table="liveness", read_by=("supervisor",)),
    _seconds("restart_delay_max", 30.0, "supervisor: longest wait, doubling from the first",
             "restart delay, longest", table="liveness", read_by=("supervisor",)),
    _seconds("cancel_grace", 30.0, "seconds a cancelled running job's handler has to stop before its worker "
             "process is ended", "a cancelled running job's time to stop", read_by=("worker",)),
    # The host's telemetry sampler and its flight recorder (see the README's telemetry section).
    _seconds("sample_every", 2.0, "seconds between a host sampler's readings", "host samples every",
             read_by=("sampler", "panel")),
    _seconds("sample_detail_keep", 3600.0, "seconds the detail host samples are kept", "detail host samples kept",
             shown="1 hour", read_by=("orchestrator", "telemetry")),
    _seconds("sample_minute_keep", 7 * 24 * 3600.0, "seconds the per-minute host samples are kept",
             "per-minute host samples kept", shown="7 days", read_by=("orchestrator",)),
    Setting("sample_paths", (), PATHS, "also report the disk space of the filesystem holding this path",
            "paths whose disk space the sampler reports", check=_paths, flag="--sample-path", scope=OWN,
            shown="the SQLite database's folder"),
    # Read by `rowfleet metrics` only: a flag would show the secret in the process list.
    Setting("metrics_token", "", TEXT, "require 'Authorization: Bearer TOKEN' on every /metrics request",
            "the bearer token `rowfleet metrics` requires", check=partial(names.check_text, empty=True),
            flag="--token", scope=OWN, shown="none"),
    # Read by `rowfleet panel` only, for the same reason.
    Setting("panel_token", "", TEXT, "require this token to sign in to the panel (needed to bind beyond 127.0.0.1)",
            "the token `rowfleet panel` requires", check=partial(names.check_text, empty=True),
            flag="--token", scope=OWN, shown="none"),
    Setting("allow_modules", (), MODULES, "also run module:function tasks of this module and its submodules, "
            "besides the --app modules", "module prefixes a worker runs `module:function` tasks of",
            check=_module_prefixes, flag="--allow-module", scope=OWN, shown="only the `--app` modules"),
    # Read by `rowfleet panel`, `rowfleet metrics` and `rowfleet up --panel`: the names a browser may
    # reach them by besides localhost and addresses in digits (see rowfleet.services.webserver).
    Setting("allowed_hosts", (), HOST_NAMES, "also answer requests whose Host header names this host (with any "
            "port), besides localhost and IP addresses", "host names the panel and /metrics answer to",
            check=_host_names, flag="--allow-host", scope=OWN, shown="localhost and IP addresses"),
    # PostgreSQL through a connection pooler such as PgBouncer (see the README's section on it).
    Setting("pooler", "none", TEXT, "the pooler --db goes through to PostgreSQL: none, session or transaction "
            "(transaction: no prepared statements, session settings, LISTEN or migrations through it)",
            "PostgreSQL pooler mode of `--db`", check=_check_pooler, read_by=("database",)),
    Setting("listen_url", "", TEXT, "a postgresql:// URL straight to the server, for LISTEN wake-ups",
            "direct PostgreSQL URL for wake-ups (LISTEN)", check=_check_listen_url,
            shown="`--db`; none (the idle safety poll) with `--pooler transaction`", read_by=("database",)),
)
SETTING = {setting.name: setting for setting in SETTINGS}
CONFIG_SETTINGS = tuple(setting for setting in SETTINGS if setting.in_config)


class _Behaviour:
    """What ``Config`` does beyond holding its fields."""

    def __post_init__(self) -> None:
        for setting in CONFIG_SETTINGS:
            object.__setattr__(self, setting.name, setting.checked(getattr(self, setting.name)))
        if self.renew >= self.lease:
            raise ConfigError(f"renew ({self.renew:g}s) must be shorter than lease ({self.lease:g}s)")

    @property
    def db_shown(self) -> str:
        """The database setting as messages and logs may show it: any password masked."""
        return redact_url(self.db)

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)


# One field per setting, with its default; frozen, and validated as it is built.
Config = dataclasses.make_dataclass(
    "Config", [(s.name, s.kind.type, dataclasses.field(default=s.default)) for s in CONFIG_SETTINGS],
    bases=(_Behaviour,), frozen=True,
    namespace={"__module__": __name__, "__doc__": "Every setting rowfleet has (see ``SETTINGS``), checked. "
                                                  "Times are in seconds."})
FIELDS = {field.name: field for field in dataclasses.fields(Config)}


def settings_table(table: str = "general") -> str:
    """The README's markdown table of the settings ``table`` lists (one of ``TABLES``).

    >>> print(settings_table("liveness").splitlines()[2])
    | job budget | `--budget` | `ROWFLEET_BUDGET` | 3600 s |
    """
    if table not in TABLES:
        raise ValueError(f"no settings table {table!r}; the tables are {', '.join(TABLES)}")
    rows = [setting.row() for setting in SETTINGS if setting.table == table]
    return "\n".join(["| setting | flag | environment | default |", "|---|---|---|---|", *rows]) + "\n"


def from_env(environ: Mapping[str, str], **overrides: Any) -> Config:
    """Build a Config from ``ROWFLEET_<NAME>`` variables, then explicit overrides.

    Overrides whose value is None are ignored, so argparse defaults of None fall through.

    >>> from_env({"ROWFLEET_LEASE": "30"}, project="alpha").lease
    30.0
    """
    values = {setting.name: setting.read(environ[setting.env]) for setting in CONFIG_SETTINGS
              if environ.get(setting.env)}
    values.update({k: v for k, v in overrides.items() if v is not None})
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    return Config(**values)


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
