"""CUDA-graph replay of a function of fixed-shape tensors, one graph per key.

:class:`GraphCache` wraps a function ``fn(*tensors, *args)`` that returns a tensor or a tuple of
tensors. Each call names a hashable key that must determine everything the work depends on
besides the tensors' *values*, shapes and dtypes: the plain ``args`` (baked into a graph when it is
captured) and the ambient settings the function reads. The cache adds the inputs' shapes and
dtypes to the key itself (another shape is another graph). For a key:

* the **first** call runs ``fn`` eagerly and returns its result: a shape used once never pays for
  a capture, and that run compiles, loads and initializes whatever the function needs (Triton
  kernels, cuBLAS handles) before any capture (with ``capture_after=1`` the first call captures
  instead, for processes whose shapes recur: the capture's own warm-up run does that initializing);
* the **second** call captures: the inputs are copied into static buffers owned by the cache,
  ``fn`` runs once more eagerly on the cache's capture stream (the warm-up PyTorch's CUDA-graph
  documentation asks for, on the stream the capture then uses: libraries keep per-stream
  handles and workspaces that must not be created mid-capture), then is captured with
  ``torch.cuda.graph(..., pool=, stream=)``; the inputs are copied in again (``fn`` may
  overwrite its inputs, and the warm-up did) and the graph replayed once for this call's result;
* **later** calls copy the inputs into the static buffers and replay the graph.

Results of a replay are the graph's static output tensors. They are valid **until the next replay
of any graph of the cache**: the next replay of the same key overwrites them, and another graph's
replay may too (see below), so a caller consumes or copies them first. In stream order is enough:
a replay is queued on the caller's current stream, behind whatever the caller queued there.

Memory: all graphs of one cache share one memory pool (``torch.cuda.graph_pool_handle()``), so a
later capture reuses the memory earlier graphs only needed during their run (their intermediates)
instead of holding its own. That is safe because (1) the cache keeps every graph's static inputs
(allocated outside the pool) and outputs alive, so no graph's inputs or outputs are ever handed to
another capture; (2) what a later graph may get is an earlier graph's *intermediate* memory, which
that earlier graph only touches while it runs, and replays of one cache are sequential in stream
order, never concurrent; (3) callers consume a replay's outputs before the next replay (above), so
a later graph's outputs living in an earlier graph's intermediate memory are read before that
graph runs again. In whatever order the keys are replayed, then, nothing a caller still needs is
overwritten. A caller that replays one cache's graphs on *different* streams must order those
streams itself (the engine does: every stage-A chunk of a batch runs on one stream, and a batch
ends with the device synchronized). Tensors the function reads but does not take as inputs
(weights) must outlive the graphs: :meth:`GraphCache.reset` drops every graph when they are replaced.

Capture runs inside the call, so under the caller's ambient settings (cuDNN flags, TF32, the
current device); a key must change when those do. Capture uses ``capture_error_mode=
"thread_local"`` (as PyTorch's own CUDA-graph trees of ``torch.compile`` do): calls that are unsafe
during capture fail in this thread only, not in other threads of the process that happen to use
CUDA meanwhile. A capture that fails (an unsupported operation, a host sync inside ``fn``, out of memory) is not
fatal: the cache warns once, drops its graphs, runs eagerly from then on (:attr:`GraphCache.enabled`
False, :attr:`GraphCache.error` says why) and returns the eager result.

What it does not know: what the function computes, how inputs were padded to repeat shapes,
or the engine's switches. CUDA graphs exist only on CUDA devices: a cache for another device is
refused (ValueError); callers run their function directly there.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Hashable

import torch

#: see the module docstring: unsafe calls during a capture fail in the capturing thread only
CAPTURE_ERROR_MODE = "thread_local"


@dataclass
class GraphStats:
    """Counters of a :class:`GraphCache` since it was made."""

    eager: int = 0  #: calls run eagerly because their key was new (first sight), or the cache was full
    captures: int = 0  #: graphs captured (each also replayed once for its call)
    replays: int = 0  #: graph launches, including the one right after each capture
    bypassed: int = 0  #: calls run eagerly because graphs are disabled (by the caller or after a failed capture)
    primed: int = 0  #: of the captures, those made ahead of any call (:meth:`GraphCache.prime`)

    def as_dict(self) -> dict:
        """The counters as a plain dict (for ``info.extra`` and logs)."""
        return dict(eager=self.eager, captures=self.captures, replays=self.replays, bypassed=self.bypassed,
                    primed=self.primed)


class _Graph:
    """One captured graph: its static inputs, its static outputs and whether ``fn`` returned a tuple."""

    def __init__(self, graph, inputs: tuple, outputs: tuple, single: bool):
        self.graph = graph
        self.inputs = inputs
        self.outputs = outputs
        self.single = single

    def load(self, inputs: tuple) -> None:
        """Copy the call's inputs (of the captured shapes and dtypes) into the static buffers, queued
        on the current stream."""
        for dst, src in zip(self.inputs, inputs):
            dst.copy_(src, non_blocking=True)

    def replay(self):
        """Launch the graph on the current stream; its static outputs (overwritten by the next replay)."""
        self.graph.replay()
        return self.outputs[0] if self.single else self.outputs


class GraphCache:
    """``fn`` replayed as CUDA graphs, one per key (see the module docstring).

    ``fn(*tensors, *args)`` returns a tensor or a tuple of tensors of shapes that the tensors'
    shapes and ``args`` determine, and must be capturable (no host syncs, no data-dependent
    shapes, no new CPU->GPU tensors from Python values). ``device``: the CUDA device it runs on.
    ``max_graphs``: at most this many graphs are kept (each holds its inputs and outputs in device
    memory); calls with a new key past that run eagerly. ``name`` appears in the warning of a
    failed capture."""

    def __init__(self, fn: Callable[..., Any], device, *, max_graphs: int = 512, name: str = "CUDA graphs",
                 capture_after: int = 2):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, not {device}; call the function directly")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.fn = fn
        self.device = device
        self.max_graphs = int(max_graphs)
        self.name = name
        if capture_after not in (1, 2):
            raise ValueError(f"capture_after must be 1 or 2, not {capture_after!r}")
        #: 2: a key's first call runs eagerly and its second captures (a shape used once never pays for a
        #: capture); 1: the first call captures (a long-lived process whose shapes recur skips the eager call)
        self.capture_after = int(capture_after)
        #: False: every call runs ``fn`` eagerly (set by the caller, or after a failed capture)
        self.enabled = True
        #: why graphs were disabled (the failed capture's first line), else None
        self.error: str | None = None
        self.stats = GraphStats()
        #: calls per key (the caller's key, without the input shapes) while graphs are on: which shapes
        #: recur, for :meth:`prime` in a later process
        self.calls: Counter = Counter()
        self._graphs: dict[Hashable, _Graph] = {}
        self._seen: set = set()
        self._pool = None
        self._stream = None

    def __len__(self) -> int:
        return len(self._graphs)

    def __contains__(self, key) -> bool:
        """Whether a graph was captured for ``key`` (with any input shapes)."""
        return any(k == key for k, _ in self._graphs)

    def __call__(self, key: Hashable, inputs, *args):
        """``fn(*inputs, *args)`` for ``key`` (and the inputs' shapes and dtypes): eagerly the first time it is
        seen (and whenever graphs are off), captured the second time, replayed after that. A replay's
        outputs are valid until the next replay of any key: consume them first."""
        inputs = tuple(inputs)
        if not self.enabled:
            self.stats.bypassed += 1
            return self.fn(*inputs, *args)
        self.calls[key] += 1
        key = (key, tuple((x.shape, x.dtype) for x in inputs))
        entry = self._graphs.get(key)
        if entry is None:
            first = key not in self._seen and self.capture_after == 2
            if first or len(self._graphs) >= self.max_graphs:
                self._seen.add(key)
                self.stats.eager += 1
                return self.fn(*inputs, *args)
            try:
                entry = self._capture(inputs, args)
            except Exception as exc:  # noqa: BLE001 - any capture failure: warn once, run eagerly from now on
                self._disable(exc)
                self.stats.bypassed += 1
                return self.fn(*inputs, *args)
            self._graphs[key] = entry
            self.stats.captures += 1
        entry.load(inputs)  # also after a capture: the warm-up run may have overwritten the static inputs
        self.stats.replays += 1
        return entry.replay()

    def prime(self, key: Hashable, inputs, *args) -> bool:
        """Capture the graph of ``key`` now, from ``inputs`` of the shapes its calls will have (their
        values do not matter): a process that knows which shapes recur (from an earlier one's
        :attr:`calls`) skips their eager first sight and their capture mid-batch. False when the key
        has its graph already, the cache is full or off, or the capture failed (graphs are then off,
        as after a failed capture in a call)."""
        inputs = tuple(inputs)
        full = (key, tuple((x.shape, x.dtype) for x in inputs))
        if not self.enabled or full in self._graphs or len(self._graphs) >= self.max_graphs:
            return False
        try:
            entry = self._capture(inputs, args)
        except Exception as exc:  # noqa: BLE001 - as in __call__: warn once, eager from now on
            self._disable(exc)
            return False
        self._graphs[full] = entry
        self._seen.add(full)
        self.stats.captures += 1
        self.stats.primed += 1
        return True

    def _capture(self, inputs: tuple, args: tuple) -> _Graph:
        """Static copies of ``inputs``, a warm-up run on the capture stream, the capture (the caller
        loads the inputs again and replays it next)."""
        with torch.cuda.device(self.device):
            if self._stream is None:
                self._stream = torch.cuda.Stream(self.device)
                self._pool = torch.cuda.graph_pool_handle()
            current = torch.cuda.current_stream(self.device)
            static = tuple(x.clone() for x in inputs)  # on the current stream, ordered after the inputs
            self._stream.wait_stream(current)
            with torch.cuda.stream(self._stream):
                self.fn(*static, *args)  # warm-up on the stream the capture uses
            graph = torch.cuda.CUDAGraph()
            # torch.cuda.graph synchronizes the device before capturing: the warm-up and the static
            # copies are done before the capture begins
            with torch.cuda.graph(graph, pool=self._pool, stream=self._stream, capture_error_mode=CAPTURE_ERROR_MODE):
                out = self.fn(*static, *args)
            single = isinstance(out, torch.Tensor)
            outputs = (out,) if single else tuple(out)
            if not all(isinstance(o, torch.Tensor) for o in outputs):
                raise TypeError(f"{self.name}: the function must return tensors to be replayed as a graph")
            return _Graph(graph, static, outputs, single)

    def _disable(self, exc: BaseException) -> None:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        self.error = f"{type(exc).__name__}: {first}"
        warnings.warn(f"{self.name}: CUDA graph capture failed, running eagerly from now on ({self.error})",
                      RuntimeWarning, stacklevel=3)
        self.enabled = False
        self.reset()

    def reset(self) -> None:
        """Drop every graph and forget which keys were seen (the counters stay): needed when a
        tensor the function reads but does not take as an input (weights) is replaced. Waits for the
        device first when graphs are held: a replay still queued must not outlive its graph's memory."""
        if self._graphs:
            self._wait()
        self._graphs.clear()
        self._seen.clear()

    def _wait(self) -> None:
        """Wait until the device is idle (before graphs and their memory are dropped)."""
        torch.cuda.synchronize(self.device)
