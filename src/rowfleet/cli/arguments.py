"""How the command line is read: argparse types that refuse bad values in one line, each
the rule of a field of ``names.RULES`` (``typed("procs")``), and every setting of
``config.SETTINGS`` as a flag (global, on the commands whose families read it, or the
commands' own), its type, default, help and heading all derived from the declaration;
``settings_of`` tells which settings a command's parser takes. Numbers are read from ASCII
text only: Python's ``int()`` also takes ``' 3'`` and other scripts' digits.

The flags several commands share live here too (``--allow-host``, a GPU worker's routing
flags, the panel's address, the schedules of ``--schedule`` and ``--app``), so that no
command module imports another."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import weakref
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rowfleet import models, names, tasks
from rowfleet.cli.output import warn
from rowfleet.config import (COMMAND, CONFIG_SETTINGS, ENV_PREFIX, GLOBAL, GROUPS, SETTING, SETTINGS, Config,
                             Setting)
from rowfleet.errors import ConfigError
from rowfleet.gpu import routing

if TYPE_CHECKING:
    from rowfleet.gpu.gpu_worker import GpuSettings
    from rowfleet.schedule import Schedule

# The panel's address, whichever command serves it (panel, up --panel): this machine only,
# unless told otherwise.
PANEL_BIND = "127.0.0.1"
PANEL_PORT = 8465
PANEL_TOKEN_ENV = SETTING["panel_token"].env
ALLOWED_HOSTS = SETTING["allowed_hosts"]

# The flags that make a GPU worker route its claims; each needs --gpu and a model to load.
ROUTING_FLAGS = ("models", "vram_mb", "gpu_index", "lane", "host_priority", "idle_unload")


class UsageError(Exception):
    """argparse found the command line malformed."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and an exception, not a usage dump.
    ``commands``: rowfleet's parser holds each command's parser by its name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, Parser] = {}

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


# int() and float() take ' 3', '1_0' and other scripts' digits: a number is read from ASCII.
_STRICT = {int: names.read_int, float: names.read_float}
_LABEL = {names.read_int: "int", names.read_float: "float"}


