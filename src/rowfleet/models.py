"""Warm models: the loaders a process registers, and the one model a worker process holds.

``register(model_id, loader, vram_mb=None, unload=None)`` (``@rowfleet.model(...)``)
records how to load a model. The id is the identity of everything that changes what gets
loaded: the weights, their revision, the quantisation, the context length. Two ids never
share a resident copy, so ``"llama3-8b:q4"`` and ``"llama3-8b:q8"`` are two models, and a
change to what a loader builds needs a new id. An id is a name (``names.check_name``):
any word without whitespace, such as ``"llama3-8b:q4"`` or ``"org/model@rev"``.

``Resident`` is the one model a process holds: ``get(model_id)`` loads it once and hands
the same object to every later ``get`` of that id; asking for another id unloads the held
one first. A worker process runs one job at a time, so one model at a time is what it
needs, and a GPU seldom has room for two. ``current()`` is the process's ``Resident``.
The registered ``vram_mb`` is what a job of the model needs; it is stamped into the job
when the job is written (``tasks.stamp``), so nothing that claims or runs a job reads
this registry for it.

Imports nothing of rowfleet's but ``errors`` and the pure ``names``: the GPU memory reader
is handed in (``memory_used_mb``), so that measuring needs no import of telemetry here.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import threading
import time
from typing import Any, Callable, NamedTuple

from rowfleet import names
from rowfleet.errors import ModelLoadFailed, UnknownModel


@dataclasses.dataclass(frozen=True)
class Model:
    """A registered model: its id, how to load it, the GPU memory (MiB) its jobs need (None:
    not said), and how to release it (None: dropping the reference is enough)."""

    id: str
    loader: Callable[[], Any]
    vram_mb: int | None = None
    unload: Callable[[Any], Any] | None = None


_registry: dict[str, Model] = {}
_lock = threading.Lock()


def check(model_id: Any, vram_mb: Any = None) -> tuple[str, int | None]:
    """A model id and the memory its jobs need, as every entry point checks them: the id a
    name, the memory a positive whole number of MiB (what a job's ``vram_mb`` may hold).

    >>> check("llama3-8b:q4", 17000), check("org/model@rev")
    (('llama3-8b:q4', 17000), ('org/model@rev', None))
    >>> check("two words")
    Traceback (most recent call last):
    rowfleet.names.InvalidValue: model must be a non-empty word, got 'two words'
    """
    names.check_name("model", model_id)
    if vram_mb is not None:
        names.check_int("vram_mb", vram_mb, least=1, most=names.INT32_MAX)
    return model_id, vram_mb


def register(model_id: str, loader: Callable[[], Any], vram_mb: int | None = None,
             unload: Callable[[Any], Any] | None = None) -> Model:
    """Register how to load ``model_id``: ``loader()`` returns the model object, ``unload(obj)``
    (optional) releases what dropping the reference would not (a GPU cache, a server).
    Registering an id again replaces its loader, as re-registering a task does."""
    check(model_id, vram_mb)
    for what, function in (("loader", loader), ("unload", unload)):
        if function is not None and not callable(function):
            raise names.InvalidValue(f"a model's {what}", "callable", function)
    model = Model(model_id, loader, vram_mb, unload)
    with _lock:
        _registry[model_id] = model
    return model


def registered(model_id: str) -> Model | None:
    """The registration of ``model_id`` in this process, or None."""
    with _lock:
        return _registry.get(model_id)


def registered_models() -> tuple[Model, ...]:
    """Every model this process registered, by id."""
    with _lock:
        return tuple(_registry[model_id] for model_id in sorted(_registry))


class Held(NamedTuple):
    """The model a ``Resident`` holds: its id, since when (wall clock), how long its load
    took (seconds), and the GPU memory it took (MiB; None when not measured)."""

    model_id: str
    since: float
    load_seconds: float
    footprint_mb: int | None


class Resident:
    """The one model a process holds (see the module docstring). Thread-safe: one lock
    orders loads and unloads, so two threads asking for the same model load it once.

    ``clock`` (monotonic) times loads and ``wall`` dates them; ``memory_used_mb()`` reads
    the GPU memory in use (MiB, or None when unknown), before and after a load, and the
    difference is the model's footprint. ``held()`` and ``loading`` never wait on the lock,
    so a heartbeat can show a load while it runs.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 memory_used_mb: Callable[[], int | None] | None = None) -> None:
        self._clock = clock
        self._wall = wall
        self._memory_used_mb = memory_used_mb
        self._lock = threading.Lock()
        self._model: Model | None = None  # the registration of the held one
        self._object: Any = None
        self._held: Held | None = None  # replaced whole, so a reader without the lock sees one state
        self.loading: str | None = None  # the id being loaded, while a load runs

    def get(self, model_id: str) -> Any:
        """The object of ``model_id``, loaded now if this process does not hold it (after
        unloading the one it holds). ``UnknownModel`` for an id no module registered;
        ``ModelLoadFailed`` (the loader's exception as its cause) when the load raised,
        and then nothing is held (nor when the held one's ``unload`` raised: that
        exception propagates as it is, a bug of the unload's)."""
        with self._lock:
            if self._held is not None and self._held.model_id == model_id:
                return self._object
            model = registered(model_id)
            if model is None:
                raise UnknownModel(f"unknown model {model_id!r}: register it with @rowfleet.model({model_id!r}) "
                                   f"in a module the worker imports (--app)")
            self._release()
            return self._load(model)

    def held(self) -> Held | None:
        """What this process holds now, or None."""
        return self._held

    def unload(self) -> None:
        """Release the held model, if any (its ``unload``, then the reference)."""
        with self._lock:
            self._release()

    def _load(self, model: Model) -> Any:
        self.loading = model.id
        try:
            before = self._measure()
            started = self._clock()
            try:
                loaded = model.loader()
            except Exception as exc:
                raise ModelLoadFailed(model.id, f"{type(exc).__name__}: {exc}") from exc
            seconds = self._clock() - started
            footprint = _footprint(before, self._measure())
            self._model, self._object = model, loaded
            self._held = Held(model.id, self._wall(), seconds, footprint)
            return loaded
        finally:
            self.loading = None

    def _release(self) -> None:
        """Unload the held model (caller holds the lock). The reference is dropped even when
        its ``unload`` raises, so a failed unload never leaves a model half held."""
        model, loaded = self._model, self._object
        if model is None:
            return
        self._held, self._model, self._object = None, None, None
        try:
            if model.unload is not None:
                model.unload(loaded)
        finally:
            del loaded
            gc.collect()  # a model's memory is freed when its last cycle is, not at some later pass

    def _measure(self) -> int | None:
        return None if self._memory_used_mb is None else self._memory_used_mb()


def _footprint(before: int | None, after: int | None) -> int | None:
    """MiB a load took: used after minus used before; None when either is unknown, and 0
    when another process freed more than the load took meanwhile.

    >>> _footprint(1000, 18000), _footprint(None, 18000), _footprint(5000, 4000)
    (17000, None, 0)
    """
    if before is None or after is None:
        return None
    return max(0, int(after) - int(before))


_resident: tuple[int, Resident] | None = None
_resident_lock = threading.Lock()


def current() -> Resident:
    """This process's ``Resident`` (a fresh one in a forked child: what the parent loaded is
    the parent's)."""
    global _resident
    with _resident_lock:
        if _resident is None or _resident[0] != os.getpid():
            _resident = (os.getpid(), Resident())
        return _resident[1]


def install(resident: Resident) -> Resident:
    """Make ``resident`` this process's (a worker installs one that measures GPU memory
    before its first job); returns it. The one it replaces unloads its model first."""
    global _resident
    with _resident_lock:
        previous = _resident
        _resident = (os.getpid(), resident)
    if previous is not None and previous[0] == os.getpid() and previous[1] is not resident:
        previous[1].unload()
    return resident
