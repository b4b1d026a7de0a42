"""Compile the fused kernels' Triton specializations in parallel, before the first batch.

On a machine whose Triton cache is empty, the first stage-B pass of the torch engine compiled
about 30 specializations of the fused kernels (:mod:`~engines.torch_vits.fused_conv`,
:mod:`~engines.torch_vits.fused_wn`) one after another, each when first launched: about a
minute (docs/PERFORMANCE.md). :func:`precompile` compiles them all at engine start, on
a pool of threads:

1. **Which specializations.** :func:`enumerate_launches` runs the engine's own stage-B function
   once for each distinct frame count of the shapes it will use, one row each, with the kernel
   launches observed and left out (:func:`engines.torch_vits.launch.observe` with ``run=False``:
   the launch helpers build their :class:`~engines.torch_vits.launch.KernelLaunch` exactly as for a
   real launch, the PyTorch operations between them run on uninitialized outputs). So the
   kernels, constexprs, dtypes, integer arguments and pointer alignments are those of a real
   pass: there is no second list of kernels to keep in step. Rows only change the grid, which
   Triton does not compile for (``tests/engines/test_precompile.py`` checks that the launches
   recorded from real passes of several rows are the enumerated ones).
2. **Compiling them.** Each recorded launch goes to Triton's ``JITFunction.warmup`` (the launch's
   arguments bound and specialized by Triton's own code, as at a launch; it compiles and does not
   launch), inside ``triton.AsyncCompileMode`` with a thread pool: Triton then hands each new
   compilation to the pool, and on leaving the mode puts every compiled kernel in the kernel's
   in-memory cache, so the first real launch finds it there. ``triton.compile`` writes each one to
   the on-disk cache (``$TRITON_CACHE_DIR``, default ``~/.triton/cache``) as a lazy compile does,
   and a specialization already there is only loaded (milliseconds): with a warm cache this is
   cheap, and a no-op for a specialization already compiled in this process.
   Stage A's GEMM kernel (:mod:`~engines.torch_vits.fused_gemm`) is found the same way, by
   :func:`enumerate_stage_a`: the engine's stage A on one item of 16 and one of 17 phonemes.
3. **Threads, not processes.** Triton 3.6 and 3.9 release the GIL in their long native steps
   (MLIR passes, LLVM, and ``ptxas``, which is a subprocess): compiling these kernels for sm_90 on
   a CPU host, a probe thread never waited more than 28 ms for the GIL, and waited 7-10% of the
   compile's wall time in all (the Python front end). By Amdahl's law that allows about 6x on 16
   cores, without worker processes to start (each importing Triton) or a second way of naming
   specializations across processes. docs/PERFORMANCE.md has the cold start it saves.

Failures: anything that goes wrong here (no ``AsyncCompileMode`` in this Triton, a compile
error, an exception in the dry run) is logged as one warning line and the kernels are left to
Triton's usual lazy compilation at first launch; a failed compilation is never cached, so the
real launch compiles it again and raises its error where it would have anyway. Results cannot
change: the same kernels are compiled from the same arguments, only earlier.

The engine calls it at construction on CUDA when a fused path is on, unless its ``precompile``
option (:class:`engines.torch_options.TorchOptions`) is off.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Iterator

from engines.torch_vits.launch import KernelLaunch, launch_key, observe

log = logging.getLogger("booktts.torch")

@dataclass
class PrecompileReport:
    seconds: float = 0.0
    launches: int = 0  # distinct launches seen in the dry runs (scalar values distinguished)
    kernels: int = 0  # specializations handed to Triton's compiler (compiled now or loaded from disk)
    compiled: int | None = None  # of those, compiled now (None: this Triton has no compilation listener)
    cached: int | None = None  # loaded from the on-disk cache
    failed: int = 0
    workers: int = 0
    error: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def enumerate_launches(stage_b: Callable, shapes: Iterable[tuple[int, int]], channels: int,
                       device) -> Iterator[list[KernelLaunch]]:
    """For each distinct frame count of ``shapes`` ((rows, frames) of stage B), the kernel launches
    ``stage_b(z_p [1, channels, frames], frame_counts [1] int64)`` makes, without launching them.

    ``stage_b`` is the engine's stage-B function (flow + decoder, int16 PCM out). Yields one list
    per frame count, so a caller can drop each one's tensors before the next dry run."""
    import torch

    for f in sorted({int(f) for _, f in shapes}):
        seen: list[KernelLaunch] = []
        z = torch.zeros(1, channels, f, device=device)
        fr = torch.full((1,), f, dtype=torch.long, device=device)
        with torch.inference_mode(), observe(seen.append, run=False):
            stage_b(z, fr)
        yield seen


#: phonemes an item for :func:`enumerate_stage_a`'s dry runs: one length divisible by 16 and one not
#: (the only integer argument of stage A's GEMM launches that changes with the chunk and is specialized on
#: is the channel-first prior's column stride, the chunk's length)
STAGE_A_LENGTHS = (16, 17)


def enumerate_stage_a(stage_a: Callable, device, lengths: Iterable[int] = STAGE_A_LENGTHS
                      ) -> Iterator[list[KernelLaunch]]:
    """The kernel launches of the engine's stage A (``stage_a(ids, lengths, dp_noise, length_scale)``,
    :meth:`~engines.torch_vits.model.VitsSynthesizer.stage_a`) for one item of each length in
    ``lengths``, without launching them (one list per length, as :func:`enumerate_launches`)."""
    import torch

    for t in lengths:
        seen: list[KernelLaunch] = []
        ids = torch.zeros(1, t, dtype=torch.long, device=device)
        with torch.inference_mode(), observe(seen.append, run=False):
            stage_a(ids, torch.full((1,), t, dtype=torch.long, device=device),
                    torch.zeros(1, 2, t, device=device), 1.0)
        yield seen


