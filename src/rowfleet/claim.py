"""What a worker asks the store for when it takes a job: one ``Claim`` value.

The worker builds a ``Claim`` once and hands it to ``Store.has_due``, ``Store.claim`` and
``Store.finish`` (to claim the next job in the same write). Inputs that decide which job a
worker may take belong here as named fields, so every store call sees the same ones: today
the project and queue, the holder and its lease; later the routing inputs of a fleet (a
model already warm on the worker, the GPU memory it has free).

Pure: imports nothing of rowfleet's, and no driver.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Claim:
    """One worker's request for the next due job of its (project, queue).

    >>> Claim("", "default", "box:7", 600.0)
    Claim(project='', queue='default', holder='box:7', lease=600.0)
    """

    project: str
    queue: str
    holder: str  # "host:pid", written to the job as claimed_by
    lease: float  # seconds the job is held before it may be reclaimed, unless renewed
