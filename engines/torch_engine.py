"""PyTorch backend: the Piper VITS voice ported to PyTorch, batched, bucketed, compiled on CUDA.

How a batch runs (see :mod:`engines.torch_vits.model`):

1. Phoneme ids go to the device; **stage A** (text encoder + stochastic duration
   predictor, always float32) gives each item's integer durations and frame count.
   The frame counts come back to the host (one small sync). On CUDA stage A runs channels-last
   (:mod:`engines.torch_vits.fast_stage_a`: GEMMs on ``[B, T, C]``, far fewer kernels, the same
   function in fp32; on CPU the modules' own channel-first forward unless the ``fast_stage_a``
   argument asks for it), and its GEMMs run on the tensor cores in near-fp32 precision through one
   Triton kernel with the layer norms, residuals, activations and masks in its epilogue
   (:mod:`engines.torch_vits.fused_gemm`; option ``stage_a_gemm``).
2. Items are sorted by frame count and grouped into **frame buckets**
   (:data:`DEFAULT_BUCKETS`: multiples of 64 frames up to 512, of 128 up to 1024,
   of 256 up to 2048, of 512 up to 4096, then of 1024). A bucket is split into
   chunks of at most ``max_frames_per_chunk // bucket`` items (:meth:`TorchEngine.chunk_rows`).
   On CUDA a chunk's batch axis is padded by :func:`round_rows` to the next of
   1, 2, 3, 4, 6, 8, 12, 16, 24, ... (``2^k`` and ``3*2^k``, less than 50% padding),
   never past the bucket's chunk size, so stage B only ever sees a bounded set of
   shapes (:meth:`TorchEngine.warmup_shapes`): cuDNN autotunes each once (unless the
   workload is too short to pay for it: ``EngineSpec.workload_s``, option ``autotune``),
   and, when the engine is compiled (``torch.compile``, mode ``reduce-overhead``: Inductor
   kernels replayed as CUDA graphs), each is recorded once. Stage A is chunked by phoneme
   length (multiples of 32).
3. **Stage B** (flow + HiFi-GAN at the engine's precision) turns each chunk's prior
   ``z_p = m + eps * exp(logs) * noise_scale`` into int16 PCM on the device. On CUDA at
   fp16/bf16 the decoder runs through fused Triton kernels (:mod:`engines.torch_vits.fused_conv`;
   option ``fused_decoder``: resblocks, upsampling, and the last layer with the int16
   conversion; only ``conv_pre`` stays cuDNN), and the engine then
   runs eager by default (it measured faster than compiled with the kernel inside).
   With the fused decoder (by default; option ``fused_flow``) the flow's WaveNet layers
   also run through a fused Triton kernel (:mod:`engines.torch_vits.fused_wn`: dilated
   convolution in fp16/bf16, gate, near-float32 1x1 convolution and residual/skip sums in one
   pass; the coupling stream stays float32).
4. The result is :class:`~engines.base.SynthesisResult`'s packed layout: each chunk's
   ``[rows, frames * hop]`` block back to back in one freshly allocated host buffer
   (pinned on CUDA, filled by asynchronous copies; PyTorch's caching host allocator
   recycles the pinned blocks of freed results, and no result is ever overwritten by a
   later call), with each item's offset. No ``[B, S]`` array padded to the longest item
   is made unless a caller asks for ``result.audio``.

Options (:class:`engines.torch_options.TorchOptions`, from ``EngineSpec.options``, else from the
``BOOKTTS_TORCH_*`` environment): resolved once at construction into :attr:`TorchEngine.resolved`
(a :class:`Resolved`, also in ``info.extra``); the constructor's keyword arguments (``compile``,
``fused``, ``warmup``, ``precompile``, ``fast_stage_a``, ``channels_last``) win over them, for tests.

Warm-up (CUDA only; ``warmup`` argument, else option ``warmup``):

* ``"full"``: every stage-B shape a batch of up to ``spec.max_batch`` items can
  produce is run at construction (cuDNN autotuning; CUDA graph recording when
  compiled). The default for compiled engines; minutes for large ``max_batch``.
* ``"lazy"``: nothing at construction; each shape is autotuned (and, compiled,
  recorded) the first time a batch uses it. The default for eager engines
  (``compile=False``): a one-off ``cli.py run`` only pays for the shapes it uses.
* a list of ``(rows, frames)`` shapes: those only.

``True`` means ``"full"`` and ``False`` ``"lazy"``. ``info.extra["warmup"]`` says
which mode the engine was built with (``"none"`` on CPU, where nothing is warmed).

Precompile (CUDA with a fused path; ``precompile`` argument, else option ``precompile``, on by
default): before any warm-up, the engine compiles every Triton
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

CUDA graphs of stage A (option ``cuda_graphs``; default on CUDA, where stage A runs channels-last):
stage A launches some 300 small kernels per chunk, and a fast GPU outruns the host that launches
them. Each chunk's rows are
then padded (:meth:`TorchEngine.stage_a_rows`: to a multiple of :data:`STAGE_A_ROW_STEP` rows, at
most the width's chunk size; padding rows have id 0, length 1 and zero noise, and their outputs are
dropped), so chunk shapes repeat across batches, and a chunk runs through
:class:`~engines.torch_vits.graphs.GraphCache` keyed by (padded rows, width, length scale): eager
the first time a shape is seen, captured the second, replayed after that. Every op of stage A
treats each row on its own (per-row GEMMs, attention per item and head, masks and sums per row),
so a real row's outputs do not depend on the padding rows. A failed capture warns once and stage A runs eagerly from then on
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
``[B, 2, T]`` draw; the prior noise is one ``[B, C, max_frames]`` draw, so the noise does not
depend on the frame bucketing.

Weights come from, in this order: the ``weights_path`` argument, the voice's own file when it is a
``.safetensors`` export (:func:`core.voice.voice_from_weights`), else the
voice's ONNX file (needs the ``onnx`` package).
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engines.base import DEFAULT_MAX_PHONEMES, MAX_WAV_VALUE, EngineInfo, SynthesisBatch, SynthesisResult
from engines.spec import EngineSpec
from engines.torch_options import ENV as OPTION_ENV
from engines.torch_options import TorchOptions
from core import settings

from core.errors import (
    DeterministicEngineError,
    EngineError,
    EngineOutOfMemory,
    EngineUnavailable,
    TransientEngineError,
    VoiceError,
)

#: Below this much audio (EngineSpec.workload_s) the engine does not autotune: tuning each new shape
#: costs seconds that only a long workload wins back in faster batches (the break-even is about
#: 19 hours of audio: docs/PERFORMANCE.md, "Figures behind the engine's defaults").
AUTOTUNE_MIN_WORKLOAD_S = 20 * 3600.0
WARMUP_MODES = ("full", "lazy")
#: At most this many CUDA graphs per stage; chunks of a new shape past that run eagerly. Each graph keeps
#: its inputs and outputs in device memory (a full stage-A chunk's about 100 MB): a long-lived worker
#: would otherwise collect a graph for every shape it ever meets. The benchmark batch of 1024 sentences
#: uses 13 stage-A and 31 stage-B shapes (10.2 GB reserved for both: docs/PERFORMANCE.md); the cap itself has not
#: been measured against memory on a GPU.
MAX_GRAPHS_PER_STAGE = 128
#: Stage A's chunks are padded to a multiple of this many rows when they run as CUDA graphs (each
#: shape a graph; TorchEngine.stage_a_rows).
STAGE_A_ROW_STEP = 8
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


def resolve_warmup(warmup, compiled: bool, option: str = "auto"):
    """The warm-up mode: ``"full"``, ``"lazy"`` or a list of shapes (see the module docstring): the
    argument, else the option (``full``/``lazy``), else full when compiled and lazy when eager."""
    if warmup is None:
        warmup = option if option != "auto" else ("full" if compiled else "lazy")
    if warmup is True:
        return "full"
    if warmup is False:
        return "lazy"
    if isinstance(warmup, list):
        return warmup
    if warmup not in WARMUP_MODES:
        raise ValueError(f"warmup must be 'full', 'lazy', True, False or a list of shapes, not {warmup!r}")
    return warmup


def _switch(value: bool | None) -> str | None:
    """A constructor argument as an option value (None: not given)."""
    return None if value is None else "on" if value else "off"


def _import_torch():
    try:
        import torch
    except ImportError as exc:
        raise EngineUnavailable("the torch engine needs PyTorch; pip install torch (or use --engine onnx)") from exc
    return torch


@dataclass(frozen=True)
class Resolved:
    """What the engine's options came to on its device (one record; :meth:`as_extra` feeds ``info.extra``)."""

    fused: bool
    """The decoder's resblocks and upsampling through the fused Triton kernels."""
    channels_last: bool
    """The decoder in the NHWC layout (implied by ``fused``)."""
    fused_flow: bool
    """The flow's WaveNet layers through the fused Triton kernel."""
    fast_stage_a: bool
    """Stage A channels-last (:mod:`engines.torch_vits.fast_stage_a`)."""
    stage_a_kernels: bool
    """Stage A's GEMMs through the Triton kernel (else cuBLAS fp32)."""
    compiled: bool
    """Stage B through ``torch.compile`` (asked for; a compiler failure turns it off later)."""
    autotune: bool
    """cuDNN autotuning of stage B's shapes."""
    stage_a_graphs: bool
    """Stage A's chunks replayed as CUDA graphs."""
    stage_b_graphs: bool
    """An eager stage B's chunks replayed as CUDA graphs."""


