"""Task registration and lookup: ``@rowfleet.task`` and ``module:function`` names, and
the named workflows that ``rowfleet.workflow`` registers.

A job's task name is data anyone who can write a row may choose, so a worker runs only
code it was told to trust: the tasks registered by the modules it imported (``--app``),
and, for a ``module:function`` name, a function of a module under one of its allowed
prefixes (``--allow-module``, which the ``--app`` modules join). Any other name is
refused before anything is imported. Allowed modules are imported from the current
folder first, as ``python -m`` does.

What a job needs of its task's registration (its queue, its timeout, its model) and of its
model's (the GPU memory it needs) is stamped into the job when it is written (``stamp``);
nothing that claims or runs a job reads a registry for it, so a job runs alike in a worker
that never imported its task's module.

Imports nothing of rowfleet's but ``errors``, the pure ``names`` and the model registry
(``models``): enqueueing lives in the package API.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import sys
import threading
from typing import Any, Callable, Iterable

from rowfleet import models, names
from rowfleet.errors import ConfigError, TaskRefused, UnknownTask

_registry: dict[str, "Task"] = {}
_workflows: dict[str, Any] = {}  # name -> rowfleet.dag.Workflow
_lock = threading.Lock()


class Task:
    """A registered handler. Calling it runs the function directly, in this process."""

    def __init__(self, fn: Callable[..., Any], name: str, queue: str, timeout: float | None = None,
                 model: str | None = None, gpus: int | None = None) -> None:
        self.fn = fn
        self.name = name
        self.queue = queue
        self.timeout = timeout  # wall-clock budget of its jobs, unless a job sets its own
        self.model = model  # the model its jobs need warm (``rowfleet.model()``), unless a job names its own
        self.gpus = gpus  # GPUs of one host its jobs need, unless a job asks for its own number
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<rowfleet task {self.name!r} on queue {self.queue!r}>"


def task(fn: Callable[..., Any] | None = None, *, name: str | None = None, queue: str = "default",
         timeout: float | None = None, model: str | None = None, gpus: int | None = None,
         kind: type[Task] = Task) -> Any:
    """Register a handler. Usable bare (``@task``) or with options (``@task(queue="gpu")``).

    The default name is ``module:qualname``, which any worker can also import by name.
    ``timeout`` is the wall-clock budget (seconds) of its jobs, unless a job sets its own;
    ``model`` the model id its jobs need (see ``rowfleet.models``), unless a job names its own;
    ``gpus`` the GPUs of one host its jobs need (each with their ``vram_mb``), unless a job
    asks for its own number.
    ``kind`` is the class of what is registered: the public API's adds ``.enqueue``, so that
    registering a task never needs a store (nor imports the layer that opens one).
    """
    names.check_name("a task's queue", queue)  # a queue of "*" could never be served
    if timeout is not None:
        timeout = names.check_seconds("a task's timeout", timeout)
    if model is not None:
        names.check_name("a task's model", model)
    if gpus is not None:
        names.RULES["gpus"].check("a task's gpus", gpus)

    def register(function: Callable[..., Any]) -> Task:
        task_name = name or f"{function.__module__}:{function.__qualname__}"
        names.check_name("task name", task_name)
        registered = kind(function, task_name, queue, timeout, model, gpus)
        with _lock:
            _registry[task_name] = registered
        return registered

    return register(fn) if fn is not None else register


def register_workflow(flow: Any) -> None:
    """Make a workflow startable by name (``rowfleet run NAME --app MODULE``)."""
    with _lock:
        _workflows[flow.name] = flow


def workflow_named(name: str) -> Any | None:
    with _lock:
        return _workflows.get(name)


def import_apps(modules: list[str], folder: str | None = None) -> None:
    """Import the user's modules so their ``@task``s register; the folder comes first on
    sys.path. Each is a module name by its rule, checked before any is imported.

    >>> import_apps([""])
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: --app must be a module name (identifiers joined by dots, such as app or pkg.tasks), got ''
    """
    for module in modules:
        names.RULES["module"].check("--app", module)
    _put_first_on_path(folder or os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"cannot import app module {module!r}: {exc}") from None


def allowed(name: str, prefixes: Iterable[str]) -> bool:
    """Whether a ``module:function`` name lies in a module under one of ``prefixes``: the
    module itself or a submodule (``pkg`` admits ``pkg`` and ``pkg.sub``, not ``pkgx``).

    >>> allowed("pkg:f", ["pkg"]), allowed("pkg.sub:f", ["pkg"]), allowed("pkgx:f", ["pkg"])
    (True, True, False)
    >>> allowed("os:system", ["pkg"]), allowed("pkg", ["pkg"]), allowed("..pkg:f", ["pkg"])
    (False, False, False)
    """
    module, sep, attribute = name.partition(":")
    if not sep or not attribute or not all(part.isidentifier() for part in module.split(".")):
        return False
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def trusted_modules(allow_modules: Iterable[str], apps: Iterable[str]) -> tuple[str, ...]:
    """The prefixes a worker admits: the explicit ones, then the ``--app`` modules.

    >>> trusted_modules(["lib"], ["app", "lib"])
    ('lib', 'app')
    """
    return tuple(dict.fromkeys([*allow_modules, *apps]))


def refusal(name: str, allow_modules: Iterable[str]) -> str | None:
    """Why a worker with these allowed prefixes (and this process's registry) would refuse
    ``name``, or None when it would take it. Imports nothing."""
    if registered(name) or allowed(name, allow_modules):
        return None
    module, sep, _ = name.partition(":")
    if not sep:
        return (f"task {name!r} is not registered by an --app module: a worker runs it only if one "
                f"of its --app modules registers it")
    return (f"task {name!r} is not trusted: a worker runs only what its --app modules register and "
            f"functions of modules under its --allow-module prefixes, and module {module!r} is neither")


def registered(name: str) -> bool:
    with _lock:
        return name in _registry


def resolve(name: str, allow_modules: Iterable[str] | None = None) -> Callable[..., Any]:
    """The callable behind a task name: ``UnknownTask``, or ``TaskRefused`` before any import.

    A worker passes its allowed prefixes, so a row can name only code it trusts; None
    admits every module, for an application checking its own workflow in its own process.
    """
    with _lock:
        found = _registry.get(name)
    if found is not None:
        return found.fn
    module_name, sep, attribute = name.partition(":")
    if not sep or not module_name or not attribute:
        raise UnknownTask(f"unknown task {name!r}: register it with @rowfleet.task in a module "
                          f"given to --app, or name it as module:function")
    prefixes = None if allow_modules is None else tuple(allow_modules)
    if prefixes is not None and not allowed(name, prefixes):
        raise TaskRefused(f"refused, nothing imported: {refusal(name, prefixes)}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise UnknownTask(f"unknown task {name!r}: {exc}") from None
    if isinstance(target, Task):
        return target.fn
    if not callable(target):
        raise UnknownTask(f"task {name!r} names {type(target).__name__}, not a function")
    home = getattr(target, "__module__", None) or ""
    if prefixes is not None and not allowed(f"{home}:{attribute}", prefixes):
        # An allowed module's imports are reachable by attribute (``app:os.system``).
        raise TaskRefused(f"refused: task {name!r} is a function of {home or 'the builtins'!r}, which is not "
                          f"under an --allow-module prefix")
    return target


def vet(name: str, allow_modules: Iterable[str], *, strict: bool) -> str | None:
    """Check a task name where a job is written: None when a worker with these prefixes
    would run it, else a warning for the writer. With ``strict`` (the writer loaded the
    apps, so this process knows what a worker would) the name is resolved instead, and a
    refused or unknown one raises (``UnknownTask``)."""
    if strict:
        resolve(name, allow_modules)
        return None
    return refusal(name, allow_modules)


@dataclasses.dataclass(frozen=True)
class Stamp:
    """What a job takes from its task's registration when it is written: the engine then
    reads the job's row alone, whichever process runs it and whatever that process imported."""

    task: str
    queue: str
    timeout: float | None
    model: str | None = None
    vram_mb: int | None = None
    gpus: int | None = None


def stamp(task: Any, queue: str | None = None, timeout: float | None = None, model: str | None = None,
          vram_mb: int | None = None, gpus: int | None = None) -> Stamp:
    """The task name, queue, timeout, model, GPU memory and GPUs to write into a job of
    ``task`` (a ``Task``, or a name looked up in this process's registry, never imported):
    the writer's own, else the task's (the memory: the model's registered ``vram_mb``), else
    ``"default"`` and None (the worker's budget; no model; memory unknown; no GPU asked for).

    >>> stamp("nowhere:f"), stamp("nowhere:f", "io", 5.0).timeout
    (Stamp(task='nowhere:f', queue='default', timeout=None, model=None, vram_mb=None, gpus=None), 5.0)
    >>> logged = Task(print, "app:log", "io", 30.0)
    >>> stamp(logged).timeout, stamp(logged, timeout=2.0).timeout
    (30.0, 2.0)
    >>> stamp(Task(print, "app:chat", "gpu", model="m:q4")).model, stamp("nowhere:f", model="m", vram_mb=9).vram_mb
    ('m:q4', 9)
    """
    registered = task if isinstance(task, Task) else _registration(task)
    name = task.name if isinstance(task, Task) else task  # a name that is no name: JobSpec says so
    if queue is None:
        queue = registered.queue if registered is not None else "default"
    if timeout is None and registered is not None:
        timeout = registered.timeout
    if model is None and registered is not None:
        model = registered.model
    if vram_mb is None and model is not None:
        vram_mb = _vram_of(model)
    if gpus is None and registered is not None:
        gpus = registered.gpus
    return Stamp(name, queue, timeout, model, vram_mb, gpus)


def _vram_of(model_id: Any) -> int | None:
    """The GPU memory a registered model says its jobs need, or None (unregistered, unsaid)."""
    found = models.registered(model_id) if isinstance(model_id, str) else None
    return None if found is None else found.vram_mb


def _registration(name: Any) -> Task | None:
    if not isinstance(name, str):
        return None
    with _lock:
        return _registry.get(name)


def _put_first_on_path(folder: str) -> None:
    folder = os.path.abspath(folder)
    if folder in sys.path:
        sys.path.remove(folder)
    sys.path.insert(0, folder)
