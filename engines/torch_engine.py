"""PyTorch backend: the Piper VITS voice ported to PyTorch, batched, bucketed, compiled on CUDA.

How a batch runs (see :mod:`engines.torch_vits.model`):

1. Phoneme ids go to the device; **stage A** (text encoder + stochastic duration
   predictor, always float32) gives each item's integer durations and frame count.
   The frame counts come back to the host (one small sync). On CUDA stage A runs channels-last
   (:mod:`engines.torch_vits.fast_stage_a`: GEMMs on ``[B, T, C]``, far fewer kernels, the same
   function in fp32; ``$BOOKTTS_TORCH_FAST_A``, the ``fast_stage_a`` argument), and its GEMMs
   run on the tensor cores in near-fp32 precision through one Triton kernel with the layer norms,
   residuals, activations and masks in its epilogue (:mod:`engines.torch_vits.fused_gemm`;
   ``$BOOKTTS_TORCH_STAGE_A_GEMM``).
2. Items are sorted by frame count and grouped into **frame buckets**
   (:data:`DEFAULT_BUCKETS`: multiples of 64 frames up to 512, of 128 up to 1024,
   of 256 up to 2048, of 512 up to 4096, then of 1024). A bucket is split into
   chunks of at most ``max_frames_per_chunk // bucket`` items (:meth:`TorchEngine.chunk_rows`).
   On CUDA a chunk's batch axis is padded by :func:`round_rows` to the next of
   1, 2, 3, 4, 6, 8, 12, 16, 24, ... (``2^k`` and ``3*2^k``, less than 50% padding),
   never past the bucket's chunk size, so stage B only ever sees a bounded set of
   shapes (:meth:`TorchEngine.warmup_shapes`): cuDNN autotunes each once (unless the
   workload is too short to pay for it: ``EngineSpec.workload_s``, ``$BOOKTTS_TORCH_AUTOTUNE``),
   and, when the engine is compiled (``torch.compile``, mode ``reduce-overhead``: Inductor
   kernels replayed as CUDA graphs), each is recorded once. Stage A is chunked by phoneme
   length (multiples of 32); ``$BOOKTTS_TORCH_COMPILE_A=1`` compiles the channel-first path
   (dynamic shapes) instead of running the channels-last one.
3. **Stage B** (flow + HiFi-GAN at the engine's precision) turns each chunk's prior
   ``z_p = m + eps * exp(logs) * noise_scale`` into int16 PCM on the device. On CUDA at
   fp16/bf16 the decoder runs through fused Triton kernels (:mod:`engines.torch_vits.fused_conv`;
   ``$BOOKTTS_TORCH_FUSED``: resblocks, upsampling, and the last layer with the int16
   conversion; only ``conv_pre`` stays cuDNN), and the engine then
   runs eager by default (it measured faster than compiled with the kernel inside).
   With the fused decoder (by default; ``$BOOKTTS_TORCH_FUSED_FLOW``) the flow's WaveNet layers
   also run through a fused Triton kernel (:mod:`engines.torch_vits.fused_wn`: dilated
   convolution in fp16/bf16, gate, near-float32 1x1 convolution and residual/skip sums in one
   pass; the coupling stream stays float32).
4. The result is :class:`~engines.base.SynthesisResult`'s packed layout: each chunk's
   ``[rows, frames * hop]`` block back to back in one freshly allocated host buffer
   (pinned on CUDA, filled by asynchronous copies; PyTorch's caching host allocator
   recycles the pinned blocks of freed results, and no result is ever overwritten by a
   later call), with each item's offset. No ``[B, S]`` array padded to the longest item
   is made unless a caller asks for ``result.audio``.

Warm-up (CUDA only; ``warmup`` argument, else ``$BOOKTTS_TORCH_WARMUP``):

* ``"full"``: every stage-B shape a batch of up to ``spec.max_batch`` items can
  produce is run at construction (cuDNN autotuning; CUDA graph recording when
  compiled). The default for compiled engines; minutes for large ``max_batch``.
* ``"lazy"``: nothing at construction; each shape is autotuned (and, compiled,
  recorded) the first time a batch uses it. The default for eager engines
  (``compile=False``): a one-off ``cli.py run`` only pays for the shapes it uses.
* a list of ``(rows, frames)`` shapes: those only.

``True`` means ``"full"`` and ``False`` ``"lazy"``. ``info.extra["warmup"]`` says
which mode the engine was built with (``"none"`` on CPU, where nothing is warmed).

Precompile (CUDA with a fused path; ``precompile`` argument, else ``$BOOKTTS_TORCH_PRECOMPILE``:
``1`` on, ``0`` off, unset on): before any warm-up, the engine compiles every Triton
specialization its fused kernels will launch, on a pool of threads
(:mod:`engines.torch_vits.precompile`: a dry run of stage B for each frame bucket finds the
launches, Triton's ``warmup`` compiles them inside ``triton.AsyncCompileMode``). Without it, with
an empty Triton cache, the kernels compile one by one in the first batch (about a minute:
docs/PERFORMANCE.md); with a filled cache it only loads them. A failure is logged as one warning
and the kernels compile lazily. ``info.extra``: ``precompile``, ``precompile_s``,
``precompile_kernels`` (specializations handed to Triton), ``precompile_compiled`` (of those,
compiled rather than loaded from the disk cache), ``precompile_error`` on failure.

Padding: every convolution of stage B sees its input multiplied by the item's time
mask, so samples inside an item's length do not depend on what else is in the
chunk or how far it is padded; samples past ``sample_lengths[i]`` are exactly 0.

Pipelining: stage A's chunks can be cut into :attr:`TorchEngine.pipeline` groups of about
equal size (``$BOOKTTS_TORCH_PIPELINE``; default 1, :data:`CUDA_PIPELINE_GROUPS`). On CUDA
stage A of group ``g+1`` then runs on a side stream while stage B of group ``g`` runs on the
main one, and the host waits only for each group's frame counts (on CPU the groups run in turn).

CUDA graphs of stage A (``$BOOKTTS_TORCH_GRAPHS``; default on CUDA on the channels-last eager path):
stage A launches some 300 small kernels per chunk, and a fast GPU outruns the host that launches
them. Each chunk's rows are
then padded (:meth:`TorchEngine.stage_a_rows`: to a multiple of :data:`STAGE_A_ROW_STEP` rows, at
most the width's chunk size; padding rows have id 0, length 1 and zero noise, and their outputs are
dropped), so chunk shapes repeat across batches, and a chunk runs through
:class:`~engines.torch_vits.graphs.GraphCache` keyed by (padded rows, width, length scale): eager
the first time a shape is seen, captured the second, replayed after that. Every op of stage A
treats each row on its own (per-row GEMMs, attention per item and head, masks and sums per row),
so a real row's outputs do not depend on the padding rows. The graphs also run on the pipelined
path: a replay goes on the current stream (the side stream there), and every stage-A chunk of a
batch runs on that one stream. A failed capture warns once and stage A runs eagerly from then on
(the rows stay padded). :meth:`TorchEngine.stage_a_graph_stats` counts captures and replays.

CUDA graphs of stage B (the same switch; on CUDA when the engine is eager, since a compiled one
replays Inductor's own graphs): each chunk's flow + decoder (:meth:`TorchEngine._stage_b_pcm`) on
its padded ``(rows, frame bucket)`` shape runs through a second cache (its own memory pool), keyed
by that shape; its PCM output is copied out at once, before the next chunk's replay. Python-level
kernel settings (tile sizes) are baked into a graph when it is captured:
:meth:`TorchEngine.reset_graphs` drops both caches.

Noise comes from a ``torch.Generator`` on the engine's device seeded with
``SynthesisBatch.seed`` (a fresh random seed when it is None): the same batch with
the same seed on the same device gives the same audio. The duration noise is one
``[B, 2, T]`` draw; the prior noise is one ``[n, C, max_frames]`` draw per pipeline group,
in group order. The groups depend only on the batch's lengths, so the noise does not
depend on the frame bucketing.

Weights come from, in this order: the ``weights_path`` argument, the environment
variable ``BOOKTTS_TORCH_WEIGHTS``, the voice's own file when it is a
``.safetensors`` export (:func:`core.voice.voice_from_weights`), else the
voice's ONNX file (needs the ``onnx`` package).
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path

import numpy as np

from engines.spec import EngineSpec
from engines.base import MAX_WAV_VALUE, EngineInfo, SynthesisBatch, SynthesisResult

# "0" leaves the fused kernels' Triton compilation to their first launch (one by one, in the first batch);
# unset/"1": compile them all in parallel threads at construction (engines.torch_vits.precompile)
from engines.torch_vits.precompile import PRECOMPILE_ENV  # noqa: F401  (re-exported with the other switches)
from core.errors import (
    DeterministicEngineError,
    EngineError,
    EngineOutOfMemory,
    EngineUnavailable,
    TransientEngineError,
    VoiceError,
)

WEIGHTS_ENV = "BOOKTTS_TORCH_WEIGHTS"
#: "0" runs eager on CUDA (no torch.compile / CUDA graphs: fast start), "1" compiles; unset: compile on CUDA
#: unless the decoder is fused (then eager, which measured faster).
COMPILE_ENV = "BOOKTTS_TORCH_COMPILE"
#: "0" runs the decoder's resblocks as PyTorch/cuDNN convolutions, "1" through the fused Triton kernel;
#: unset: fused on CUDA at fp16/bf16 when Triton is importable.
FUSED_ENV = "BOOKTTS_TORCH_FUSED"
#: "0" runs the flow's WN layers as PyTorch/cuDNN operations, "1" through the fused Triton kernel;
#: unset: fused whenever the decoder is (CUDA, fp16/bf16, Triton).
FUSED_FLOW_ENV = "BOOKTTS_TORCH_FUSED_FLOW"
#: "1" compiles stage A (encoder + duration predictor) with torch.compile (dynamic shapes); unset/"0": eager.
COMPILE_A_ENV = "BOOKTTS_TORCH_COMPILE_A"
#: "0" runs stage A channel-first (the modules' own forward), "1" channels-last (engines.torch_vits.fast_stage_a:
#: the same function in fp32 through GEMMs, far fewer kernels); unset: channels-last on CUDA.
FAST_A_ENV = "BOOKTTS_TORCH_FAST_A"
#: "1" runs the channels-last stage A's GEMMs through the Triton kernel of engines.torch_vits.fused_gemm
#: (tensor cores, three fp16 products of split operands: near-fp32; fused bias/residual/LayerNorm/activation/mask
#: epilogues; faster: docs/PERFORMANCE.md, "Figures behind the engine's defaults"), "0" through
#: cuBLAS in true fp32; unset: the kernel on CUDA when Triton is importable.
STAGE_A_GEMM_ENV = "BOOKTTS_TORCH_STAGE_A_GEMM"
#: "0" turns cuDNN autotuning of stage B off (cuDNN's heuristics pick the algorithms: no tuning pause on a
#: new shape); unset/"1": autotune each shape on first use.
AUTOTUNE_ENV = "BOOKTTS_TORCH_AUTOTUNE"
#: Below this much audio (EngineSpec.workload_s) the engine does not autotune: tuning each new shape
#: costs seconds that only a long workload wins back in faster batches (the break-even is about
#: 19 hours of audio: docs/PERFORMANCE.md, "Figures behind the engine's defaults").
AUTOTUNE_MIN_WORKLOAD_S = 20 * 3600.0
#: "full" warms every stage-B shape up at construction, "lazy" none (each is tuned on first use);
#: unset: full when compiled, lazy when eager. An explicit ``warmup`` argument wins.
WARMUP_ENV = "BOOKTTS_TORCH_WARMUP"
WARMUP_MODES = ("full", "lazy")
#: Number of groups a batch's stage A is cut into on CUDA, so that stage A of one group (on a side
#: stream) overlaps stage B of the previous one; "1" runs the stages one after the other.
PIPELINE_ENV = "BOOKTTS_TORCH_PIPELINE"
#: "1" replays stage A's chunks as CUDA graphs (engines.torch_vits.graphs; rows padded so shapes repeat: no
#: host launch overhead), and stage B's chunks too when the engine is not compiled (compiled, Inductor
#: records its own); "0" launches kernels one by one; unset: graphs on CUDA on the channels-last eager
#: stage A and the eager stage B. CUDA only.
GRAPHS_ENV = "BOOKTTS_TORCH_GRAPHS"
#: At most this many CUDA graphs per stage; chunks of a new shape past that run eagerly. Each graph keeps
#: its inputs and outputs in device memory (a full stage-A chunk's about 100 MB): a long-lived worker
#: would otherwise collect a graph for every shape it ever meets. The benchmark batch of 1024 sentences
#: uses 13 stage-A and 31 stage-B shapes (10.2 GB reserved for both: docs/PERFORMANCE.md); the cap itself has not
#: been measured against memory on a GPU.
MAX_GRAPHS_PER_STAGE = 128
#: Stage A's chunks are padded to a multiple of this many rows when they run as CUDA graphs (each
#: shape a graph; TorchEngine.stage_a_rows).
STAGE_A_ROW_STEP = 8
#: The default of $BOOKTTS_TORCH_PIPELINE on CUDA: one group (more groups gain nothing with the
#: channels-last stage A; 3-4 are slower: docs/PERFORMANCE.md, "Figures behind the engine's defaults").
CUDA_PIPELINE_GROUPS = 1
PRECISIONS = ("fp32", "fp16", "bf16")


def _default_buckets(limit: int = 4096) -> list[int]:
    out, f = [], 64
    while f <= limit:
        out.append(f)
        f += 64 if f < 512 else 128 if f < 1024 else 256 if f < 2048 else 512
    return out


#: Frame buckets of stage B (a longer item is rounded up to a multiple of 1024 frames).
DEFAULT_BUCKETS = _default_buckets()


def bucket_for(frames: int, buckets=DEFAULT_BUCKETS) -> int:
    for b in buckets:
        if frames <= b:
            return b
    return -(-frames // 1024) * 1024


def round_rows(n: int, cap: int | None = None) -> int:
    """Rows a chunk of ``n`` items is padded to on CUDA: the smallest of 1, 2, 3, 4, 6, 8, 12,
    16, 24, 32, 48, ... (``2^k`` and ``3*2^k``) that is >= ``n``, but at most ``cap`` (the chunk
    size of the bucket, >= ``n``). Padding is under 50% of ``n``; the sizes repeat across
    batches, so cuDNN autotuning and CUDA graphs are reused."""
    if n < 1 or (cap is not None and n > cap):
        raise ValueError(f"cannot pad {n} rows (cap {cap})")
    p = 1
    while p < n:
        p *= 2
    r = 3 * p // 4 if 3 * p // 4 >= n else p
    return r if cap is None else min(r, cap)


def pad_stage_a_inputs(ids, lengths, noise, rows: int):
    """A stage-A chunk's inputs (``ids`` ``[n, T]``, ``lengths`` ``[n]``, duration noise ``[n, 2, T]``) grown
    to ``rows`` rows: padding rows of id 0, length 1 and zero noise (valid inputs whose outputs are
    finite and dropped; every stage-A op treats each row on its own)."""
    import torch

    k = rows - ids.shape[0]
    if k < 0:
        raise ValueError(f"cannot pad {ids.shape[0]} rows to {rows}")
    return (torch.cat([ids, ids.new_zeros(k, *ids.shape[1:])]), torch.cat([lengths, lengths.new_ones(k)]),
            torch.cat([noise, noise.new_zeros(k, *noise.shape[1:])]))


def resolve_warmup(warmup, compiled: bool, env=None):
    """The warm-up mode: ``"full"``, ``"lazy"`` or a list of shapes (see the module docstring)."""
    if warmup is None:
        raw = (os.environ if env is None else env).get(WARMUP_ENV, "").strip().lower()
        if raw and raw not in WARMUP_MODES:
            raise EngineUnavailable(f"{WARMUP_ENV} must be full or lazy, not {raw!r}")
        warmup = raw or ("full" if compiled else "lazy")
    if warmup is True:
        return "full"
    if warmup is False:
        return "lazy"
    if isinstance(warmup, list):
        return warmup
    if warmup not in WARMUP_MODES:
        raise ValueError(f"warmup must be 'full', 'lazy', True, False or a list of shapes, not {warmup!r}")
    return warmup


def _env_flag(name: str) -> bool | None:
    """``$name`` as a switch: "1" True, "0" False, unset or anything else None (the default applies)."""
    return {"1": True, "0": False}.get(os.environ.get(name, "").strip())


def _import_torch():
    try:
        import torch
    except ImportError as exc:
        raise EngineUnavailable("the torch engine needs PyTorch; pip install torch (or use --engine onnx)") from exc
    return torch


class TorchEngine:
    """The PyTorch port of a Piper VITS voice. Text-blind; see the module docstring.

    ``warmup`` (CUDA only): ``"full"`` runs every stage-B shape at construction, ``"lazy"`` none
    (each is autotuned on first use), a list of ``(rows, frames)`` only those; None (default):
    ``$BOOKTTS_TORCH_WARMUP``, else full when compiled and lazy when eager.
    """

    def __init__(self, voice, spec: EngineSpec | None = None, *, weights_path=None, compile: bool | None = None,
                 warmup: bool | str | list | None = None, buckets: list[int] | None = None,
                 max_frames_per_chunk: int | None = None, max_phonemes_per_chunk: int = 65536,
                 channels_last: bool | None = None, fused: bool | None = None,
                 fast_stage_a: bool | None = None, precompile: bool | None = None,
                 allow_cpu_half: bool = False) -> None:
        spec = spec or EngineSpec(name="torch")
        torch = _import_torch()
        self.torch = torch
        if spec.precision not in PRECISIONS:
            raise EngineUnavailable(f"the torch engine has no {spec.precision} mode; use --precision fp32, fp16 or bf16")
        device = spec.device or "cpu"
        if device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise EngineUnavailable(f"no CUDA device is visible to PyTorch (asked for {device}); use --device cpu")
            try:
                self.device = torch.device(device)
                torch.cuda.get_device_properties(self.device)
            except (RuntimeError, AssertionError) as exc:
                raise EngineUnavailable(f"CUDA device {device} does not exist here; use cuda:0 .. "
                                        f"cuda:{torch.cuda.device_count() - 1}") from exc
        elif device == "cpu":
            self.device = torch.device("cpu")
            if spec.precision != "fp32" and not allow_cpu_half:
                raise EngineUnavailable(f"the torch engine runs only fp32 on cpu (asked for {spec.precision}); "
                                        "use --precision fp32 or a cuda device")
            if spec.threads:
                torch.set_num_threads(int(spec.threads))
        else:
            raise EngineUnavailable(f"unknown device {device!r}; use cpu or cuda:N")
        self.is_cuda = self.device.type == "cuda"
        self.dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[spec.precision]
        self.voice = voice
        self.spec = spec

        t0 = time.perf_counter()
        state, hp, source = self._load_weights(voice, weights_path)
        from engines.torch_vits.hparams import VitsHParams
        from engines.torch_vits.model import VitsSynthesizer

        self.hparams = VitsHParams.from_dict(hp)
        if self.hparams.hop_length != voice.hop_length:
            raise VoiceError(f"weights have hop length {self.hparams.hop_length}, the voice config says "
                             f"{voice.hop_length}; export the weights of this voice again")
        with torch.no_grad():
            model = VitsSynthesizer(self.hparams)
            try:
                model.load_weights({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()})
            except KeyError as exc:
                raise VoiceError(f"weights from {source} do not fit the model ({exc.args[0]}); export them again") from exc
            self.model = model.eval().to(self.device)
            # Stage B at the engine's precision (its own copy of flow + decoder when not fp32).
            import copy

            if self.dtype == torch.float32:
                self.flow, self.dec = self.model.flow, self.model.dec
            else:
                from engines.torch_vits.modules import mixed_precision_flow

                self.flow = mixed_precision_flow(copy.deepcopy(self.model.flow), self.dtype)
                self.dec = copy.deepcopy(self.model.dec).to(self.dtype)
            # fused Triton resblocks (one memory pass per convolution) on CUDA at half precision; they
            # imply the NHWC layout, which is also the default there without them (cuDNN's tensor cores)
            self.fused = self._resolve_fused(fused, by_default=channels_last is not False)
            self.channels_last = self.fused or bool(channels_last if channels_last is not None
                                                    else self.is_cuda and self.dtype != torch.float32)
            if self.channels_last and self.dec is self.model.dec:
                self.dec = copy.deepcopy(self.model.dec)  # the layout change must not touch stage A's model
            if self.fused:
                self.dec.use_fused_resblocks()
            elif self.channels_last:
                self.dec.use_channels_last()
            # fused flow (WN layers through one Triton kernel each): its own switch, on with the fused decoder
            self.fused_flow = self._resolve_fused_flow()
            if self.fused_flow:
                if self.flow is self.model.flow:
                    self.flow = copy.deepcopy(self.model.flow)  # the model's own flow stays plain
                self.flow.use_fused()
        self.hop = self.hparams.hop_length
        self.n_vocab = self.hparams.n_vocab
        self.buckets = sorted(buckets or DEFAULT_BUCKETS)
        self.max_frames_per_chunk = int(max_frames_per_chunk or (131072 if self.is_cuda else 8192))
        self.max_phonemes_per_chunk = int(max_phonemes_per_chunk)
        #: pad a chunk's rows with :func:`round_rows` (CUDA: few shapes for autotuning and CUDA graphs)
        self.pad_rows = self.is_cuda
        self.pipeline = self._pipeline_groups()
        self._stream = None
        self._copier = None  # the device-to-host copy stream (CUDA, one pipeline group)
        #: copy each chunk's PCM to the host while the next chunk computes (CUDA, one pipeline group);
        #: False copies after the last chunk (for A/B runs)
        self.copy_overlap = True
        #: with the fused flow: stage B's input made by one kernel (:mod:`engines.torch_vits.fused_prior`),
        #: already in the flow's layout; False makes it with PyTorch operations (for A/B runs)
        self.fused_prior = self.fused_flow
        if compile is None:
            compile = _env_flag(COMPILE_ENV)
        # Default: compile on CUDA, except with the fused decoder, which runs faster eager than compiled
        # with CUDA graphs (docs/PERFORMANCE.md, "Figures behind the engine's defaults").
        self.compiled = bool(self.is_cuda and not self.fused if compile is None else compile)
        self._stage_b = self._stage_b_pcm
        #: cuDNN autotuning of stage B's convolutions on first use of each shape: BOOKTTS_TORCH_AUTOTUNE=0/1,
        #: else on unless the spec's workload is known to be too short to pay for it
        self.autotune = _env_flag(AUTOTUNE_ENV)
        if self.autotune is None:
            self.autotune = spec.workload_s is None or spec.workload_s >= AUTOTUNE_MIN_WORKLOAD_S
        compile_error = None
        # Stage A through Inductor (dynamic shapes, no CUDA graphs: its shapes change every batch).
        # Opt-in (BOOKTTS_TORCH_COMPILE_A=1): faster than the channel-first eager stage A after a long
        # first batch (compiling), slower than the channels-last eager stage A (docs/PERFORMANCE.md).
        # It compiles the channel-first modules: Inductor failed on the channels-last path (a size
        # assertion in the first batch), which is faster eager than the channel-first one compiled.
        self.compiled_stage_a = bool(_env_flag(COMPILE_A_ENV))
        # Stage A channels-last (same weights, packed once here): the argument, else BOOKTTS_TORCH_FAST_A,
        # else on CUDA unless stage A is compiled (on CPU both paths run; the tests cover both).
        if fast_stage_a is None:
            fast_stage_a = _env_flag(FAST_A_ENV)
        if fast_stage_a and self.compiled_stage_a:
            raise EngineUnavailable(f"{COMPILE_A_ENV}=1 compiles the channel-first stage A, not the channels-last "
                                    f"one; unset {FAST_A_ENV} (or {COMPILE_A_ENV})")
        self.fast_stage_a = bool(self.is_cuda and not self.compiled_stage_a if fast_stage_a is None else fast_stage_a)
        self.model.use_fast_stage_a(self.fast_stage_a, kernels=self._stage_a_kernels())
        self._stage_a = self.model.stage_a
        #: stage A's chunks replayed as CUDA graphs (BOOKTTS_TORCH_GRAPHS); may be switched on a live engine
        self.stage_a_graphs = self._resolve_stage_a_graphs()
        #: pad stage A's chunks to :meth:`stage_a_rows` rows; None: whenever :attr:`stage_a_graphs` is on
        self.pad_stage_a: bool | None = None
        self._graphs = None  # GraphCache, made on first use
        #: stage B's chunks replayed as CUDA graphs (the same switch; eager engines only); may be switched
        #: on a live engine
        self.stage_b_graphs = bool(self.is_cuda and not self.compiled and _env_flag(GRAPHS_ENV) is not False)
        self._graphs_b = None  # stage B's GraphCache, made on first use
        self._graphs_for = None  # the packed stage A its graphs were captured with
        self._scale_tensors: dict = {}  # length scale -> its float32 0-d tensor on the device (stage A graphs)
        if self.compiled or self.compiled_stage_a:
            import torch._dynamo

            # one graph per (batch rows, frames) family; do not fall back to eager after 8 shapes
            for name in ("recompile_limit", "cache_size_limit"):
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 64))
        if self.compiled_stage_a:
            self._stage_a = torch.compile(self.model.stage_a, dynamic=True)
        if self.compiled:
            try:
                self._stage_b = torch.compile(self._stage_b_pcm, mode="reduce-overhead" if self.is_cuda else None,
                                              dynamic=True)
            except Exception as exc:  # pragma: no cover - depends on the host's toolchain
                compile_error = f"{type(exc).__name__}: {exc}"
                self.compiled = False
        self.load_s = time.perf_counter() - t0
        # the fused kernels' Triton specializations, compiled in parallel now rather than one by one in the
        # first batch (on CUDA with a fused path; BOOKTTS_TORCH_PRECOMPILE, the precompile argument)
        self.precompile_s = 0.0
        self.precompile_report = None
        if self._resolve_precompile(precompile):
            from engines.torch_vits.precompile import precompile as compile_kernels

            with self._flags(benchmark=False):
                self.precompile_report = compile_kernels(self.kernel_launches(), self.device)
            self.precompile_s = self.precompile_report.seconds
        pre = self.precompile_report
        self.warmup_s = 0.0
        warmup = resolve_warmup(warmup, self.compiled)
        self.warmup_mode = ("shapes" if isinstance(warmup, list) else warmup) if self.is_cuda else "none"
        if self.is_cuda and warmup != "lazy":
            t1 = time.perf_counter()
            shapes = warmup if isinstance(warmup, list) else self.warmup_shapes(spec.max_batch)
            try:
                with self._flags(benchmark=self.autotune):
                    self._warm(shapes)
            except Exception as exc:
                if not self.compiled:
                    raise self._map_error(exc, "warm-up") from exc
                # A compiler failure must not take the worker down: fall back to eager.
                warnings.warn(f"torch.compile failed during warm-up, running eager: {exc!r}")
                compile_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                self.compiled = False
                self._stage_b = self._stage_b_pcm
            self.warmup_s = time.perf_counter() - t1
        self.info = EngineInfo(
            "torch", spec.precision, str(self.device), voice.sample_rate, spec.max_batch,
            {"weights": str(source), "compiled": self.compiled, "cuda_graphs": self.compiled and self.is_cuda,
             "channels_last": self.channels_last, "fused_resblocks": self.fused, "fused_flow": self.fused_flow,
             "compiled_stage_a": self.compiled_stage_a, "fast_stage_a": self.fast_stage_a,
             "stage_a_gemm": (None if not self.fast_stage_a else
                              f"triton-{self.model.stage_a_precision}" if self.model.stage_a_kernels
                              else "cublas-fp32"),
             "stage_a_graphs": self.stage_a_graphs, "stage_b_graphs": self.stage_b_graphs,
             "pipeline_groups": self.pipeline, "autotune": self.autotune, "warmup": self.warmup_mode,
             "torch": torch.__version__, "load_s": round(self.load_s, 3), "warmup_s": round(self.warmup_s, 3),
             "precompile": pre is not None, "precompile_s": round(self.precompile_s, 3),
             "precompile_kernels": pre.kernels if pre else None, "precompile_compiled": pre.compiled if pre else None,
             **({"precompile_error": pre.error} if pre is not None and pre.error else {}),
             **({"compile_error": compile_error} if compile_error else {})},
        )

    def _resolve_precompile(self, precompile: bool | None) -> bool:
        """Whether to compile the fused kernels' Triton specializations at construction
        (:mod:`engines.torch_vits.precompile`): the argument, else ``$BOOKTTS_TORCH_PRECOMPILE`` (``1``/``0``),
        else on; only ever on CUDA with a fused path and not under Triton's interpreter."""
        from engines.torch_vits.precompile import resolve_precompile

        try:
            on = resolve_precompile(precompile)
        except ValueError as exc:
            raise EngineUnavailable(str(exc)) from exc
        kernels = (self.is_cuda and (self.fused or self.fused_flow or self.model.stage_a_kernels)
                   and os.environ.get("TRITON_INTERPRET") != "1")
        return bool(kernels and on is not False)

    def _pipeline_groups(self) -> int:
        raw = os.environ.get(PIPELINE_ENV, "").strip()
        if not raw:
            return CUDA_PIPELINE_GROUPS if self.is_cuda else 1
        if not raw.isdigit() or int(raw) < 1:
            raise EngineUnavailable(f"{PIPELINE_ENV} must be a whole number of groups >= 1, not {raw!r}")
        return int(raw)

    def _resolve_fused(self, fused: bool | None, by_default: bool = True) -> bool:
        """Whether the decoder's resblocks run through the fused Triton kernel: the argument, else
        ``$BOOKTTS_TORCH_FUSED``, else (``by_default``: the NHWC layout was not refused) on CUDA at
        half precision when Triton and the voice allow it."""
        from engines.torch_vits import fused_conv

        if fused is None:
            fused = _env_flag(FUSED_ENV)
        fits = self.model.dec.fused_supported()
        if fused is None:
            return (by_default and self.is_cuda and self.dtype != self.torch.float32 and fused_conv.available()
                    and fits)
        if fused:
            self._require_kernel("decoder", FUSED_ENV, fits, "16-128 channels", fused_conv.available())
        return bool(fused)

    def _require_kernel(self, part: str, env: str, fits: bool, takes: str, triton_ok: bool) -> None:
        """One clear error when a fused kernel was asked for (``$env=1`` or the argument) but cannot run."""
        if not fits:
            raise EngineUnavailable(f"this voice's {part} does not fit the fused kernel (it takes {takes}); "
                                    f"unset {env}")
        if not triton_ok:
            raise EngineUnavailable(f"the fused {part} needs Triton (pip install triton); or set {env}=0")
        if not self.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise EngineUnavailable(f"the fused {part} runs on CUDA devices (on cpu only under Triton's "
                                    f"interpreter, TRITON_INTERPRET=1); unset {env} or use --device cuda:0")

    def _resolve_fused_flow(self) -> bool:
        """Whether the flow's WN layers run through the fused Triton kernel: ``$BOOKTTS_TORCH_FUSED_FLOW``,
        else whenever the decoder is fused (:meth:`_resolve_fused`)."""
        from engines.torch_vits import fused_wn

        fused = _env_flag(FUSED_FLOW_ENV)
        fits = self.model.flow.fused_supported()
        if fused is None:
            return bool(self.fused and fits and fused_wn.available())
        if fused:
            self._require_kernel("flow", FUSED_FLOW_ENV, fits, "mean-only couplings of 64-256 hidden channels",
                                 fused_wn.available())
        return bool(fused)

    def _stage_a_kernels(self) -> bool:
        """Whether the channels-last stage A's GEMMs run through the Triton kernel
        (:mod:`engines.torch_vits.fused_gemm`): ``$BOOKTTS_TORCH_STAGE_A_GEMM``, else on CUDA with Triton."""
        from engines.torch_vits import fused_gemm

        on = _env_flag(STAGE_A_GEMM_ENV)
        if on is None:
            return bool(self.fast_stage_a and self.is_cuda and fused_gemm.available())
        if on:
            if not self.fast_stage_a:
                raise EngineUnavailable(f"{STAGE_A_GEMM_ENV}=1 runs the channels-last stage A's GEMMs, which is off "
                                        f"({FAST_A_ENV}=0 or {COMPILE_A_ENV}=1); unset {STAGE_A_GEMM_ENV}")
            self._require_kernel("stage A", STAGE_A_GEMM_ENV, True, "", fused_gemm.available())
        return bool(on)

    def _resolve_stage_a_graphs(self) -> bool:
        """Whether stage A's chunks replay as CUDA graphs: ``$BOOKTTS_TORCH_GRAPHS``, else on CUDA when stage A
        is the channels-last path run eagerly (not compiled)."""
        on = _env_flag(GRAPHS_ENV)
        if on is None:
            return bool(self.is_cuda and self.fast_stage_a and not self.compiled_stage_a)
        if on:
            if not self.is_cuda:
                raise EngineUnavailable(f"CUDA graphs ({GRAPHS_ENV}=1) need a CUDA device, not {self.device}; "
                                        f"unset {GRAPHS_ENV} or use --device cuda:0")
            if not self.fast_stage_a:
                raise EngineUnavailable(f"{GRAPHS_ENV}=1 replays the channels-last stage A, which is off "
                                        f"({FAST_A_ENV}=0 or {COMPILE_A_ENV}=1); unset {GRAPHS_ENV}")
        return bool(on)

    # ------------------------------------------------------------------ weights
    @staticmethod
    def _load_weights(voice, weights_path):
        from engines import weights as W

        path = weights_path or os.environ.get(WEIGHTS_ENV) or None
        if path is None and str(voice.model_path).endswith(".safetensors"):
            path = voice.model_path
        if path is not None:
            state, hp, meta = W.read_weights(path)
            model_path = Path(voice.model_path)
            if model_path.suffix == ".onnx" and model_path.is_file() and meta.get("source_sha256"):
                if voice.model_sha256() != meta["source_sha256"]:
                    raise VoiceError(f"weights {path} were exported from another voice than {voice.name!r}; "
                                     f"export this voice's weights or unset {WEIGHTS_ENV}")
            if int(meta.get("sample_rate", voice.sample_rate)) != voice.sample_rate:
                raise VoiceError(f"weights {path} are for {meta.get('sample_rate')} Hz, the voice is "
                                 f"{voice.sample_rate} Hz; export this voice's weights")
            return state, hp, Path(path)
        state, hp = W.onnx_state_and_hparams(voice.model_path)
        return state, hp, Path(voice.model_path)

    # ------------------------------------------------------------------ stage B (compiled region)
    def _stage_b_pcm(self, z_p, frames):
        torch = self.torch
        mask = (torch.arange(z_p.shape[-1], device=z_p.device)[None, :] < frames[:, None]).unsqueeze(1).to(z_p.dtype)
        if self.fused_flow:  # z_p is this call's own (a temporary or a graph's static input): the flow may
            z = self.flow.reverse(z_p, mask, frames, overwrite=True)  # work in it if its layout allows
        else:
            z = self.flow.reverse(z_p, mask)  # float32 stream, half-precision dilated convolutions
        return self.dec((z * mask).to(self.dtype), frames, pcm_scale=MAX_WAV_VALUE)

    def chunk_rows(self, bucket: int) -> int:
        """Largest number of items of a chunk in this frame bucket."""
        return max(1, min(self.max_frames_per_chunk // bucket, max(1, self.spec.max_batch)))

    def padded_rows(self, n: int, bucket: int) -> int:
        """Rows stage B runs for a chunk of ``n`` items in this frame bucket (``n`` when not padding)."""
        return round_rows(n, self.chunk_rows(bucket)) if self.pad_rows else n

    def warmup_shapes(self, max_batch: int) -> list[tuple[int, int]]:
        """(padded rows, frames) of every stage-B shape a batch of up to ``max_batch`` items can
        produce on CUDA: for chunks of ``n <= m = min(chunk_rows(f), max_batch)`` items, every
        size of :func:`round_rows` below ``m``, and the one ``m`` itself pads to."""
        shapes = []
        for f in self.buckets:
            cap = self.chunk_rows(f)
            m = min(cap, max(1, max_batch))
            r = 1
            while r < m:
                shapes.append((r, f))
                r = round_rows(r + 1)
            shapes.append((round_rows(m, cap), f))
        return sorted(set(shapes))

    def kernel_launches(self, shapes=None):
        """The fused kernels' launches of stage B (:func:`engines.torch_vits.precompile.enumerate_launches`:
        a dry run of :meth:`_stage_b_pcm`, kernels left out) for ``shapes`` (default: every shape of
        :meth:`warmup_shapes` for ``spec.max_batch``), one list per frame count; then, when stage A's
        GEMMs run through their kernel, stage A's (:func:`~engines.torch_vits.precompile.enumerate_stage_a`)."""
        import itertools

        from engines.torch_vits.precompile import enumerate_launches, enumerate_prior, enumerate_stage_a

        shapes = self.warmup_shapes(self.spec.max_batch) if shapes is None else shapes
        c = self.hparams.inter_channels
        b = enumerate_launches(self._stage_b_pcm, shapes, c, self.device)
        if self.fused_prior:
            b = itertools.chain(b, enumerate_prior(c, self.device))
        return itertools.chain(b, enumerate_stage_a(self.model.stage_a, self.device)) if self.model.stage_a_kernels \
            else b

    def _warm(self, shapes) -> None:
        torch = self.torch
        c = self.hparams.inter_channels
        with torch.inference_mode():
            for rows, f in shapes:
                z = torch.randn(rows, c, f, device=self.device)
                fr = torch.full((rows,), f, device=self.device, dtype=torch.long)
                fr[-1] = max(1, f // 2)
                for _ in range(3 if self.compiled else 1):
                    if self.compiled:
                        torch.compiler.cudagraph_mark_step_begin()
                    self._stage_b(z, fr)
            torch.cuda.synchronize(self.device)

    def _flags(self, benchmark: bool = False):
        """cuDNN settings: autotuning only where shapes repeat (stage B on CUDA: bucket frames x
        :func:`round_rows` rows; stage A's shapes vary per batch and would be re-tuned every time); no
        TF32 (stage A is true fp32 at every precision, so durations do not depend on it)."""
        if not self.is_cuda:
            return contextlib.nullcontext()
        return self.torch.backends.cudnn.flags(enabled=True, benchmark=benchmark, deterministic=False,
                                               allow_tf32=False)

    # ------------------------------------------------------------------ errors
    def _map_error(self, exc: BaseException, where: str) -> EngineError:
        torch = self.torch
        if isinstance(exc, EngineError):
            return exc
        msg = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in msg.lower():
            return EngineOutOfMemory(f"torch ran out of memory on {self.device} in {where}; retry with a smaller batch")
        if isinstance(exc, MemoryError):
            return EngineOutOfMemory(f"host memory ran out in {where}; retry with a smaller batch")
        low = msg.lower()
        if any(s in low for s in ("cuda error", "cudnn", "cublas", "nccl", "device-side", "ecc error",
                                  "unspecified launch failure", "driver")):
            return TransientEngineError(f"torch on {self.device} failed in {where}: {msg}")
        return DeterministicEngineError(f"torch engine failed in {where}: {type(exc).__name__}: {msg}")

    # ------------------------------------------------------------------ synthesis
    def synthesize(self, batch: SynthesisBatch) -> SynthesisResult:
        batch.validate(self.n_vocab)
        t0 = time.perf_counter()
        try:
            packed, offsets, lengths, durations = self._synthesize(batch)
        except Exception as exc:
            raise self._map_error(exc, f"a batch of {len(batch)}") from exc
        return SynthesisResult(None, lengths, (time.perf_counter() - t0) * 1000.0, packed=packed, offsets=offsets,
                               durations=durations)

    def _synthesize(self, batch: SynthesisBatch):
        torch = self.torch
        dev = self.device
        sc = batch.scales
        seed = batch.seed if batch.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        gen = torch.Generator(device=dev)
        gen.manual_seed(int(seed))
        b, t = batch.phoneme_ids.shape
        c = self.hparams.inter_channels
        with torch.inference_mode():
            ids_all = torch.from_numpy(batch.phoneme_ids)
            lens_all = torch.from_numpy(batch.lengths)
            if self.is_cuda:
                ids_all = ids_all.pin_memory().to(dev, non_blocking=True)
                lens_all = lens_all.pin_memory().to(dev, non_blocking=True)
            # one duration-noise draw for the whole batch: item i's does not depend on the chunking
            dp_noise = torch.randn(b, 2, t, generator=gen, device=dev) * float(sc.noise_w)
            m_p = torch.zeros(b, c, t, device=dev)
            logs_p = torch.zeros(b, c, t, device=dev)
            durations = torch.zeros(b, t, device=dev)
            frames = torch.zeros(b, dtype=torch.long, device=dev)
            frames_host = np.zeros(b, dtype=np.int64)
            groups = self.pipeline_groups(self.stage_a_chunks(batch.lengths, t))
            # stage A of group g+1 runs on a side stream while stage B of group g runs on the main one
            side = self._side_stream() if self.is_cuda and len(groups) > 1 else None
            main = torch.cuda.current_stream(dev) if self.is_cuda else None
            if side is not None:
                side.wait_stream(main)

            def launch_a(group):
                """Queue stage A of a group (its chunks by phoneme length); returns its rows, their
                frame counts on their way to the host, and the event that says they have arrived."""
                ctx = torch.cuda.stream(side) if side is not None else contextlib.nullcontext()
                with ctx, self._flags(benchmark=False):
                    for rows, tc in group:
                        n = len(rows)
                        idx = torch.from_numpy(rows.astype(np.int64)).to(dev, non_blocking=True)
                        # rows past n are padding (CUDA graphs); the outputs may be a graph's static
                        # tensors: consumed here, on this stream, before the next chunk's replay
                        mp, lp, du, fr = self._run_stage_a(ids_all[idx, :tc], lens_all[idx], dp_noise[idx, :, :tc],
                                                           float(sc.length_scale))
                        m_p[idx, :, :tc] = mp[:n]
                        logs_p[idx, :, :tc] = lp[:n]
                        durations[idx, :tc] = du[:n]
                        frames[idx] = fr[:n]
                    rows_g = np.concatenate([r for r, _ in group]).astype(np.int64)
                    fr_g = frames[torch.from_numpy(rows_g).to(dev, non_blocking=True)]
                    if side is None:
                        return rows_g, fr_g.cpu(), None  # sync: stage B's shapes depend on it
                    host = torch.empty(len(rows_g), dtype=torch.long, pin_memory=True)
                    host.copy_(fr_g, non_blocking=True)
                    done = torch.cuda.Event()
                    done.record(side)
                    return rows_g, host, done

            queued = [launch_a(g) for g in groups[:2]]
            blocks = []  # (rows, frame bucket, int16 [n, f*hop] on the device)
            # packed result (SynthesisResult's packed layout): each chunk's [n, f*hop] block back to back
            # in one fresh host buffer (on CUDA pinned, from PyTorch's caching host allocator, filled by
            # async copies): one copy of the audio, not a [B, S] array padded to the longest item. With one
            # group on CUDA the batch's size is known before stage B, and each chunk's copy runs on a copy
            # stream while the next chunk computes; otherwise the copies follow the last chunk.
            copier = self._copy_stream() if self.is_cuda and len(groups) == 1 and self.copy_overlap else None
            host = None
            offsets = np.zeros(b, dtype=np.int64)
            off = 0
            for gi in range(len(groups)):
                rows_g, fr_host, done = queued.pop(0)
                if done is not None:
                    done.synchronize()  # only the side stream: stage B of earlier groups keeps running
                    main.wait_event(done)
                fh = fr_host.numpy().astype(np.int64)
                frames_host[rows_g] = fh
                # the prior noise of a group, drawn in group order: the groups depend only on the
                # batch's lengths, so the same batch and seed give the same noise
                eps = (torch.randn(len(rows_g), c, int(fh.max()), generator=gen, device=dev)
                       if sc.noise_scale != 0 else None)
                plan = self.stage_b_chunks(fh)
                if copier is not None:
                    host = torch.empty(sum(len(lo) * f * self.hop for lo, f in plan), dtype=torch.int16,
                                       pin_memory=True)
                with self._flags(benchmark=self.is_cuda and self.autotune):
                    for local, f in plan:
                        rows = rows_g[local]
                        pcm = self._run_chunk(rows, f, m_p, logs_p, durations, frames, eps, float(sc.noise_scale),
                                              eps_rows=local)
                        n = len(rows)
                        # compiled or stage B graphs: pcm is a graph's output, overwritten by a later replay
                        blk = pcm[:n].clone() if self.compiled or self.stage_b_graphs else pcm[:n]
                        blocks.append((rows, f, blk))  # kept until the copies are done
                        if copier is not None:
                            copier.wait_stream(main)
                            off = self._pack_block(host, off, offsets, rows, f, blk, copier)
                if gi + 2 < len(groups):
                    queued.append(launch_a(groups[gi + 2]))
            if host is None:
                host = torch.empty(sum(len(r) * f * self.hop for r, f, _ in blocks), dtype=torch.int16,
                                   pin_memory=self.is_cuda)
                for rows, f, blk in blocks:
                    off = self._pack_block(host, off, offsets, rows, f, blk, None)
            if self.is_cuda:
                main.synchronize()
                if copier is not None:
                    copier.synchronize()
        # per-phoneme durations in samples (the predictor's ceiled frames x hop): the manifest's optional
        # phoneme_durations_s; one small [B, T] copy, after the synchronisation above
        dur = (durations * self.hop).cpu().numpy().astype(np.float32)
        return host.numpy(), offsets, frames_host * self.hop, dur  # the buffer is this call's own

    def stage_a_rows(self, n: int, tc: int) -> int:
        """Rows stage A runs for a chunk of ``n`` items ``tc`` ids wide when padding
        (:attr:`pad_stage_a`): ``n`` rounded up to a multiple of :data:`STAGE_A_ROW_STEP`, capped at the
        width's chunk size (``max_phonemes_per_chunk // tc``, at least ``n``), so the shapes repeat
        across batches. Stage A's work grows with its rows: :func:`round_rows`' coarser sizes (up to
        a third more rows) cost more kernel time (docs/PERFORMANCE.md, "Figures behind the engine's defaults")."""
        step = STAGE_A_ROW_STEP
        return min(-(-n // step) * step, max(n, self.max_phonemes_per_chunk // tc))

    def _run_stage_a(self, ids, lengths, noise, length_scale: float):
        """Stage A on one chunk (``ids`` ``[n, tc]``): ``m_p``, ``logs_p``, durations and frames whose first
        ``n`` rows are the chunk's items (rows past them are padding). With CUDA graphs the outputs
        are a graph's static tensors, valid until the next chunk's replay: the caller consumes them
        (in stream order) first."""
        n, tc = ids.shape
        pad = self.stage_a_graphs if self.pad_stage_a is None else self.pad_stage_a
        if pad:
            rows = self.stage_a_rows(n, tc)
            if rows > n:
                ids, lengths, noise = pad_stage_a_inputs(ids, lengths, noise, rows)
        graphs = self._stage_a_graph_cache()
        if graphs is None:
            return self._stage_a(ids, lengths, noise, length_scale)
        # the length scale is an input of the graph (a float32 scalar on the device, the value the float
        # argument is cast to in the product), so one graph serves jobs of every speaking rate
        scale = self._scale_tensor(length_scale)
        return graphs((ids.shape[0], tc), (ids, lengths, noise, scale))

    def _scale_tensor(self, value: float):
        """``value`` as a float32 0-d tensor on the device (cached per value)."""
        t = self._scale_tensors.get(value)
        if t is None:
            t = self._scale_tensors[value] = self.torch.tensor(value, dtype=self.torch.float32, device=self.device)
        return t

    def _stage_a_graph_cache(self):
        """The :class:`~engines.torch_vits.graphs.GraphCache` of stage A when :attr:`stage_a_graphs` is on
        (made on first use; emptied when stage A's weights were re-packed since its captures), else None."""
        if not self.stage_a_graphs:
            return None
        if self._graphs is None:  # (GraphCache refuses a CPU device; the switch never gets here on one)
            from engines.torch_vits.graphs import GraphCache

            # (GraphCache's default: a shape's second call captures; capturing on first sight costs more
            # wherever shapes do not recur, as across jobs of different length scales: docs/PERFORMANCE.md)
            self._graphs = GraphCache(self.model.stage_a, self.device, name="stage A", max_graphs=MAX_GRAPHS_PER_STAGE)
        packed = self.model.packed_stage_a
        if self._graphs_for is not packed:  # graphs read the packed weights they were captured with
            self._graphs.reset()
            self._graphs_for = packed
        return self._graphs

    def stage_a_graph_stats(self) -> dict:
        """Stage A's CUDA graphs so far: ``on`` (switched on and no capture failed), ``graphs`` held, the
        counters of :class:`~engines.torch_vits.graphs.GraphStats` (eager first sights, captures,
        replays, bypassed calls), and ``error`` when a failed capture turned them off."""
        from engines.torch_vits.graphs import GraphStats

        g = self._graphs
        out = {"on": bool(self.stage_a_graphs and (g is None or g.enabled)),
               "graphs": len(g) if g is not None else 0, **(g.stats if g is not None else GraphStats()).as_dict()}
        if g is not None and g.error:
            out["error"] = g.error
        return out

    def pipeline_groups(self, chunks: list) -> list[list]:
        """Stage A's chunks (sorted by length) cut into at most :attr:`pipeline` consecutive groups of
        about equal padded ids. On CUDA stage A of group ``g+1`` overlaps stage B of group ``g``."""
        n = max(1, min(self.pipeline, len(chunks)))
        if n == 1:
            return [list(chunks)]
        sizes = np.array([len(r) * tc for r, tc in chunks], dtype=np.float64)
        starts = np.cumsum(sizes) - sizes  # padded ids before each chunk
        bounds = [0]
        for k in range(1, n):  # the chunk start nearest to k/n of the ids, keeping every group non-empty
            c = int(np.argmin(np.abs(starts - sizes.sum() * k / n)))
            bounds.append(min(max(c, bounds[-1] + 1), len(chunks) - (n - k)))
        bounds.append(len(chunks))
        return [list(chunks[a:z]) for a, z in zip(bounds[:-1], bounds[1:])]

    def _pack_block(self, host, off: int, offsets, rows, f: int, blk, stream) -> int:
        """Copy one chunk's PCM ``[n, f*hop]`` into ``host`` at ``off`` (asynchronously on CUDA, on ``stream``
        when given), record its items' offsets; returns the next offset."""
        n, w = len(rows), f * self.hop
        ctx = self.torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        with ctx:
            host[off:off + n * w].view(n, w).copy_(blk, non_blocking=self.is_cuda)
        offsets[rows] = off + w * np.arange(n)
        return off + n * w

    def _copy_stream(self):
        if self._copier is None:
            self._copier = self.torch.cuda.Stream(self.device)
        return self._copier

    def _side_stream(self):
        if self._stream is None:
            self._stream = self.torch.cuda.Stream(self.device)
        return self._stream

    def stage_a_chunks(self, lengths: np.ndarray, t: int) -> list[tuple[np.ndarray, int]]:
        """Stage A's chunks of a batch padded to ``t`` ids: (item indices, padded phoneme width), items
        sorted by length, widths rounded up to multiples of 32 (little padding) but at most ``t``, at
        most ``max_phonemes_per_chunk`` ids each."""
        b = len(lengths)
        order = np.argsort(lengths, kind="stable")
        out, s0 = [], 0
        while s0 < b:
            tc = min(t, -(-int(lengths[order[s0]]) // 32) * 32)
            e0 = s0
            while e0 < b and lengths[order[e0]] <= tc and (e0 - s0 + 1) * tc <= self.max_phonemes_per_chunk:
                e0 += 1
            e0 = max(e0, s0 + 1)
            out.append((order[s0:e0], max(tc, int(lengths[order[e0 - 1]]))))
            s0 = e0
        return out

    def stage_b_chunks(self, frames_host: np.ndarray) -> list[tuple[list[int], int]]:
        """Stage B's chunks: (item indices, frame bucket), at most :meth:`chunk_rows` items each."""
        chunks = []
        for f, items in self._bucketize(frames_host).items():
            cap = self.chunk_rows(f)
            chunks.extend((items[s:s + cap], f) for s in range(0, len(items), cap))
        return chunks

    def _bucketize(self, frames_host) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        for i in np.argsort(frames_host, kind="stable"):
            groups.setdefault(bucket_for(int(frames_host[i]), self.buckets), []).append(int(i))
        return groups

    def _run_chunk(self, rows, f, m_p, logs_p, durations, frames, eps, noise_scale, eps_rows):
        """Stage B on one chunk: int16 PCM ``[padded rows, f*hop]`` on the device (rows past ``len(rows)``
        are padding). ``eps``: the group's prior noise ``[*, C, frames]``, whose rows ``eps_rows`` are
        the chunk's items."""
        torch = self.torch
        n = len(rows)
        idx = torch.as_tensor(np.asarray(rows, dtype=np.int64)).to(self.device, non_blocking=True)
        e_rows = (torch.as_tensor(np.asarray(eps_rows, dtype=np.int64)).to(self.device, non_blocking=True)
                  if eps is not None else None)
        padded = self.padded_rows(n, f)  # few shapes: graphs and cuDNN autotuning repeat
        fr = frames[idx]
        if padded > n:
            fr = torch.cat([fr, fr.new_zeros(padded - n)])
        if self.fused_prior:  # z_p as [rows, frames, C] (the fused flow's layout), padding rows 0, in one kernel
            from engines.torch_vits.fused_prior import sample_prior

            z = sample_prior(m_p, logs_p, durations, idx, f, padded, eps, e_rows, noise_scale).transpose(1, 2)
        else:
            z, logs = self.model.expand_prior(m_p[idx], logs_p[idx], durations[idx], f)
            if eps is not None:
                e = eps[e_rows]
                if e.shape[-1] < f:
                    e = torch.nn.functional.pad(e, (0, f - e.shape[-1]))
                else:
                    e = e[..., :f]
                z = z + e * torch.exp(logs) * noise_scale
            if padded > n:
                z = torch.cat([z, z.new_zeros(padded - n, *z.shape[1:])])
        if self.compiled:
            torch.compiler.cudagraph_mark_step_begin()
        if self.stage_b_graphs:
            return self._stage_b_graph_cache()((padded, f), (z, fr))
        return self._stage_b(z, fr)

    def _stage_b_graph_cache(self):
        """Stage B's :class:`~engines.torch_vits.graphs.GraphCache` (made on first use)."""
        if self._graphs_b is None:
            from engines.torch_vits.graphs import GraphCache

            self._graphs_b = GraphCache(self._stage_b_pcm, self.device, name="stage B",
                                        max_graphs=MAX_GRAPHS_PER_STAGE)
        return self._graphs_b

    def reset_graphs(self) -> None:
        """Drop the CUDA graphs of both stages (they are captured again as shapes recur): after
        changing a Python-level kernel setting that a capture bakes in, such as a tile size."""
        for g in (self._graphs, self._graphs_b):
            if g is not None:
                g.reset()
