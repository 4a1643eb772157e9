"""What a worker asks the store for when it takes a job: one ``Claim`` value.

The worker builds a ``Claim`` once and hands it to ``Store.has_due``, ``Store.claim`` and
``Store.finish`` (to claim the next job in the same write). Inputs that decide which job a
worker may take belong here as named fields, so every store call sees the same ones: the
project and queue, the holder and its lease, and a GPU worker's routing inputs.

Which jobs a claim may take (a job's model is its ``required_model``; a plain job has none):
- ``models``: the models the worker can load. None: no gate (a plain worker, as before);
  a tuple: only plain jobs and jobs of these models.
- ``lane``: ``any``; ``model``: only jobs that need a model; ``plain``: only plain jobs.
- ``vram_free_mb``: a job needing more GPU memory is not taken (a job that names none fits).
- ``only_warm``: the churn floor: only plain jobs, jobs of ``warm_model`` and of ``starved``.
- ``gpu_locked_to``: another live holder leases the GPU for this model, so only its jobs
  (and plain ones) may run here; None: the GPU is free, or leased to the worker's own model.

In which order (``ORDER_TERMS``): run-next first, then jobs of a ``starved`` model (its
waiting work is past its starvation bound), then jobs of ``warm_model`` (no load to pay),
then by ``rank`` (the cold pick: earlier models first; plain jobs and unranked models
after), then priority, then due order: the oldest ``run_at`` first, or the newest with
``newest_first`` (an overflow box). Run-next beats warmth; a starved model beats both
warmth and rank. The affinity terms need ``models``: a claim without a gate walks one
index in today's order, so a plain worker's claim costs what it did.

Pure: imports nothing of rowfleet's, and no driver.
"""

from __future__ import annotations

import dataclasses

LANES = ("any", "model", "plain")
ORDER_TERMS = ("run_next", "starved", "warm_model", "rank", "priority", "due")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One worker's request for the next due job of its (project, queue).

    >>> Claim("", "default", "box:7", 600.0)
    Claim(project='', queue='default', holder='box:7', lease=600.0)
    >>> Claim("", "gpu", "box:7", 600.0, models=("llm", "vision"), warm_model="llm").lane
    'any'
    >>> Claim("", "gpu", "box:7", 600.0, warm_model="llm")
    Traceback (most recent call last):
    ...
    ValueError: a claim's warm_model needs models, the models its worker can load
    """

    project: str
    queue: str
    holder: str  # "host:pid", written to the job as claimed_by
    lease: float  # seconds the job is held before it may be reclaimed, unless renewed
    models: tuple[str, ...] | None = dataclasses.field(default=None, kw_only=True)
    lane: str = dataclasses.field(default="any", kw_only=True)
    warm_model: str | None = dataclasses.field(default=None, kw_only=True)
    starved: tuple[str, ...] = dataclasses.field(default=(), kw_only=True)
    rank: tuple[str, ...] = dataclasses.field(default=(), kw_only=True)
    only_warm: bool = dataclasses.field(default=False, kw_only=True)
    vram_free_mb: int | None = dataclasses.field(default=None, kw_only=True)
    newest_first: bool = dataclasses.field(default=False, kw_only=True)
    gpu_locked_to: str | None = dataclasses.field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.lane not in LANES:
            raise ValueError(f"a claim's lane is one of {', '.join(LANES)}, got {self.lane!r}")
        for name in ("models", "starved", "rank"):
            value = getattr(self, name)
            if value is None and name == "models":
                continue
            if not isinstance(value, tuple) or not all(isinstance(item, str) for item in value):
                raise TypeError(f"a claim's {name} must be a tuple of model names, got {value!r}")
        for name in ("warm_model", "gpu_locked_to"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise TypeError(f"a claim's {name} must be a model name or None, got {getattr(self, name)!r}")
        if self.vram_free_mb is not None and (isinstance(self.vram_free_mb, bool)
                                              or not isinstance(self.vram_free_mb, int)):
            raise TypeError(f"a claim's vram_free_mb must be an integer or None, got {self.vram_free_mb!r}")
        if self.models is None:
            for name in ("warm_model", "starved", "rank", "only_warm", "gpu_locked_to"):
                if getattr(self, name):
                    raise ValueError(f"a claim's {name} needs models, the models its worker can load")

    def __repr__(self) -> str:  # the fields a plain claim sets, then any routing input given
        shown = [f"{field.name}={getattr(self, field.name)!r}" for field in dataclasses.fields(self)
                 if not field.kw_only or getattr(self, field.name) != field.default]
        return f"Claim({', '.join(shown)})"