def number(convert: Callable[[str], Any], what: str, check: Callable[[str, Any], Any]) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text (``int`` and ``float`` as ``names.read_int``
    and ``names.read_float``), then let a ``names`` check decide whether the value is
    allowed (its requirement becomes argparse's one-line error). Prefer ``typed(field)``."""
    read = _STRICT.get(convert, convert)
    label = _LABEL.get(read, getattr(read, "__name__", "a"))

    def parse(text: str) -> Any:
        try:
            value = read(text)
        except ValueError:  # also int()'s refusal of more than 4300 digits
            raise argparse.ArgumentTypeError(f"invalid {label} value: {names.shown(text)} "
                                             f"(expected {what})") from None
        try:
            return check("value", value)
        except names.InvalidValue as exc:
            raise argparse.ArgumentTypeError(f"expected {exc.requirement}, got {names.shown(text)}") from None

    return parse


def typed(field: str) -> Callable[[str], Any]:
    """An argparse type that reads and checks a flag's text by the rule of ``field`` in
    ``names.RULES``: a refusal is argparse's one line, naming the flag."""
    rule = names.RULES[field]
    read = {names.INT: int, names.FLOAT: float}.get(rule.kind, str)
    return number(read, rule.requirement, rule.check)


# The commands' shared types, each a field's rule.
positive_float = typed("seconds")
non_negative_float = typed("delay")
positive_int = typed("limit")
int64 = typed("job id")  # ids: what both databases hold
positive_number = typed("positive number")
port_number = number(int, "a port number", partial(names.check_int, least=0, most=names.MOST_PORT))


def _flag_type(setting: Setting) -> Callable[[str], Any]:
    """How a setting's flag reads its text: a number by its setting's rule (or its kind's),
    while the command line is parsed; other text as it is, for ``Config`` to check."""
    kind = setting.kind
    if kind.type not in ("int", "float"):
        return kind.read
    return number(kind.read, kind.expected, setting.check or kind.check)  # type: ignore[arg-type]


def _help(setting: Setting, *more: str) -> str:
    # argparse %-formats help text: a literal % must be doubled.
    details = "; ".join((*more, f"default {setting.default_text()}"))
    return f"{setting.help} ({details})".replace("%", "%%")


# The setting each setting's flag stands for, by its action, whichever function added it.
_SETTING_OF: weakref.WeakKeyDictionary[argparse.Action, Setting] = weakref.WeakKeyDictionary()


def _setting_flag(container: Any, setting: Setting, **options: Any) -> argparse.Action:
    action = container.add_argument(setting.flag, **options)
    _SETTING_OF[action] = setting
    return action


def settings_of(parser: argparse.ArgumentParser) -> list[Setting]:
    """The settings whose flags ``parser`` takes, in its order: rowfleet's own, and those
    of a command's parser (``add_setting_flags`` and the commands' own)."""
    return [_SETTING_OF[action] for action in parser._actions if action in _SETTING_OF]  # no public walk


def add_global_flags(parser: argparse.ArgumentParser, default: Any = None) -> None:
    """rowfleet's own flags (``--db``, ``--project``, ``--log-level``); ``default`` is
    what a flag not given leaves (``argparse.SUPPRESS`` keeps a value given earlier)."""
    for setting in SETTINGS:
        if setting.scope == GLOBAL:
            _setting_flag(parser, setting, dest=setting.name, type=_flag_type(setting), default=default,
                          help=_help(setting, f"or {setting.env}"))


def add_setting_flags(parser: argparse.ArgumentParser, reads: Sequence[str]) -> None:
    """The flags of the settings that the families ``reads`` (of ``config.GROUPS``) read,
    and no others: each under the heading of the first family of its ``read_by`` that
    ``reads`` names. A flag not given is None, so the environment and the defaults apply.

    >>> parser = Parser(prog="rowfleet status")
    >>> add_setting_flags(parser, ["database"])
    >>> [setting.name for setting in settings_of(parser)]
    ['synchronous', 'busy_timeout', 'pooler', 'listen_url']
    """
    unknown = [family for family in reads if family not in GROUPS]
    if unknown:
        raise ValueError(f"no family of settings {unknown[0]!r}; the families are {', '.join(GROUPS)}")
    placed: dict[str, list[Setting]] = {}
    for setting in SETTINGS:
        family = next((family for family in setting.read_by if family in reads), None)
        if family is not None:
            placed.setdefault(family, []).append(setting)
    for family, heading in GROUPS.items():
        group = parser.add_argument_group(heading) if family in placed else None
        for setting in placed.get(family, ()):
            _setting_flag(group, setting, dest=setting.name, type=_flag_type(setting), default=None,
                          help=_help(setting))
    if placed:
        parser.epilog = (f"Each setting may also be given as {ENV_PREFIX}<NAME> in the environment; "
                         f"`rowfleet settings` lists them all, with the commands that read each.")


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Config`` settings the command line gave (None where a flag was not given, or
    the command takes no such flag)."""
    return {setting.name: getattr(args, setting.name, None) for setting in CONFIG_SETTINGS
            if setting.scope in (GLOBAL, COMMAND)}


def allow_module_flag(sub: argparse.ArgumentParser) -> None:
    """``--allow-module PREFIX``: whose ``module:function`` names a worker runs (see ``trusted``)."""
    setting = SETTING["allow_modules"]
    _setting_flag(sub, setting, action="append", default=None, metavar="PREFIX", type=typed("module"),
                  help=_help(setting, "repeatable", f"{setting.env} is a comma list"))


def sample_path_flag(sub: argparse.ArgumentParser) -> None:
    """``--sample-path PATH``: more filesystems whose space the host's sampler reports."""
    setting = SETTING["sample_paths"]
    _setting_flag(sub, setting, action="append", default=None, metavar="PATH", dest="sample_paths",
                  type=typed("path"), help=_help(setting, "repeatable", f"{setting.env} is a comma list"))


def metrics_token_flag(sub: argparse.ArgumentParser, name: str = "metrics_token") -> None:
    """``--token TOKEN``: the token ``rowfleet metrics`` (or, with ``panel_token``, the
    panel) requires."""
    setting = SETTING[name]
    _setting_flag(sub, setting, default=None, metavar="TOKEN", dest="token",
                  help=_help(setting, f"better: {setting.env}, which keeps it out of the process list"))


def with_sample_paths(config: Config, args: argparse.Namespace) -> Config:
    """``config`` with the ``--sample-path`` flags given, else the environment's."""
    return config.replace(sample_paths=tuple(args.sample_paths)) if args.sample_paths else config


def app_flag(sub: argparse.ArgumentParser, help_text: str) -> None:
    """``--app MODULE`` (repeatable): a module to import, named by the module rule."""
    sub.add_argument("--app", action="append", default=[], metavar="MODULE", type=typed("module"), help=help_text)


def asker(by: str | None) -> str:
    """Who asks, as a row records it: ``--by``'s name, else this user's ("" when none is known)."""
    if by:
        return by
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or the password database
        return ""


def trusted(config: Config, args: argparse.Namespace) -> Config:
    """``config`` with the prefixes this command trusts: ``--allow-module`` (else the
    environment's), joined by the ``--app`` modules."""
    explicit = args.allow_module if args.allow_module else config.allow_modules
    return config.replace(allow_modules=tasks.trusted_modules(explicit, args.app))


def project_named(args: argparse.Namespace) -> bool:
    """Whether ``--project`` or ``ROWFLEET_PROJECT`` named a project (``--project ''`` names
    the default one), rather than the setting being left at its default."""
    return getattr(args, "project", None) is not None or bool(os.environ.get(SETTING["project"].env))


def json_flag(flag: str, text: str) -> Any:
    """A flag's JSON value, with every guard of ``names.parse_json`` (depth, huge integers,
    NaN and Infinity): a refusal is one ``ConfigError`` line naming the flag."""
    try:
        return names.parse_json(flag, text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} is not valid JSON: {exc}") from None


def allow_host_flag(sub: Any) -> None:
    """``--allow-host NAME`` (repeatable): a host name the server answers to besides
    localhost and IP addresses (the ``allowed_hosts`` setting)."""
    _setting_flag(sub, ALLOWED_HOSTS, action="append", default=None, metavar="NAME", dest="allowed_hosts",
                  help=f"{ALLOWED_HOSTS.help} (repeatable; {ALLOWED_HOSTS.env} is a comma list; "
                       f"default {ALLOWED_HOSTS.default_text()})")


def with_allowed_hosts(config: Config, args: argparse.Namespace) -> Config:
    """``config`` with the ``--allow-host`` names given (checked), else the environment's."""
    return config.replace(allowed_hosts=tuple(args.allowed_hosts)) if args.allowed_hosts else config


def _lane(text: str) -> str:
    if text not in routing.LANES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(routing.LANES)}, got {names.shown(text)}")
    return text