class TorchEngine:
    """The PyTorch port of a Piper VITS voice. Text-blind; see the module docstring.

    It does not know where its options came from (flags, the environment) or what batches it will
    get: it resolves its options once for its device, loads the weights, and warms up.

    ``warmup`` (CUDA only): ``"full"`` runs every stage-B shape at construction, ``"lazy"`` none
    (each is autotuned on first use), a list of ``(rows, frames)`` only those; None (default): the
    ``warmup`` option, else full when compiled and lazy when eager.
    """

    def __init__(self, voice, spec: EngineSpec | None = None, *, weights_path=None, compile: bool | None = None,
                 warmup: bool | str | list | None = None, buckets: list[int] | None = None,
                 max_frames_per_chunk: int | None = None, max_phonemes_per_chunk: int = 65536,
                 channels_last: bool | None = None, fused: bool | None = None,
                 fast_stage_a: bool | None = None, precompile: bool | None = None,
                 allow_cpu_half: bool = False) -> None:
        spec = spec or EngineSpec(name="torch")
        self.torch = _import_torch()
        self.spec = spec
        self.voice = voice
        options = spec.options if spec.options is not None else TorchOptions.from_env()
        #: the options, with the constructor's arguments applied over them
        self.options = options.changed(compile=_switch(compile), fused_decoder=_switch(fused),
                                       precompile=_switch(precompile))
        self._init_device(spec, allow_cpu_half)
        t0 = time.perf_counter()
        source = self._load_model(voice, weights_path)
        self.resolved = self._resolve(self.options, channels_last=channels_last, fast_stage_a=fast_stage_a)
        self._place_stage_b(self.resolved)
        self._init_runtime(buckets, max_frames_per_chunk, max_phonemes_per_chunk)
        compile_error = self._build_stage_b()
        self.load_s = time.perf_counter() - t0
        self._precompile()
        compile_error = self._warm_up(warmup) or compile_error
        self.info = EngineInfo("torch", spec.precision, str(self.device), voice.sample_rate, spec.max_batch,
                               self._info_extra(source, compile_error), per_item_scales=True)

    # ------------------------------------------------------------------ construction steps
    def _init_device(self, spec: EngineSpec, allow_cpu_half: bool) -> None:
        """The device and the compute dtype of stage B; one clear error for what this host cannot do."""
        torch = self.torch
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

    def _load_model(self, voice, weights_path) -> Path:
        """The voice's weights into the float32 model on the device; returns where they came from."""
        torch = self.torch
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
        self.hop = self.hparams.hop_length
        self.n_vocab = self.hparams.n_vocab
        return source

    def _resolve(self, opts: TorchOptions, *, channels_last: bool | None = None,
                 fast_stage_a: bool | None = None) -> Resolved:
        """The options on this device, precision and voice (see :class:`Resolved`); an option switched
        on that cannot run here is one :class:`EngineUnavailable`."""
        half = self.dtype != self.torch.float32
        fused = self._resolve_fused(opts.flag("fused_decoder"), by_default=channels_last is not False)
        fused_flow = self._resolve_fused_flow(opts.flag("fused_flow"), fused)
        compile = opts.flag("compile")
        # default: compile on CUDA, except with the fused decoder, which runs faster eager (docs/PERFORMANCE.md)
        compiled = bool(self.is_cuda and not fused if compile is None else compile)
        autotune = opts.flag("autotune")
        if autotune is None:
            autotune = self.spec.workload_s is None or self.spec.workload_s >= AUTOTUNE_MIN_WORKLOAD_S
        fast = bool(self.is_cuda if fast_stage_a is None else fast_stage_a)
        graphs = opts.flag("cuda_graphs")
        return Resolved(
            fused=fused,
            channels_last=fused or bool(channels_last if channels_last is not None else self.is_cuda and half),
            fused_flow=fused_flow,
            fast_stage_a=fast,
            stage_a_kernels=self._resolve_stage_a_kernels(opts.flag("stage_a_gemm"), fast),
            compiled=compiled,
            autotune=bool(autotune),
            stage_a_graphs=self._resolve_stage_a_graphs(graphs, fast),
            stage_b_graphs=bool(self.is_cuda and not compiled and graphs is not False),
        )

    def _place_stage_b(self, r: Resolved) -> None:
        """Stage B at the engine's precision and layout (its own copies of flow and decoder where they
        differ from stage A's float32 model), and stage A on its path."""
        import copy

        torch = self.torch
        with torch.no_grad():
            if self.dtype == torch.float32:
                self.flow, self.dec = self.model.flow, self.model.dec
            else:
                from engines.torch_vits.modules import mixed_precision_flow

                self.flow = mixed_precision_flow(copy.deepcopy(self.model.flow), self.dtype)
                self.dec = copy.deepcopy(self.model.dec).to(self.dtype)
            if r.channels_last and self.dec is self.model.dec:
                self.dec = copy.deepcopy(self.model.dec)  # the layout change must not touch stage A's model
            if r.fused:
                self.dec.use_fused_resblocks()
            elif r.channels_last:
                self.dec.use_channels_last()
            if r.fused_flow:
                if self.flow is self.model.flow:
                    self.flow = copy.deepcopy(self.model.flow)  # the model's own flow stays plain
                self.flow.use_fused()
        self.fused, self.channels_last, self.fused_flow = r.fused, r.channels_last, r.fused_flow
        #: with the fused flow, stage B's input is made by one kernel (:mod:`engines.torch_vits.fused_prior`)
        self.fused_prior = r.fused_flow
        self.fast_stage_a = r.fast_stage_a
        self.model.use_fast_stage_a(r.fast_stage_a, kernels=r.stage_a_kernels)
        self._stage_a = self.model.stage_a
        self.compiled, self.autotune = r.compiled, r.autotune
        self.stage_a_graphs, self.stage_b_graphs = r.stage_a_graphs, r.stage_b_graphs

    def _init_runtime(self, buckets, max_frames_per_chunk, max_phonemes_per_chunk) -> None:
        """Chunking and the per-batch state: buckets, chunk budgets, streams, graph caches."""
        self.buckets = sorted(buckets or DEFAULT_BUCKETS)
        self.max_frames_per_chunk = int(max_frames_per_chunk or (131072 if self.is_cuda else 8192))
        self.max_phonemes_per_chunk = int(max_phonemes_per_chunk)
        #: pad a chunk's rows with :func:`round_rows` (CUDA: few shapes for autotuning and CUDA graphs)
        self.pad_rows = self.is_cuda
        self._copier = None  # the device-to-host copy stream (CUDA)
        #: Set by the caller (jobs.loudness_stats.TorchStats): per chunk of stage B, ``device(pcm, lengths)``
        #: queues statistics of the items' audio on the device, ``host(...)`` reads them after the
        #: synchronisation; they come back as ``SynthesisResult.stats``.
        self.item_stats = None
        self._graphs = None  # stage A's GraphCache, made on first use
        self._graphs_b = None  # stage B's GraphCache, made on first use
        self._graphs_for = None  # the packed stage A its graphs were captured with

    def _build_stage_b(self) -> str | None:
        """``torch.compile`` of stage B when :attr:`compiled`; returns the compiler's error, if it failed."""
        torch = self.torch
        self._stage_b = self._stage_b_pcm
        if not self.compiled:
            return None
        import torch._dynamo

        # one graph per (batch rows, frames) family; do not fall back to eager after 8 shapes
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), 64))
        try:
            self._stage_b = torch.compile(self._stage_b_pcm, mode="reduce-overhead" if self.is_cuda else None,
                                          dynamic=True)
        except Exception as exc:  # pragma: no cover - depends on the host's toolchain
            self.compiled = False
            return f"{type(exc).__name__}: {exc}"
        return None

    def _precompile(self) -> None:
        """The fused kernels' Triton specializations, compiled in parallel now rather than one by one in
        the first batch (on CUDA with a fused path, unless the ``precompile`` option is off)."""
        self.precompile_s = 0.0
        self.precompile_report = None
        if self._resolve_precompile(self.options.flag("precompile")):
            from engines.torch_vits.precompile import precompile as compile_kernels

            with self._flags(benchmark=False):
                self.precompile_report = compile_kernels(self.kernel_launches(), self.device)
            self.precompile_s = self.precompile_report.seconds

    def _warm_up(self, warmup) -> str | None:
        """Run the warm-up shapes (CUDA); a compiler failure falls back to eager and is returned."""
        self.warmup_s = 0.0
        mode = resolve_warmup(warmup, self.compiled, self.options.warmup)
        self.warmup_mode = ("shapes" if isinstance(mode, list) else mode) if self.is_cuda else "none"
        if not self.is_cuda or mode == "lazy":
            return None
        error = None
        t1 = time.perf_counter()
        shapes = mode if isinstance(mode, list) else self.warmup_shapes(self.spec.max_batch)
        try:
            with self._flags(benchmark=self.autotune):
                self._warm(shapes)
        except Exception as exc:
            if not self.compiled:
                raise self._map_error(exc, "warm-up") from exc
            # A compiler failure must not take the worker down: fall back to eager.
            warnings.warn(f"torch.compile failed during warm-up, running eager: {exc!r}")
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.compiled = False
            self._stage_b = self._stage_b_pcm
        self.warmup_s = time.perf_counter() - t1
        return error

    def _info_extra(self, source: Path, compile_error: str | None) -> dict:
        pre = self.precompile_report
        return {"weights": str(source), "compiled": self.compiled, "cuda_graphs": self.compiled and self.is_cuda,
                "channels_last": self.channels_last, "fused_resblocks": self.fused, "fused_flow": self.fused_flow,
                "fast_stage_a": self.fast_stage_a,
                "stage_a_gemm": (None if not self.fast_stage_a else
                                 f"triton-{self.model.stage_a_precision}" if self.model.stage_a_kernels
                                 else "cublas-fp32"),
                "stage_a_graphs": self.stage_a_graphs, "stage_b_graphs": self.stage_b_graphs,
                "autotune": self.autotune, "warmup": self.warmup_mode, "options": self.options.to_dict(),
                "torch": self.torch.__version__, "load_s": round(self.load_s, 3), "warmup_s": round(self.warmup_s, 3),
                "precompile": pre is not None, "precompile_s": round(self.precompile_s, 3),
                "precompile_kernels": pre.kernels if pre else None,
                "precompile_compiled": pre.compiled if pre else None,
                **({"precompile_error": pre.error} if pre is not None and pre.error else {}),
                **({"compile_error": compile_error} if compile_error else {})}

    # ------------------------------------------------------------------ option resolution
    def _resolve_precompile(self, on: bool | None) -> bool:
        """Whether to compile the fused kernels' Triton specializations at construction
        (:mod:`engines.torch_vits.precompile`): ``on`` (the option), None meaning on; only ever on CUDA
        with a fused path and not under Triton's interpreter."""
        kernels = (self.is_cuda and (self.fused or self.fused_flow or self.model.stage_a_kernels)
                   and settings.get("TRITON_INTERPRET") != "1")
        return bool(kernels and on is not False)

    def _resolve_fused(self, fused: bool | None, by_default: bool = True) -> bool:
        """Whether the decoder's resblocks run through the fused Triton kernel: ``fused`` (the option or
        argument), else (``by_default``: the NHWC layout was not refused) on CUDA at half precision when
        Triton and the voice allow it."""
        from engines.torch_vits import fused_conv

        fits = self.model.dec.fused_supported()
        if fused is None:
            return (by_default and self.is_cuda and self.dtype != self.torch.float32 and fused_conv.available()
                    and fits)
        if fused:
            self._require_kernel("decoder", "fused_decoder", fits, "16-128 channels", fused_conv.available())
        return bool(fused)

    def _require_kernel(self, part: str, option: str, fits: bool, takes: str, triton_ok: bool) -> None:
        """One clear error when a fused kernel was asked for (the option on) but cannot run."""
        how = f"leave option {option} at auto (unset {OPTION_ENV[option]})"
        if not fits:
            raise EngineUnavailable(f"this voice's {part} does not fit the fused kernel (it takes {takes}); {how}")
        if not triton_ok:
            raise EngineUnavailable(f"the fused {part} needs Triton (pip install triton); or switch it off "
                                    f"(--kernels off, or {OPTION_ENV[option]}=0)")
        if not self.is_cuda and settings.get("TRITON_INTERPRET") != "1":
            raise EngineUnavailable(f"the fused {part} runs on CUDA devices (on cpu only under Triton's "
                                    f"interpreter, TRITON_INTERPRET=1); {how} or use --device cuda:0")

    def _resolve_fused_flow(self, fused: bool | None, decoder_fused: bool) -> bool:
        """Whether the flow's WN layers run through the fused Triton kernel: ``fused`` (the option), else
        whenever the decoder is fused."""
        from engines.torch_vits import fused_wn

        fits = self.model.flow.fused_supported()
        if fused is None:
            return bool(decoder_fused and fits and fused_wn.available())
        if fused:
            self._require_kernel("flow", "fused_flow", fits, "mean-only couplings of 64-256 hidden channels",
                                 fused_wn.available())
        return bool(fused)

    def _resolve_stage_a_kernels(self, on: bool | None, fast_stage_a: bool) -> bool:
        """Whether the channels-last stage A's GEMMs run through the Triton kernel
        (:mod:`engines.torch_vits.fused_gemm`): ``on`` (the option), else on CUDA with Triton."""
        from engines.torch_vits import fused_gemm

        if on is None:
            return bool(fast_stage_a and self.is_cuda and fused_gemm.available())
        if on:
            if not fast_stage_a:
                raise EngineUnavailable("option stage_a_gemm runs the channels-last stage A's GEMMs, which is off "
                                        "(fast_stage_a=False); leave stage_a_gemm at auto")
            self._require_kernel("stage A", "stage_a_gemm", True, "", fused_gemm.available())
        return bool(on)

    def _resolve_stage_a_graphs(self, on: bool | None, fast_stage_a: bool) -> bool:
        """Whether stage A's chunks replay as CUDA graphs: ``on`` (the option), else on CUDA when stage A
        runs channels-last."""
        if on is None:
            return bool(self.is_cuda and fast_stage_a)
        if on:
            if not self.is_cuda:
                raise EngineUnavailable(f"CUDA graphs (--cuda-graphs on, {OPTION_ENV['cuda_graphs']}=1) need a CUDA "
                                        f"device, not {self.device}; leave them at auto or use --device cuda:0")
            if not fast_stage_a:
                raise EngineUnavailable("CUDA graphs replay the channels-last stage A, which is off "
                                        "(fast_stage_a=False); leave cuda_graphs at auto")
        return bool(on)

    # ------------------------------------------------------------------ weights
    @staticmethod
    def _load_weights(voice, weights_path):
        from engines.tools import weights as W

        path = weights_path or None
        if path is None and str(voice.model_path).endswith(".safetensors"):
            path = voice.model_path
        if path is not None:
            state, hp, meta = W.read_weights(path)
            model_path = Path(voice.model_path)
            if model_path.suffix == ".onnx" and model_path.is_file() and meta.get("source_sha256"):
                if voice.model_sha256() != meta["source_sha256"]:
                    raise VoiceError(f"weights {path} were exported from another voice than {voice.name!r}; "
                                     f"export this voice's weights")
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
            packed, offsets, lengths, durations, stats = self._synthesize(batch)
        except Exception as exc:
            raise self._map_error(exc, f"a batch of {len(batch)}") from exc
        return SynthesisResult(None, lengths, (time.perf_counter() - t0) * 1000.0, packed=packed, offsets=offsets,
                               durations=durations, stats=stats)

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
            # per-item scales (jobs of several speaking rates in one call), as [b] device tensors
            per = (torch.from_numpy(batch.item_scales).to(dev) if batch.item_scales is not None else None)
            # one duration-noise draw for the whole batch: item i's does not depend on the chunking
            dp_noise = torch.randn(b, 2, t, generator=gen, device=dev) * (
                per[:, 2, None, None] if per is not None else float(sc.noise_w))
            m_p = torch.zeros(b, c, t, device=dev)
            logs_p = torch.zeros(b, c, t, device=dev)
            durations = torch.zeros(b, t, device=dev)
            frames = torch.zeros(b, dtype=torch.long, device=dev)
            frames_host = np.zeros(b, dtype=np.int64)
            chunks_a = self.stage_a_chunks(batch.lengths, t)
            with self._flags(benchmark=False):  # stage A: its chunks by phoneme length
                for rows, tc in chunks_a:
                    n = len(rows)
                    idx = torch.from_numpy(rows.astype(np.int64)).to(dev, non_blocking=True)
                    # rows past n are padding (CUDA graphs); the outputs may be a graph's static
                    # tensors: consumed here, on this stream, before the next chunk's replay
                    mp, lp, du, fr = self._run_stage_a(ids_all[idx, :tc], lens_all[idx], dp_noise[idx, :, :tc],
                                                       per[idx, 1] if per is not None else float(sc.length_scale))
                    m_p[idx, :, :tc] = mp[:n]
                    logs_p[idx, :, :tc] = lp[:n]
                    durations[idx, :tc] = du[:n]
                    frames[idx] = fr[:n]
            # the items in stage A's order (by length); stage B's chunks index into it
            rows_a = np.concatenate([r for r, _ in chunks_a]).astype(np.int64)
            fh = frames[torch.from_numpy(rows_a).to(dev, non_blocking=True)].cpu().numpy().astype(np.int64)  # sync:
            frames_host[rows_a] = fh  # stage B's shapes depend on it
            # the prior noise, one draw for the batch in that order: the same batch and seed give the same noise
            noisy = bool(np.any(batch.scale_column(0) != 0)) if per is not None else sc.noise_scale != 0
            eps = torch.randn(len(rows_a), c, int(fh.max()), generator=gen, device=dev) if noisy else None
            noise_scale = float(sc.noise_scale)
            if eps is not None and per is not None:  # each item's noise scale applied to its own draw
                eps = eps * per[torch.from_numpy(rows_a).to(dev), 0][:, None, None]
                noise_scale = 1.0
            plan = self.stage_b_chunks(fh)
            # packed result (SynthesisResult's packed layout): each chunk's [n, f*hop] block back to back
            # in one fresh host buffer (on CUDA pinned, from PyTorch's caching host allocator, filled by
            # async copies on a copy stream while the next chunk computes): one copy of the audio, not a
            # [B, S] array padded to the longest item
            copier = self._copy_stream() if self.is_cuda else None
            main = torch.cuda.current_stream(dev) if self.is_cuda else None
            host = torch.empty(sum(len(lo) * f * self.hop for lo, f in plan), dtype=torch.int16,
                               pin_memory=self.is_cuda)
            offsets = np.zeros(b, dtype=np.int64)
            off = 0
            blocks = []  # the device blocks, kept until their copies are done
            hook = self.item_stats
            pending = []  # (rows, their lengths, the hook's device tensors), read after the synchronisation
            with self._flags(benchmark=self.is_cuda and self.autotune):
                for local, f in plan:
                    rows = rows_a[local]
                    pcm = self._run_chunk(rows, f, m_p, logs_p, durations, frames, eps, noise_scale,
                                          eps_rows=local)
                    n = len(rows)
                    # compiled or stage B graphs: pcm is a graph's output, overwritten by a later replay
                    blk = pcm[:n].clone() if self.compiled or self.stage_b_graphs else pcm[:n]
                    blocks.append(blk)
                    if hook is not None:  # on the main stream, before a later replay overwrites pcm
                        lens_rows = frames_host[rows] * self.hop
                        pending.append((rows, lens_rows, hook.device(blk, lens_rows)))
                    if copier is not None:
                        copier.wait_stream(main)
                    off = self._pack_block(host, off, offsets, rows, f, blk, copier)
            if self.is_cuda:
                main.synchronize()
                copier.synchronize()
        # per-phoneme durations in samples (the predictor's ceiled frames x hop): the manifest's optional
        # phoneme_durations_s; one small [B, T] copy, after the synchronisation above
        dur = (durations * self.hop).cpu().numpy().astype(np.float32)
        stats = None
        if hook is not None:
            stats = [None] * b
            for rows, lens_rows, dev_stats in pending:
                for j, st in zip(rows.tolist(), hook.host(dev_stats, lens_rows)):
                    stats[j] = st
        return host.numpy(), offsets, frames_host * self.hop, dur, stats  # the buffer is this call's own

    def stage_a_rows(self, n: int, tc: int) -> int:
        """Rows stage A runs for a chunk of ``n`` items ``tc`` ids wide when padding
        (when stage A runs as CUDA graphs): ``n`` rounded up to a multiple of :data:`STAGE_A_ROW_STEP`, capped at the
        width's chunk size (``max_phonemes_per_chunk // tc``, at least ``n``), so the shapes repeat
        across batches. Stage A's work grows with its rows: :func:`round_rows`' coarser sizes (up to
        a third more rows) cost more kernel time (docs/PERFORMANCE.md, "Figures behind the engine's defaults")."""
        step = STAGE_A_ROW_STEP
        return min(-(-n // step) * step, max(n, self.max_phonemes_per_chunk // tc))

    def _run_stage_a(self, ids, lengths, noise, length_scale):
        """Stage A on one chunk (``ids`` ``[n, tc]``): ``m_p``, ``logs_p``, durations and frames whose first
        ``n`` rows are the chunk's items (rows past them are padding). ``length_scale``: a float for
        every row, or a float32 ``[n]`` device tensor of each row's. With CUDA graphs the outputs
        are a graph's static tensors, valid until the next chunk's replay: the caller consumes them
        (in stream order) first."""
        n, tc = ids.shape
        if self.stage_a_graphs:
            rows = self.stage_a_rows(n, tc)
            if rows > n:
                ids, lengths, noise = pad_stage_a_inputs(ids, lengths, noise, rows)
        graphs = self._stage_a_graph_cache()
        if graphs is None:
            return self._stage_a(ids, lengths, noise, length_scale)
        # the length scale is an input of the graph (float32 per row on the device, the value a float
        # argument is cast to in the product), so one graph serves jobs of every speaking rate, mixed too
        rows = ids.shape[0]
        torch = self.torch
        if torch.is_tensor(length_scale):
            scale = length_scale.float()
            if rows > n:  # padding rows: any valid rate
                scale = torch.cat([scale, scale.new_ones(rows - n)])
        else:
            scale = torch.full((rows,), float(length_scale), dtype=torch.float32, device=self.device)
        return graphs((rows, tc), (ids, lengths, noise, scale))

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
        are padding). ``eps``: the batch's prior noise ``[*, C, frames]``, whose rows ``eps_rows`` are
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

    # ------------------------------------------------------------------ shape profile (CUDA graphs)
    def shape_profile(self) -> dict:
        """The chunk shapes this engine's CUDA graphs were asked for so far, with their call counts,
        most called first: ``{"stage_a": [[rows, width, calls], ...], "stage_b": [[rows, frames, calls],
        ...]}`` (JSON-able; empty lists where a stage runs no graphs). An engine of the same settings
        in a later process captures them at start (:meth:`prepare_shapes`)."""
        def entries(cache):
            return [] if cache is None else [[int(k[0]), int(k[1]), int(n)] for k, n in cache.calls.most_common()]

        return {"stage_a": entries(self._graphs), "stage_b": entries(self._graphs_b)}

    def prepare_shapes(self, profile: dict, budget_s: float) -> dict:
        """Capture CUDA graphs for the shapes of ``profile`` (an earlier engine's :meth:`shape_profile`),
        most called first, until ``budget_s`` seconds are spent or the caches are full, so that batches
        replay them from the start instead of running each shape's first two sights eagerly. Entries
        this engine cannot produce (other chunk budgets, a damaged file) are skipped. Returns
        ``{"captured", "skipped", "seconds"}``."""
        t0 = time.perf_counter()
        out = {"captured": 0, "skipped": 0, "seconds": 0.0}
        entries = []
        for stage in ("stage_a", "stage_b"):
            for e in (profile or {}).get(stage) or []:
                try:
                    rows, size, calls = (int(v) for v in e)
                except (TypeError, ValueError):
                    out["skipped"] += 1
                    continue
                entries.append((calls, stage, rows, size))
        entries.sort(key=lambda e: -e[0])
        with self.torch.inference_mode():  # (without graphs, as on a CPU, every entry is skipped)
            for _, stage, rows, size in entries:
                ok = (time.perf_counter() - t0 < budget_s
                      and (self._prime_stage_a(rows, size) if stage == "stage_a" else self._prime_stage_b(rows, size)))
                out["captured" if ok else "skipped"] += 1
            if self.is_cuda:
                self.torch.cuda.synchronize(self.device)
        out["seconds"] = round(time.perf_counter() - t0, 3)
        return out

    def _prime_stage_a(self, rows: int, width: int) -> bool:
        """Capture stage A's graph of a ``rows`` x ``width`` chunk (inputs as :meth:`_run_stage_a` gives them)."""
        cache = self._stage_a_graph_cache()
        top = -(-max(1, self.spec.max_batch) // STAGE_A_ROW_STEP) * STAGE_A_ROW_STEP
        if cache is None or not (1 <= rows <= min(top, max(1, self.max_phonemes_per_chunk // width))
                                 and 1 <= width <= 4 * DEFAULT_MAX_PHONEMES) or self.stage_a_rows(rows, width) != rows:
            return False
        torch, dev = self.torch, self.device
        ids = torch.ones(rows, width, dtype=torch.long, device=dev)
        lengths = torch.full((rows,), width, dtype=torch.long, device=dev)
        noise = torch.zeros(rows, 2, width, device=dev)
        scale = torch.ones(rows, dtype=torch.float32, device=dev)
        with self._flags(benchmark=False):
            return cache.prime((rows, width), (ids, lengths, noise, scale))

    def _prime_stage_b(self, rows: int, frames: int) -> bool:
        """Capture stage B's graph of a ``rows`` x ``frames`` chunk (inputs as :meth:`_run_chunk` gives them)."""
        bucket = frames in self.buckets or (frames % 1024 == 0 and frames <= 4 * max(self.buckets))
        # (padded_rows refuses more rows than the bucket's chunk size: checked first)
        if not (self.stage_b_graphs and bucket and 1 <= rows <= self.chunk_rows(frames)
                and self.padded_rows(rows, frames) == rows):
            return False
        torch, dev, c = self.torch, self.device, self.hparams.inter_channels
        z = (torch.zeros(rows, frames, c, device=dev).transpose(1, 2) if self.fused_prior
             else torch.zeros(rows, c, frames, device=dev))
        fr = torch.full((rows,), frames, dtype=torch.long, device=dev)
        with self._flags(benchmark=self.autotune):
            return self._stage_b_graph_cache().prime((rows, frames), (z, fr))

    def reset_graphs(self) -> None:
        """Drop the CUDA graphs of both stages (they are captured again as shapes recur): after
        changing a Python-level kernel setting that a capture bakes in, such as a tile size."""
        for g in (self._graphs, self._graphs_b):
            if g is not None:
                g.reset()
