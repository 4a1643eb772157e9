"""Task registration and lookup: ``@rowfleet.task`` and ``module:function`` names, and
the named workflows that ``rowfleet.workflow`` registers.

A worker runs a job by looking its task name up here: first among the tasks registered
by the modules it imported (``--app``), then, for a ``module:function`` name, by importing
that module (from the current folder first, as ``python -m`` does).

Imports nothing of rowfleet's but ``errors``: enqueueing lives in the package API.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
from typing import Any, Callable

from rowfleet.errors import ConfigError, UnknownTask

_registry: dict[str, "Task"] = {}
_workflows: dict[str, Any] = {}  # name -> rowfleet.dag.Workflow
_lock = threading.Lock()


class Task:
    """A registered handler. Calling it runs the function directly, in this process."""

    def __init__(self, fn: Callable[..., Any], name: str, queue: str, timeout: float | None = None) -> None:
        self.fn = fn
        self.name = name
        self.queue = queue
        self.timeout = timeout  # wall-clock budget of its jobs, unless a job sets its own
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def enqueue(self, args: Any = None, **options: Any) -> Any:
        """Enqueue a job of this task; options as for ``rowfleet.enqueue``."""
        from rowfleet import api  # the API needs a store; registration must not

        options.setdefault("queue", self.queue)
        return api.enqueue(self.name, args, **options)

    def __repr__(self) -> str:
        return f"<rowfleet task {self.name!r} on queue {self.queue!r}>"


def task(fn: Callable[..., Any] | None = None, *, name: str | None = None, queue: str = "default",
         timeout: float | None = None) -> Any:
    """Register a handler. Usable bare (``@task``) or with options (``@task(queue="gpu")``).

    The default name is ``module:qualname``, which any worker can also import by name.
    ``timeout`` is the wall-clock budget (seconds) of its jobs, unless a job sets its own.
    """
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ConfigError(f"a task's timeout must be a positive number of seconds, got {timeout!r}")

    def register(function: Callable[..., Any]) -> Task:
        task_name = name or f"{function.__module__}:{function.__qualname__}"
        if not task_name or any(c.isspace() for c in task_name):
            raise ConfigError(f"task name must be a non-empty word without spaces, got {task_name!r}")
        registered = Task(function, task_name, queue, timeout)
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
    """Import the user's modules so their ``@task``s register; the folder comes first on sys.path."""
    _put_first_on_path(folder or os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"cannot import app module {module!r}: {exc}") from None


def resolve(name: str) -> Callable[..., Any]:
    """The callable behind a task name, or ``UnknownTask``."""
    with _lock:
        registered = _registry.get(name)
    if registered is not None:
        return registered.fn
    module_name, sep, attribute = name.partition(":")
    if not sep or not module_name or not attribute:
        raise UnknownTask(f"unknown task {name!r}: register it with @rowfleet.task in a module "
                          f"given to --app, or name it as module:function")
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
    return target


def timeout_of(name: str) -> float | None:
    """The timeout its ``@task`` registration gave a task name, if any (never imports)."""
    with _lock:
        registered = _registry.get(name)
    return registered.timeout if registered is not None else None


def queue_of(name: str) -> str | None:
    """The queue its ``@task`` registration gave a task name, if it is registered (never imports)."""
    with _lock:
        registered = _registry.get(name)
    return registered.queue if registered is not None else None


def _put_first_on_path(folder: str) -> None:
    folder = os.path.abspath(folder)
    if folder in sys.path:
        sys.path.remove(folder)
    sys.path.insert(0, folder)
