"""A job's gang of GPUs: a job that asks for ``gpus=N`` runs on N GPUs of one host, its
worker's own and N-1 others that are free now, each held through the same per-GPU lease
(``gpu_leases``) that keeps one model per GPU.

The other GPUs are lent to the job under a lease whose model is ``lent_to(job_id)``, a text
no model id can be (model ids hold no spaces), so that no worker shares them: a worker of a
lent GPU finds it leased to another "model" and claims nothing until the lease is let go
(``is_lent``). A GPU is free for a gang when nvidia-smi lists it, no switch holds it off,
no live lease of another holder holds it, and its free memory fits the job's ``vram_mb``
(unknown memory fits, as for a one-GPU claim). ``CUDA_VISIBLE_DEVICES`` names the gang,
the worker's own GPU first, for the handler and what it starts.

Pure: the worker (``rowfleet.gpu.gpu_worker``) reads the leases, switches and memory and
takes the leases; this module decides.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Sequence

LENT_PREFIX = "gpus of job "  # a space: no model id starts so (names.check_name refuses whitespace)


def lent_to(job_id: int) -> str:
    """The lease model of a GPU lent to job ``job_id``'s gang.

    >>> lent_to(42), is_lent(lent_to(42)), is_lent("llama3-8b:q4"), is_lent(None)
    ('gpus of job 42', True, False, False)
    """
    return f"{LENT_PREFIX}{job_id}"


def is_lent(model: str | None) -> bool:
    return isinstance(model, str) and model.startswith(LENT_PREFIX)


@dataclasses.dataclass(frozen=True)
class HostGpu:
    """One GPU of the host as a gang sees it: its index, free memory (MiB; None: unknown),
    whether a switch holds it off, and whether a live lease of another holder holds it."""

    index: int
    free_mb: int | None = None
    off: bool = False
    leased: bool = False

    def fits(self, vram_mb: int | None) -> bool:
        """Free for a gang whose GPUs each need ``vram_mb``.

        >>> HostGpu(1, 8000).fits(10000), HostGpu(1, None).fits(10000), HostGpu(1, 8000, leased=True).fits(None)
        (False, True, False)
        """
        return not self.off and not self.leased and (vram_mb is None or self.free_mb is None
                                                     or self.free_mb >= vram_mb)


def host_gpus(free_mb: Mapping[int, int | None], off: Iterable[int], leased: Iterable[int]) -> list[HostGpu]:
    """The host's GPUs (nvidia-smi's, by index, with their free memory), with the switches
    that hold some off and the GPUs that other holders' live leases hold.

    >>> [(g.index, g.off, g.leased) for g in host_gpus({0: 100, 1: None, 2: 5}, off=[2], leased=[1])]
    [(0, False, False), (1, False, True), (2, True, False)]
    """
    off, leased = set(off), set(leased)
    return [HostGpu(index, free_mb[index], index in off, index in leased) for index in sorted(free_mb)]


def free_others(own: int, gpus: Sequence[HostGpu], vram_mb: int | None = None) -> list[int]:
    """The host's GPUs besides ``own`` that a gang could take now, lowest index first.

    >>> free_others(0, host_gpus({0: 10, 1: 10, 2: 10, 3: 10}, off=[2], leased=[3]))
    [1]
    """
    return [gpu.index for gpu in gpus if gpu.index != own and gpu.fits(vram_mb)]


def gang(own: int, gpus: Sequence[HostGpu], need: int, vram_mb: int | None = None) -> tuple[int, ...] | None:
    """The ``need`` GPUs of a job's gang: ``own`` first, then the lowest free others; None
    when the host has too few free now.

    >>> gpus = host_gpus({0: 80000, 1: 80000, 2: 1000, 3: 80000}, off=[], leased=[])
    >>> gang(0, gpus, 2), gang(3, gpus, 3, vram_mb=40000), gang(0, gpus, 4, vram_mb=40000), gang(1, gpus, 1)
    ((0, 1), (3, 0, 1), None, (1,))
    """
    others = free_others(own, gpus, vram_mb)
    if len(others) < need - 1:
        return None
    return (own, *others[:need - 1])


def shortfall(own: int, gpus: Sequence[HostGpu], need: int, vram_mb: int | None, host: str) -> str:
    """Why a gang of ``need`` cannot be made on ``host`` now, for the job's event.

    >>> shortfall(0, host_gpus({0: 1, 1: 1, 2: 1}, off=[1], leased=[2]), 3, None, "box")
    'it needs 3 GPUs of one host; box has 3, of which 1 free now (1 switched off, 1 leased)'
    """
    off = sum(gpu.off for gpu in gpus if gpu.index != own)
    leased = sum(gpu.leased and not gpu.off for gpu in gpus if gpu.index != own)
    small = sum(not gpu.off and not gpu.leased and not gpu.fits(vram_mb) for gpu in gpus if gpu.index != own)
    why = [f"{off} switched off" if off else "", f"{leased} leased" if leased else "",
           f"{small} without {vram_mb} MiB free" if small else ""]
    free = 1 + len(free_others(own, gpus, vram_mb))
    said = ", ".join(part for part in why if part)
    return f"it needs {need} GPUs of one host; {host} has {len(gpus)}, of which {free} free now" + (
        f" ({said})" if said else "")


def visible_devices(indexes: Sequence[int]) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a gang: its GPUs in order, the worker's own first.

    >>> visible_devices((3, 0, 1))
    '3,0,1'
    """
    return ",".join(str(index) for index in indexes)