# Each routing flag's reader and help: the flags of ``gpu_flags`` and the options of
# ``rowfleet up --queue Q:N:OPTIONS`` (``routing_options``) read their values alike.
ROUTING_READERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "models": (str, "the models this worker may load (default: every model the --app modules register)"),
    "vram_mb": (typed("vram mb"), "GPU memory to claim by, MiB (default: nvidia-smi's total)"),
    "gpu_index": (typed("gpu index"), "which GPU of the host (default 0)"),
    "lane": (_lane, "any (default), model (only jobs that need a model) or plain (only jobs that need none)"),
    "host_priority": (typed("host priority"), "negative: an overflow box, which takes the newest work first "
                                              "(default 0)"),
    "idle_unload": (positive_float, "unload the warm model after this long without a job (default: never)"),
}
_ROUTING_METAVARS = {"models": "A,B", "idle_unload": "SECONDS", "lane": "{" + ",".join(routing.LANES) + "}"}


def gpu_flags(sub: Parser) -> None:
    """A GPU worker's routing flags (``ROUTING_FLAGS``), read by ``gpu_settings_of``."""
    gpu = sub.add_argument_group("GPU workers (with --gpu: claims routed by model)")
    for name in ROUTING_FLAGS:
        read, help_text = ROUTING_READERS[name]
        gpu.add_argument("--" + name.replace("_", "-"), type=read, default=None, help=help_text,
                         metavar=_ROUTING_METAVARS.get(name))