#: phoneme widths for :func:`enumerate_prior`: its kernel is compiled once per power of two of a batch's width
#: (at least 16); batches wider than 512 phonemes compile theirs when first met
PRIOR_WIDTHS = (16, 32, 64, 128, 256, 512)


def enumerate_prior(channels: int, device, widths: Iterable[int] = PRIOR_WIDTHS) -> Iterator[list[KernelLaunch]]:
    """The launches of :func:`~engines.torch_vits.fused_prior.sample_prior` (stage B's input) for batches
    ``widths`` phonemes wide, with and without prior noise, without launching them (one list)."""
    import torch

    from engines.torch_vits.fused_prior import sample_prior

    seen: list[KernelLaunch] = []
    with torch.inference_mode(), observe(seen.append, run=False):
        for t in widths:
            m = torch.zeros(1, channels, t, device=device)
            d = torch.ones(1, t, device=device)
            item = torch.zeros(1, dtype=torch.long, device=device)
            for noise in (0.0, 1.0):
                sample_prior(m, m, d, item, 64, 1, torch.zeros(1, channels, 64, device=device), item, noise)
    yield seen


class _Pool(ThreadPoolExecutor):
    """A thread pool that remembers the exceptions of the jobs it ran (Triton's ``AsyncCompileMode``
    with ``ignore_errors=True`` drops them; they are still raised to it)."""

    def __init__(self, workers: int):
        super().__init__(max_workers=workers, thread_name_prefix="triton-precompile")
        self.errors: list[BaseException] = []

    def submit(self, fn, /, *args, **kwargs):
        def job():
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                self.errors.append(exc)
                raise

        return super().submit(job)


def default_workers() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(32, n))


def precompile(launches: Iterable[list[KernelLaunch]], device, *, workers: int | None = None) -> PrecompileReport:
    """Compile the Triton specialization of every launch in ``launches`` (lists of launches, as
    :func:`enumerate_launches` yields them; consumed one list at a time, while the compiles of the
    earlier ones run) in parallel, for ``device``; see the module docstring. Never raises: on any
    failure it logs one warning and returns a report whose ``error`` says what happened (the kernels
    then compile lazily, at their first launch)."""
    rep = PrecompileReport(workers=workers or default_workers())
    t0 = time.perf_counter()
    try:
        # in a copy of the context: whatever Triton's compile mode sets in its context variable stays there
        contextvars.copy_context().run(_precompile, launches, device, rep)
    except Exception as exc:  # noqa: BLE001 - a failure here must never stop the engine
        rep.error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
    rep.seconds = time.perf_counter() - t0
    if rep.error:
        log.warning("Triton precompile failed after %.1f s (%s); the kernels compile on first use instead",
                    rep.seconds, rep.error)
    else:
        log.info("Triton precompile: %d specializations (%s compiled, %s from the disk cache) on %d threads "
                 "in %.1f s", rep.kernels, rep.compiled, rep.cached, rep.workers, rep.seconds)
    return rep


def _precompile(launches, device, rep: PrecompileReport) -> None:
    import torch
    import triton

    mode_cls = getattr(triton, "AsyncCompileMode", None)
    future_cls = getattr(triton, "FutureKernel", None)
    if mode_cls is None:
        raise RuntimeError(f"triton {triton.__version__} has no AsyncCompileMode (parallel compilation)")
    knobs = getattr(getattr(triton, "knobs", None), "compilation", None)
    previous = getattr(knobs, "listener", None) if knobs is not None else None
    hits: list[bool] = []

    def listener(*args, **kwargs):  # called by triton.compile, in the pool's threads
        hits.append(bool(kwargs.get("cache_hit")))
        if previous is not None:
            previous(*args, **kwargs)

    if knobs is not None and hasattr(knobs, "listener"):
        knobs.listener = listener
    pool = _Pool(rep.workers)
    futures: dict[int, object] = {}
    seen: set = set()
    on_device = (torch.cuda.device(device) if torch.device(device).type == "cuda"  # Triton compiles for the
                 else contextlib.nullcontext())                                 # current device
    try:
        # ignore_errors: a failed compile must not raise out of the mode (Triton 3.6 would then leave
        # it active); the pool records it, and the kernel compiles again at its first launch
        with on_device, mode_cls(pool, ignore_errors=True):
            for batch in launches:
                for kl in batch:
                    key = launch_key(kl)
                    if key in seen:
                        continue
                    seen.add(key)
                    out = kl.warmup()  # submits a compile to the pool, or returns the kernel already in memory
                    if out is not None and (isinstance(out, future_cls) if future_cls else hasattr(out, "result")):
                        futures[id(out)] = out  # one per specialization (Triton dedupes by its cache key)
                del batch  # its tensors: only their dtypes and alignment were needed
    finally:
        pool.shutdown(wait=True)
        if knobs is not None and hasattr(knobs, "listener"):
            knobs.listener = previous
    rep.launches = len(seen)
    rep.kernels = len(futures)
    if knobs is not None and hasattr(knobs, "listener"):
        rep.cached = sum(hits)
        rep.compiled = len(hits) - rep.cached
    rep.failed = len(pool.errors)
    if pool.errors:
        first = pool.errors[0]
        rep.error = (f"{len(pool.errors)} of {rep.kernels} compilations failed, first "
                     f"{type(first).__name__}: {(str(first).splitlines() or [''])[0][:300]}")


__all__ = ["PrecompileReport", "default_workers", "enumerate_launches", "enumerate_stage_a", "precompile"]
