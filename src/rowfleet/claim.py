"""What a worker asks the store for when it takes a job: one ``Claim`` value.

The worker builds a ``Claim`` once and hands it to ``Store.has_due``, ``Store.claim`` and
``Store.finish`` (to claim the next job in the same write). Inputs that decide which job a
worker may take belong here as named fields, so every store call sees the same ones: the
project and queue, the holder and its lease, and a GPU worker's routing inputs.

Which jobs a claim may take (a job's model is its ``required_model``; a plain job has none):
- ``models``: the models the worker can load. None: no gate (a plain worker, as before),
  and then no other routing input either; a tuple: only plain jobs and jobs of these models.
- ``lane``: ``any``; ``model``: only jobs that need a model; ``plain``: only plain jobs.
- ``vram_free_mb``: a job needing more GPU memory is not taken (a job that names none fits).
- ``only_warm``: the churn floor: only plain jobs, jobs of ``warm_model`` and of ``starved``.
- ``gpu_locked_to``: another live holder leases the GPU for this model, so only its jobs
  (and plain ones) may run here; None: the GPU is free, or leased to the worker's own model.
- ``gpus_free``: how many of its host's GPUs the worker could hold now: a job that asks for
  GPUs (``gpus``) is taken only when it asks for no more. None: a worker of no GPU, which
  takes only jobs that ask for none. Needs no gate (a ``--gpu`` worker without models has one).

In which order (``ORDER_TERMS``): run-next first, then jobs of a ``starved`` model (its
waiting work is past its starvation bound), then jobs of ``warm_model`` (no load to pay),
then by ``rank`` (the cold pick: earlier models first; plain jobs and unranked models
after), then priority, then due order: the oldest ``run_at`` first, or the newest with
``newest_first`` (an overflow box). Run-next beats warmth; a starved model beats both
warmth and rank. The affinity terms need ``models``: a claim without a gate walks one
index in today's order, so a plain worker's claim costs what it did.

The store runs a plain worker's claim (``routed`` False) as the cheapest statement there
is, and any other as its ``[routed]`` variant (``[newest]`` newest first), tried first as
``[warm]`` when ``warm_first``: the warm model's best job is the pick whenever no run-next
job is due, which one probe finds. That one takes the claim's gate as
``gate()``: the models it may take now, each with its place in the order of the middle
terms (starved, warm, rank) as one number, ``preference``, and plain jobs' place as
``plain_preference()``; so the rule lives here, once, and the SQL only sorts by it.

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
    gpus_free: int | None = dataclasses.field(default=None, kw_only=True)
    # Limit rows hold the queue (rowfleet.flow): the store reads and applies them in the claim.
    limited: bool = dataclasses.field(default=False, kw_only=True)

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
        for name in ("vram_free_mb", "gpus_free"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"a claim's {name} must be an integer or None, got {value!r}")
        if self.models is None:
            for name in ("warm_model", "starved", "rank", "only_warm", "gpu_locked_to", "vram_free_mb",
                         "newest_first"):
                if getattr(self, name) not in (None, False, ()):
                    raise ValueError(f"a claim's {name} needs models, the models its worker can load")
            if self.lane != "any":
                raise ValueError("a claim's lane needs models, the models its worker can load")

    @property
    def host(self) -> str:
        """The host part of ``holder`` ("host:pid"), which the claimed job keeps.

        >>> Claim("", "q", "gpu-box-1:4242", 1.0).host, Claim("", "q", "alone", 1.0).host
        ('gpu-box-1', 'alone')
        """
        host, _, pid = self.holder.rpartition(":")
        return host if host and pid else self.holder

    @property
    def routed(self) -> bool:
        """Whether routing inputs narrow or order this claim (they all need a gate), else it
        is a plain claim.

        >>> Claim("", "q", "h", 1.0).routed, Claim("", "q", "h", 1.0, models=()).routed
        (False, True)
        """
        return self.models is not None

    def warm_first(self) -> bool:
        """Whether the warm model's jobs come first but for run-next jobs: it is warm, the
        gate allows it, and no starved model outranks it.

        >>> Claim("", "gpu", "h", 1.0, models=("a", "b"), warm_model="a").warm_first()
        True
        >>> Claim("", "gpu", "h", 1.0, models=("a", "b"), warm_model="a", starved=("b",)).warm_first()
        False
        >>> Claim("", "gpu", "h", 1.0, models=("a", "b"), warm_model="a", gpu_locked_to="b").warm_first()
        False
        """
        gate = self.gate()
        return self.warm_model is not None and not self.starved and gate is not None and self.warm_model in gate

    def gate(self) -> dict[str, int] | None:
        """The models this claim may take now, each with its ``preference``: the gate less
        what the lane, the churn floor (``only_warm``) and another model's GPU lease
        exclude. None: no gate.

        >>> Claim("", "gpu", "h", 1.0, models=("a", "b", "c"), warm_model="b", rank=("c", "a")).gate()
        {'a': 10, 'b': 8, 'c': 9}
        >>> Claim("", "gpu", "h", 1.0, models=("a", "b"), warm_model="b", only_warm=True).gate()
        {'b': 2}
        >>> Claim("", "gpu", "h", 1.0, models=("a", "b"), gpu_locked_to="a").gate(), Claim("", "q", "h", 1.0).gate()
        ({'a': 3}, None)
        """
        if self.models is None:
            return None
        if self.lane == "plain":
            return {}
        allowed = (model for model in self.models
                   if (not self.only_warm or model == self.warm_model or model in self.starved)
                   and (self.gpu_locked_to is None or model == self.gpu_locked_to))
        return {model: self.preference(model) for model in allowed}

    def plain_preference(self) -> int | None:
        """Plain jobs' ``preference`` (tied with an unranked cold model's), or None when the
        lane takes model jobs only.

        >>> Claim("", "gpu", "h", 1.0, models=("a",), rank=("a",)).plain_preference()
        7
        """
        return None if self.lane == "model" else self.preference(None)

    def preference(self, model: str | None) -> int:
        """Where jobs of ``model`` (None: plain jobs) stand in the order's middle terms, as
        one number, lower first: a starved model, then the warm one, then by ``rank`` (plain
        jobs and unranked models last, tied). Equal numbers fall through to priority.

        >>> c = Claim("", "gpu", "h", 1.0, models=("a", "b", "c"), warm_model="a", starved=("c",), rank=("b",))
        >>> [c.preference(m) for m in ("c", "a", "b", None)]
        [3, 5, 6, 7]
        """
        place = len(self.rank) + 1
        starved = model is not None and model in self.starved
        warm = model is not None and model == self.warm_model
        ranked = self.rank.index(model) if model is not None and model in self.rank else len(self.rank)
        return ((0 if starved else 2) + (0 if warm else 1)) * place + ranked

    def __repr__(self) -> str:  # the fields a plain claim sets, then any routing input given
        shown = [f"{field.name}={getattr(self, field.name)!r}" for field in dataclasses.fields(self)
                 if not field.kw_only or getattr(self, field.name) != field.default]
        return f"Claim({', '.join(shown)})"