def routing_options(text: str) -> argparse.Namespace:
    """A worker kind written as options, ``gpu,models=a+b,vram-mb=20000`` (``+`` between
    models, since ``,`` is between options): ``gpu`` and the routing flags, each read as its
    flag is, in the namespace ``gpu_settings_of`` reads; a refusal is a ``ConfigError``.
    ``gpu-index=0+1`` spreads the workers over those GPUs (``gpu_indexes``; the first is
    ``gpu_index``).

    >>> options = routing_options("gpu,models=llm+sd,lane=model")
    >>> options.gpu, options.models, options.lane, options.vram_mb, options.gpu_indexes
    (True, 'llm,sd', 'model', None, ())
    >>> routing_options("gpu,gpu-index=2+3").gpu_indexes
    (2, 3)
    >>> routing_options("gpu,vram=1")
    Traceback (most recent call last):
    rowfleet.errors.ConfigError: unknown option 'vram=1': give gpu, models=, vram-mb=, gpu-index=, lane=, host-priority=, idle-unload=
    >>> routing_options("gpu,gpu-index=x")
    Traceback (most recent call last):
    rowfleet.errors.ConfigError: gpu-index: invalid int value: 'x' (expected a whole number from 0 to 2147483647, in ASCII digits)
    """
    given: dict[str, Any] = {"gpu": False, **dict.fromkeys(ROUTING_FLAGS), "gpu_indexes": ()}
    known = ", ".join(["gpu", *(f"{name.replace('_', '-')}=" for name in ROUTING_FLAGS)])
    for option in text.split(","):
        key, equals, value = option.partition("=")
        name = key.strip().replace("-", "_")
        if name == "gpu" and not equals:
            given["gpu"] = True
        elif name in ROUTING_READERS and equals:
            read = ROUTING_READERS[name][0]
            try:
                if name == "gpu_index":
                    given["gpu_indexes"] = tuple(dict.fromkeys(read(part) for part in value.split("+")))
                    given[name] = given["gpu_indexes"][0]
                else:
                    given[name] = read(value.replace("+", ",") if name == "models" else value)
            except argparse.ArgumentTypeError as exc:
                raise ConfigError(f"{key.strip()}: {exc}") from None
        else:
            raise ConfigError(f"unknown option {names.shown(option)}: give {known}")
    return argparse.Namespace(**given)


def gpu_settings_of(args: argparse.Namespace) -> GpuSettings | None:
    """A GPU worker's settings: ``--gpu`` and at least one model to load (``--models``, else
    those the ``--app`` modules register); None for a worker that routes nothing (it claims
    as before). A routing flag without them is a usage error."""
    given = [f"--{name.replace('_', '-')}" for name in ROUTING_FLAGS if getattr(args, name) is not None]
    if not args.gpu:
        if given:
            raise ConfigError(f"{', '.join(given)} {_need(given)} --gpu: they route a GPU worker's claims")
        return None
    from rowfleet.gpu.gpu_worker import GpuSettings, model_list  # here: a worker without --gpu never needs it

    chosen = model_list(args.models, [model.id for model in models.registered_models()])
    if not chosen:
        if given:
            raise ConfigError(f"{', '.join(given)} {_need(given)} models to load: register them with @rowfleet.model "
                              f"in an --app module")
        return None
    return GpuSettings(chosen, gpu_index=args.gpu_index or 0, vram_mb=args.vram_mb, lane=args.lane or routing.ANY,
                       host_priority=args.host_priority or 0, idle_unload=args.idle_unload)


def _need(flags: list[str]) -> str:
    return "needs" if len(flags) == 1 else "need"


def vetted_schedules(files: list[str], apps: list[str], allow_modules: tuple[str, ...],
                     name: str | None = None) -> list[Schedule]:
    """The schedules of the ``--schedule`` files and the ``--app`` modules (``schedules_of``),
    or only the one called ``name`` (``ConfigError`` when none is), each task vetted by
    ``vet_schedules``: refused with ``--app``, else warned of once, here at the start (not at
    every tick)."""
    from rowfleet.schedule import named, schedules_of, vet_schedules  # here: only the scheduler's commands read it

    schedules = schedules_of(files, apps)
    if name is not None:
        if not schedules:
            raise ConfigError(f"no schedule is named {name!r}: give the --schedule FILE or the --app MODULE "
                              f"that declares it")
        schedules = [named(schedules, name)]
    for warning in vet_schedules(schedules, allow_modules, strict=bool(apps)):
        warn(warning)
    return schedules
