"""TensorRT backend: plans built from the exported stages (:mod:`engines.tools.export`), run in workers.

Written against TensorRT's documented Python API for 10.x and 11.x:

* networks are **strongly typed** (types come from the ONNX graph: the fp16 export carries
  float16 weights and Cast nodes; the int8 export carries QuantizeLinear/DequantizeLinear).
  TensorRT 10 needs ``NetworkDefinitionCreationFlag.STRONGLY_TYPED``; TensorRT 11 is always
  strongly typed (the flag is deprecated and ignored) and has no ``BuilderFlag.FP16/INT8``
  any more, so neither is ever set here;
* one optimization profile per plan (min/opt/max of batch and length axes), a workspace limit
  (``set_memory_pool_limit(MemoryPoolType.WORKSPACE, ...)``) and a timing cache file shared by
  every build on the same GPU and TensorRT version;
* the name-based I/O API: ``set_input_shape``, ``set_tensor_address``, ``execute_async_v3``.

Two plans per precision: stage A (float32 at every precision, as in the torch engine: the
durations never depend on the precision) and stage B (fp16 or int8; fp32 also builds).
Plans are cached under a key of the graph's sha256 (which follows the voice model), the GPU
name, the TensorRT version, the precision and the profile. :class:`TensorRTEngine` loads or
builds them, preallocates every I/O buffer for the profile's maximum (torch CUDA tensors),
and runs on its own CUDA stream. Between the stages, the prior on frames and the noise are
formed with torch on the device, drawing the noise exactly as the torch engine does (one
``torch.Generator`` seeded with ``SynthesisBatch.seed``: ``dp_noise`` [B, 2, T] then ``eps``
[B, C, max frames]).

Where TensorRT, PyTorch with CUDA or an NVIDIA GPU is missing, :func:`require_tensorrt` raises
:class:`core.errors.EngineUnavailable` with one line that says what is missing and how to
install it; nothing else here is reached.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engines.spec import EngineSpec
from engines.base import DEFAULT_MAX_PHONEMES, MAX_WAV_VALUE, EngineInfo, SynthesisBatch, SynthesisResult
from engines.tools.export import FILES, atomic_write_bytes, cache_lock, notice, voice_cache_dir
from core.errors import (DeterministicEngineError, EngineError, EngineOutOfMemory, EngineUnavailable,
                         InputError, TransientEngineError)
from core import settings
from core.files import sha256_file as _sha256

log = logging.getLogger("booktts.tensorrt")

PRECISIONS = ("fp16", "int8", "fp32")
#: Where plans go unless ``engine_dir`` is given: ``$BOOKTTS_TRT_DIR``, else ``<voice cache>/tensorrt``.
ENGINE_DIR_ENV = settings.setting("BOOKTTS_TRT_DIR").name
INSTALL_HINT = ("install TensorRT 10 or 11 for your CUDA on a host with an NVIDIA GPU "
                "(pip install tensorrt-cu12, or an NVIDIA TensorRT container)")


# --------------------------------------------------------------------------- availability
def require_tensorrt(device: str = "cuda:0"):
    """``(tensorrt module, torch module, torch.device)``, or :class:`EngineUnavailable` with one line
    naming everything that is missing."""
    missing = []
    trt = torch = None
    try:
        import tensorrt as trt  # type: ignore[no-redef]
    except ImportError:
        missing.append("the tensorrt Python package is not installed")
    except Exception as exc:  # a broken install (missing libnvinfer, wrong CUDA)
        missing.append(f"tensorrt fails to import ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
    try:
        import torch  # type: ignore[no-redef]
    except ImportError:
        missing.append("PyTorch (used for the CUDA buffers and stream) is not installed")
    else:
        if not torch.cuda.is_available():
            missing.append("no NVIDIA GPU is visible (torch.cuda.is_available() is False)")
    if missing:
        raise EngineUnavailable(f"TensorRT engine unavailable here: {'; '.join(missing)}; {INSTALL_HINT}; "
                                "on CPU use --engine onnx (fp32, or --precision int8)")
    dev = "cuda:0" if device in (None, "", "cpu") else device
    try:
        d = torch.device(dev)
        torch.cuda.get_device_properties(d)
    except (RuntimeError, AssertionError, ValueError) as exc:
        raise EngineUnavailable(f"CUDA device {dev} does not exist here; use cuda:0 .. "
                                f"cuda:{torch.cuda.device_count() - 1}") from exc
    major = int(str(trt.__version__).split(".")[0])
    if major < 10:
        raise EngineUnavailable(f"TensorRT {trt.__version__} is too old (the name-based API of 10.x is needed); "
                                f"{INSTALL_HINT}")
    return trt, torch, d


# --------------------------------------------------------------------------- profiles and keys
@dataclass(frozen=True)
class Profile:
    """Shape ranges of the plans (one optimization profile each)."""

    max_batch: int = 32
    max_phonemes: int = 400
    """Longest utterance in phoneme ids (the planner's --max-phonemes default)."""
    max_frames: int = 2048
    """Longest utterance in decoder frames (2048 x 256 / 22050 Hz = 23.8 s)."""
    opt_batch: int = 0
    opt_phonemes: int = 0
    opt_frames: int = 0

    def __post_init__(self) -> None:
        for k in ("max_batch", "max_phonemes", "max_frames"):
            if getattr(self, k) < 1:
                raise InputError(f"profile {k} must be at least 1")
        if self.max_phonemes < 2 or self.max_frames < 2:
            raise InputError("profile max_phonemes and max_frames must be at least 2")

    def opt(self) -> tuple[int, int, int]:
        return (self.opt_batch or max(1, self.max_batch // 2), self.opt_phonemes or max(2, min(150, self.max_phonemes)),
                self.opt_frames or max(2, min(600, self.max_frames)))

    def shapes(self, stage: str, channels: int) -> dict[str, tuple[tuple, tuple, tuple]]:
        """``{input name: (min, opt, max)}`` of one stage."""
        ob, op, of = self.opt()
        b, p, f = self.max_batch, self.max_phonemes, self.max_frames
        if stage == "stage_a":
            return {"input": ((1, 2), (ob, op), (b, p)), "input_lengths": ((1,), (ob,), (b,)),
                    "scales": ((3,), (3,), (3,)), "dp_noise": ((1, 2, 2), (ob, 2, op), (b, 2, p))}
        return {"z_p": ((1, channels, 2), (ob, channels, of), (b, channels, f)),
                "frame_lengths": ((1,), (ob,), (b,))}

    def label(self) -> str:
        return f"b{self.max_batch}-p{self.max_phonemes}-f{self.max_frames}"


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", s).strip("-")[:60] or "gpu"




def plan_key(graph_sha256: str, gpu: str, trt_version: str, precision: str, profile: Profile) -> str:
    """Cache key of one plan: readable prefix + hash of everything that makes a plan valid."""
    blob = json.dumps({"graph": graph_sha256, "gpu": gpu, "trt": trt_version, "precision": precision,
                       "profile": asdict(profile)}, sort_keys=True)
    return f"{precision}-{profile.label()}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


# --------------------------------------------------------------------------- builder
def build_plan(trt, onnx_path: Path, shapes: dict, workspace_bytes: int, timing_cache: Path | None) -> bytes:
    """Parse ``onnx_path`` into a strongly typed network, set one optimization profile, the workspace
    limit and the timing cache, and return the serialized plan."""
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    st = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if st is not None and int(str(trt.__version__).split(".")[0]) == 10:
        flags |= 1 << int(st)  # TensorRT 11 is always strongly typed (the flag is deprecated there)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i).desc()) for i in range(parser.num_errors))
        raise DeterministicEngineError(f"TensorRT cannot parse {onnx_path.name}: {errors[:400]}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_bytes))
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        name = network.get_input(i).name
        if name not in shapes:
            raise DeterministicEngineError(f"{onnx_path.name} has an unexpected input {name!r}; export it again")
        lo, opt, hi = shapes[name]
        profile.set_shape(name, lo, opt, hi)
    config.add_optimization_profile(profile)
    cache_bytes = timing_cache.read_bytes() if timing_cache is not None and timing_cache.is_file() else b""
    cache = config.create_timing_cache(cache_bytes)
    config.set_timing_cache(cache, False)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise DeterministicEngineError(f"TensorRT failed to build a plan from {onnx_path.name} (see its log above)")
    if timing_cache is not None:
        atomic_write_bytes(timing_cache, bytes(memoryview(config.get_timing_cache().serialize())))
    return bytes(memoryview(plan))


def onnx_for(voice, precision: str, onnx_dir: Path | None = None, calibration=None) -> tuple[Path, Path]:
    """(stage A graph, stage B graph) for a precision: from ``onnx_dir`` (``cli.py export-onnx`` /
    ``cli.py calibrate`` output) or the voice's cache (exported / calibrated on first use, on the
    utterances ``calibration`` gives: :data:`engines.tools.quantize.CalibrationSource`)."""
    if onnx_dir is not None:
        a, b = Path(onnx_dir) / FILES["stage_a"], Path(onnx_dir) / FILES[precision]
        for p in (a, b):
            if not p.is_file():
                hint = "cli.py calibrate --out DIR" if p.name == FILES["int8"] else "cli.py export-onnx --out DIR"
                raise InputError(f"{p} does not exist; write it with: python {hint}")
        return a, b
    from engines.tools.export import ensure_exported

    staged = ensure_exported(voice, ("fp32", "fp16") if precision == "fp16" else ("fp32",))
    if precision == "int8":
        from engines.tools.quantize import ensure_int8

        return staged.stage_a, ensure_int8(voice, staged.directory, calibration)
    return staged.stage_a, staged.stage_b[precision]


def build_plans(voice, precision: str, profile: Profile, engine_dir: Path | None = None, device: str = "cuda:0",
                onnx_dir: Path | None = None, workspace_gib: float = 4.0, force: bool = False,
                calibration=None) -> dict:
    """Build (or find in the cache) the two plans; returns the plan record (paths, key, versions)."""
    if precision not in PRECISIONS:
        raise InputError(f"TensorRT precision {precision!r}: choose fp16, int8 or fp32")
    trt, torch, dev = require_tensorrt(device)
    a_onnx, b_onnx = onnx_for(voice, precision, onnx_dir, calibration)
    import onnx

    channels = int(onnx.load(str(b_onnx), load_external_data=False).graph.input[0].type.tensor_type.shape.dim[1].dim_value)
    gpu = torch.cuda.get_device_name(dev)
    root = Path(engine_dir) if engine_dir else Path(settings.get(ENGINE_DIR_ENV) or voice_cache_dir(voice) / "tensorrt")
    root.mkdir(parents=True, exist_ok=True)
    timing = root / f"timing-{_slug(gpu)}-trt{trt.__version__}.cache"
    record = {"voice": str(voice.name), "gpu": gpu, "tensorrt": str(trt.__version__), "precision": precision,
              "profile": asdict(profile), "channels": channels, "hop_length": voice.hop_length, "plans": {}}
    with cache_lock(root):
        for stage, src, prec in (("stage_a", a_onnx, "fp32"), ("stage_b", b_onnx, precision)):
            key = plan_key(_sha256(src), gpu, str(trt.__version__), prec, profile)
            path = root / f"{stage}.{key}.plan"
            if force or not path.is_file():
                notice(f"building the TensorRT {prec} plan of {stage} ({profile.label()}) on {gpu} from {src.name}")
                with torch.cuda.device(dev):
                    t0 = time.perf_counter()
                    plan = build_plan(trt, src, profile.shapes(stage, channels), int(workspace_gib * (1 << 30)), timing)
                atomic_write_bytes(path, plan)
                record.setdefault("build_s", {})[stage] = round(time.perf_counter() - t0, 1)
            record["plans"][stage] = {"path": str(path), "key": key, "onnx": str(src)}
        atomic_write_bytes(root / f"plans-{precision}-{profile.label()}.json", json.dumps(record, indent=1).encode())
    return record


# --------------------------------------------------------------------------- runtime
class _Stage:
    """One deserialized plan with its context and preallocated I/O buffers (flat torch tensors)."""

    def __init__(self, trt, torch, runtime, plan: bytes, shapes: dict, out_max: dict, dev) -> None:
        self.torch = torch
        self.engine = runtime.deserialize_cuda_engine(plan)
        if self.engine is None:
            raise DeterministicEngineError("TensorRT could not deserialize a plan (built by another TensorRT "
                                           "version or GPU?); rebuild it with: python cli.py build-engine")
        self.context = self.engine.create_execution_context()
        self.names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in self.names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        dtypes = {trt.DataType.FLOAT: torch.float32, trt.DataType.HALF: torch.float16,
                  trt.DataType.INT32: torch.int32, trt.DataType.INT64: torch.int64}
        self.buffers = {}
        for n in self.names:
            numel = int(np.prod(shapes[n][2])) if n in shapes else int(out_max[n])
            self.buffers[n] = torch.empty(numel, dtype=dtypes[self.engine.get_tensor_dtype(n)], device=dev)

    def view(self, name: str, shape: tuple):
        return self.buffers[name][: int(np.prod(shape))].view(*shape)

    def run(self, input_shapes: dict, stream) -> None:
        for n, shape in input_shapes.items():
            if not self.context.set_input_shape(n, tuple(int(s) for s in shape)):
                raise DeterministicEngineError(f"TensorRT rejected shape {tuple(shape)} for {n} (outside the profile)")
        for n in self.names:
            shape = input_shapes.get(n) or tuple(self.context.get_tensor_shape(n))
            self.context.set_tensor_address(n, self.view(n, shape).data_ptr())
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise TransientEngineError("TensorRT execute_async_v3 failed")


class TensorRTEngine:
    """The exported stages as TensorRT plans on one GPU. Text-blind; implements :class:`engines.base.Engine`."""

    def __init__(self, voice, spec: EngineSpec | None = None, *, engine_dir: Path | None = None,
                 profile: Profile | None = None, onnx_dir: Path | None = None, calibration=None) -> None:
        spec = spec or EngineSpec(name="tensorrt", precision="fp16", device="cuda:0")
        trt, torch, dev = require_tensorrt(spec.device)
        if spec.precision not in PRECISIONS:
            raise EngineUnavailable(f"the tensorrt engine has no {spec.precision} mode; use --precision fp16, int8 or fp32")
        t0 = time.perf_counter()
        self.trt, self.torch, self.device = trt, torch, dev
        self.profile = profile or Profile(max_batch=max(1, spec.max_batch), max_phonemes=DEFAULT_MAX_PHONEMES)
        rec = build_plans(voice, spec.precision, self.profile, engine_dir, str(dev), onnx_dir, calibration=calibration)
        self.channels = int(rec["channels"])
        self.hop = int(rec["hop_length"])
        p = self.profile
        with torch.cuda.device(dev):
            self.stream = torch.cuda.Stream(dev)
            self.runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
            b, t, f, c = p.max_batch, p.max_phonemes, p.max_frames, self.channels
            self.a = _Stage(trt, torch, self.runtime, Path(rec["plans"]["stage_a"]["path"]).read_bytes(),
                            p.shapes("stage_a", c), {"m_p": b * c * t, "logs_p": b * c * t, "durations": b * t,
                                                     "frame_lengths": b}, dev)
            self.b = _Stage(trt, torch, self.runtime, Path(rec["plans"]["stage_b"]["path"]).read_bytes(),
                            p.shapes("stage_b", c), {"audio": b * f * self.hop, "sample_lengths": b}, dev)
            self.pcm = torch.empty(b * f * self.hop, dtype=torch.int16, device=dev)
            self.host = torch.empty(b * f * self.hop, dtype=torch.int16, pin_memory=True)
        from engines.torch_vits.model import VitsSynthesizer

        self._expand = VitsSynthesizer.expand_prior
        self.load_s = time.perf_counter() - t0
        self.info = EngineInfo("tensorrt", spec.precision, str(dev), voice.sample_rate, p.max_batch,
                               {"tensorrt": str(trt.__version__), "gpu": rec["gpu"], "profile": asdict(p),
                                "plans": {k: Path(v["path"]).name for k, v in rec["plans"].items()},
                                "load_s": round(self.load_s, 2)})

    def synthesize(self, batch: SynthesisBatch) -> SynthesisResult:
        if len(batch) == 0:
            raise DeterministicEngineError("empty batch: nothing to synthesize")
        if batch.phoneme_ids.shape[1] > self.profile.max_phonemes:
            raise DeterministicEngineError(f"an utterance of {batch.phoneme_ids.shape[1]} phoneme ids is longer than the "
                                           f"plans' profile ({self.profile.max_phonemes}); rebuild with "
                                           "build-engine --max-phonemes N or plan with a smaller --max-phonemes")
        t0 = time.perf_counter()
        step = self.profile.max_batch
        try:
            if len(batch) <= step:
                audio, lengths = self._run(batch)
            else:
                parts = [self._run(batch.slice(i, i + step)) for i in range(0, len(batch), step)]
                lengths = np.concatenate([l for _, l in parts])
                audio = np.zeros((len(batch), int(lengths.max())), dtype=np.int16)
                row = 0
                for a, l in parts:
                    audio[row:row + len(l), : a.shape[1]] = a
                    row += len(l)
        except EngineError:
            raise
        except Exception as exc:
            raise self._map_error(exc, len(batch)) from exc
        return SynthesisResult(audio, lengths, (time.perf_counter() - t0) * 1000.0)

    def _map_error(self, exc: BaseException, n: int) -> EngineError:
        torch = self.torch
        msg = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in msg.lower():
            return EngineOutOfMemory(f"TensorRT/CUDA ran out of memory on {self.device} with a batch of {n}")
        if any(s in msg.lower() for s in ("cuda error", "illegal memory", "launch failure", "ecc")):
            return TransientEngineError(f"TensorRT on {self.device} failed: {msg}")
        return DeterministicEngineError(f"TensorRT engine failed on a batch of {n}: {type(exc).__name__}: {msg}")

    def _run(self, batch: SynthesisBatch) -> tuple[np.ndarray, np.ndarray]:
        torch = self.torch
        sc = batch.scales
        b, t = batch.phoneme_ids.shape
        c, hop = self.channels, self.hop
        seed = batch.seed if batch.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream), torch.inference_mode():
            gen = torch.Generator(device=self.device)
            gen.manual_seed(int(seed))
            self.a.view("input", (b, t)).copy_(torch.from_numpy(batch.phoneme_ids))
            self.a.view("input_lengths", (b,)).copy_(torch.from_numpy(batch.lengths))
            self.a.view("scales", (3,)).copy_(torch.from_numpy(sc.as_array()))
            self.a.view("dp_noise", (b, 2, t)).copy_(torch.randn(b, 2, t, generator=gen, device=self.device))
            self.a.run({"input": (b, t), "input_lengths": (b,), "scales": (3,), "dp_noise": (b, 2, t)}, self.stream)
            frames = self.a.view("frame_lengths", (b,))
            frames_host = frames.cpu().numpy().astype(np.int64)  # the one sync: stage B's shape depends on it
            f = int(frames_host.max())
            if f > self.profile.max_frames:
                raise DeterministicEngineError(f"an utterance of {f} frames ({f * hop / 22050:.1f} s) exceeds the plans' "
                                               f"profile ({self.profile.max_frames} frames); rebuild with "
                                               "build-engine --max-frames N")
            m, logs = self._expand(self.a.view("m_p", (b, c, t)), self.a.view("logs_p", (b, c, t)),
                                   self.a.view("durations", (b, t)), f)
            z = self.b.view("z_p", (b, c, f))
            if sc.noise_scale != 0:
                eps = torch.randn(b, c, f, generator=gen, device=self.device)
                torch.addcmul(m, eps, torch.exp(logs), value=float(sc.noise_scale), out=z)
            else:
                z.copy_(m)
            self.b.view("frame_lengths", (b,)).copy_(frames)
            self.b.run({"z_p": (b, c, f), "frame_lengths": (b,)}, self.stream)
            audio = self.b.view("audio", (b, f * hop))
            pcm = self.pcm[: b * f * hop].view(b, f * hop)
            torch.clamp(audio * MAX_WAV_VALUE, -MAX_WAV_VALUE, MAX_WAV_VALUE, out=audio)
            pcm.copy_(audio)  # float -> int16 truncates toward zero, as numpy's astype in float_to_int16
            host = self.host[: b * f * hop]
            host.copy_(pcm.view(-1), non_blocking=True)
            self.stream.synchronize()
            out = host.numpy().reshape(b, f * hop).copy()
        return out, frames_host * hop
