"""ONNX export of the two stages of the PyTorch port: the one source of the staged ONNX Runtime
engine (fp32, int8) and of the TensorRT plans (fp16, int8).

Stage A (phoneme axis; always float32, so durations never depend on the precision)::

    input          int64   [batch, phonemes]      phoneme ids, right-padded with 0
    input_lengths  int64   [batch]                true lengths
    scales         float32 [3]                    noise_scale, length_scale, noise_w (Piper's order)
    dp_noise       float32 [batch, 2, phonemes]   standard normal draws (the graph multiplies by noise_w)
 -> m_p, logs_p    float32 [batch, C, phonemes]   prior statistics, zero past each length
    durations      float32 [batch, phonemes]      integer-valued frame count of each phoneme
    frame_lengths  int64   [batch]                frames of each item (sum of durations, at least 1)

Alignment (between the stages, on the host or the device, :func:`prior_on_frames`)::

    z_p[b, :, j] = m_p[b, :, k] + eps[b, :, j] * exp(logs_p[b, :, k]) * noise_scale,
    k = the phoneme that frame j belongs to; zero past frame_lengths[b]

Stage B (frame axis; float32, or float16 inside for the fp16 export)::

    z_p            float32 [batch, C, frames]
    frame_lengths  int64   [batch]
 -> audio          float32 [batch, frames * hop]  in [-1, 1], exactly 0 past sample_lengths
    sample_lengths int64   [batch]                frame_lengths * hop

No random op is inside either graph: every noise draw is an input, so the same seed gives the
same audio on ONNX Runtime, TensorRT and the PyTorch port.

The fp16 export ("half-precision graph") mirrors the torch engine's fp16 mode exactly: the
flow's dilated ``in_layers`` convolutions and the whole HiFi-GAN decoder carry float16 weights
and activations; the coupling stream, the WN residual/skip sums and the flow's 1x1 convolutions
stay float32 (:func:`engines.torch_vits.modules.mixed_precision_flow`, measured there). The
types are in the graph (Cast nodes, float16 initializers), which is what a strongly typed
TensorRT network builds from. Its inputs and outputs stay float32.

Exports are cached per voice under :func:`voice_cache_dir` (``$BOOKTTS_CACHE`` or
``~/.cache/booktts``, then the voice ONNX file's sha256), written atomically under a file lock
so that several workers starting at once export once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core import settings
from core.errors import DeterministicEngineError, EngineUnavailable, InputError, VoiceError

log = logging.getLogger("booktts.export")

#: ONNX opset of the exports (the dynamo exporter's lowest; TensorRT 10 and 11 parse it).
OPSET = 18
#: Bump when the graphs' interface or contents change: old cache entries are then ignored.
FORMAT_VERSION = "1"
#: The cache root's variable (core.settings).
CACHE_ENV = settings.setting("BOOKTTS_CACHE").name

STAGE_A_INPUTS = ("input", "input_lengths", "scales", "dp_noise")
STAGE_A_OUTPUTS = ("m_p", "logs_p", "durations", "frame_lengths")
STAGE_B_INPUTS = ("z_p", "frame_lengths")
STAGE_B_OUTPUTS = ("audio", "sample_lengths")
#: File names inside a voice's cache directory.
FILES = {"stage_a": "stage_a.fp32.onnx", "fp32": "stage_b.fp32.onnx", "fp16": "stage_b.fp16.onnx",
         "int8": "stage_b.int8.onnx", "meta": "export.json"}
#: Operators that draw random numbers; none may appear in an exported graph.
RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                        "Multinomial", "Bernoulli"})
#: Largest sizes the dynamic axes are declared for (TensorRT profiles pick their own, smaller).
MAX_BATCH, MAX_PHONEMES, MAX_FRAMES = 4096, 8192, 1 << 17
#: Relative L2 error an fp32 export may have against the PyTorch port.
FP32_TOLERANCE = 1e-3


# --------------------------------------------------------------------------- cache
def cache_root() -> Path:
    """``$BOOKTTS_CACHE``, else ``~/.cache/booktts``."""
    env = settings.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "booktts"


def voice_cache_dir(voice, root: Path | None = None) -> Path:
    """``<cache root>/<sha256 of the voice's model file>``: everything derived from one voice."""
    return Path(root or cache_root()) / voice.model_sha256()


@contextlib.contextmanager
def cache_lock(directory: Path):
    """An exclusive lock on ``directory/.lock`` (fcntl), so concurrent processes build once."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(directory / ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_model(model, path: Path) -> None:
    """Write an ``onnx.ModelProto`` as one self-contained file (no external data), atomically."""
    atomic_write_bytes(Path(path), model.SerializeToString())


def notice(msg: str) -> None:
    """A one-time, user-visible step (exporting, calibrating): a WARNING log line, which reaches
    stderr through the CLI's logging setup, or through Python's last-resort handler where logging
    is not configured."""
    log.warning(msg)


# --------------------------------------------------------------------------- the PyTorch port
def _torch():
    try:
        import torch
    except ImportError as exc:
        raise EngineUnavailable("exporting the staged ONNX graphs needs PyTorch (the graphs are exported from the "
                                "PyTorch port); pip install -e '.[torch]'") from exc
    return torch


def load_port(voice):
    """The PyTorch port of ``voice`` in float32, eval mode, on CPU."""
    torch = _torch()
    from engines.tools import weights as W
    from engines.torch_vits.hparams import VitsHParams
    from engines.torch_vits.model import VitsSynthesizer

    if str(voice.model_path).endswith(".safetensors"):
        state, hp, _ = W.read_weights(voice.model_path)
    else:
        state, hp = W.onnx_state_and_hparams(voice.model_path)
    hparams = VitsHParams.from_dict(hp)
    if hparams.hop_length != voice.hop_length:
        raise VoiceError(f"weights have hop length {hparams.hop_length}, the voice config says {voice.hop_length}")
    with torch.no_grad():
        model = VitsSynthesizer(hparams)
        model.load_weights({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()})
    return model.eval()


def _stage_modules(model, precision: str):
    torch = _torch()
    import copy

    from engines.torch_vits.modules import mixed_precision_flow, sequence_mask

    class StageA(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, ids, lengths, scales, dp_noise):
            return self.m.stage_a(ids, lengths, dp_noise * scales[2], scales[1])

    class StageB(torch.nn.Module):
        def __init__(self, dtype) -> None:
            super().__init__()
            self.dtype = dtype
            self.hop = model.hop_length
            if dtype == torch.float32:
                self.flow, self.dec = model.flow, model.dec
            else:
                self.flow = mixed_precision_flow(copy.deepcopy(model.flow), dtype)
                self.dec = copy.deepcopy(model.dec).to(dtype)

        def forward(self, z_p, frame_lengths):
            mask = sequence_mask(frame_lengths, z_p.shape[-1]).unsqueeze(1).to(z_p.dtype)
            z = self.flow.reverse(z_p, mask)
            audio = self.dec((z * mask).to(self.dtype), frame_lengths)
            return audio.to(torch.float32), frame_lengths * self.hop

    dtype = {"fp32": torch.float32, "fp16": torch.float16}[precision]
    return StageA().eval(), StageB(dtype).eval()


def _export(module, args, dynamic_shapes, input_names, output_names, path: Path) -> None:
    torch = _torch()
    import warnings

    try:
        import onnxscript  # noqa: F401  (torch's ONNX exporter needs it)
    except ImportError as exc:
        raise EngineUnavailable("exporting ONNX graphs needs onnxscript; pip install onnxscript") from exc
    with warnings.catch_warnings(), torch.no_grad(), _quiet_exporter():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(module, args, dynamo=True, dynamic_shapes=dynamic_shapes, opset_version=OPSET,
                                 input_names=list(input_names), output_names=list(output_names),
                                 optimize=True, verify=False, report=False)
    model = prog.model_proto
    bad = random_ops(model)
    if bad:  # pragma: no cover - a change in the port would do this
        raise DeterministicEngineError(f"exported graph {path.name} contains random ops {sorted(bad)}")
    model.producer_name = "booktts"
    save_model(model, path)


@contextlib.contextmanager
def _quiet_exporter():
    """torch's exporter prints progress lines to stdout; keep them out of the CLI's output."""
    import io

    buf = io.StringIO()
    quiet = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export", "onnxscript")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(buf):
            yield
    finally:
        for q, lv in zip(quiet, levels):
            q.setLevel(lv)


def random_ops(model) -> set[str]:
    """Random-number operators in an ONNX model (graph and subgraphs)."""
    found = set()

    def walk(graph):
        for n in graph.node:
            if n.op_type in RANDOM_OPS:
                found.add(n.op_type)
            for a in n.attribute:
                if a.g is not None and a.g.node:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(model.graph)
    return found


def example_inputs(hp, batch: int = 2, phonemes: int = 24, frames: int = 40, seed: int = 0):
    """Small numpy inputs of both stages (valid ids, decreasing lengths)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, hp["n_vocab"], size=(batch, phonemes), dtype=np.int64)
    lengths = np.maximum(3, phonemes - np.arange(batch) * max(1, phonemes // (batch + 1))).astype(np.int64)
    for i, n in enumerate(lengths):
        ids[i, n:] = 0
    scales = np.array([0.667, 1.0, 0.8], dtype=np.float32)
    dp_noise = rng.standard_normal((batch, 2, phonemes)).astype(np.float32)
    z_p = rng.standard_normal((batch, hp["inter_channels"], frames)).astype(np.float32)
    frame_lengths = np.maximum(1, frames - np.arange(batch) * max(1, frames // (batch + 1))).astype(np.int64)
    z_p *= (np.arange(frames)[None, None, :] < frame_lengths[:, None, None])
    return (ids, lengths, scales, dp_noise), (z_p, frame_lengths)


def export_voice(voice, out_dir: Path, precisions=("fp32",), model=None, verify: bool = True,
                 stage_a: bool = True) -> dict[str, Path]:
    """Export stage A (unless ``stage_a`` is False) and stage B (one file per precision in
    ``precisions``) into ``out_dir``.

    Returns ``{"stage_a": path, "fp32": path, "fp16": path, "meta": path}`` for what was written.
    With ``verify``, each fp32 graph is run in ONNX Runtime against the port (relative L2 <=
    :data:`FP32_TOLERANCE`, else :class:`DeterministicEngineError`), and the fp16 graph against
    the port's own fp16 stage B where this host can run it.
    """
    torch = _torch()
    from torch.export import Dim

    for p in precisions:
        if p not in ("fp32", "fp16"):
            raise InputError(f"export precision {p!r}: choose fp32 or fp16 (int8 comes from: cli.py calibrate)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = model or load_port(voice)
    hp = model.hp.to_dict()
    a_in, b_in = example_inputs(hp)
    batch = Dim("batch", min=1, max=MAX_BATCH)
    phon = Dim("phonemes", min=2, max=MAX_PHONEMES)
    frames = Dim("frames", min=2, max=MAX_FRAMES)
    written: dict[str, Path] = {}
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if stage_a:
        module_a, _ = _stage_modules(model, "fp32")
        path = out_dir / FILES["stage_a"]
        _export(module_a, tuple(torch.from_numpy(x) for x in a_in),
                {"ids": {0: batch, 1: phon}, "lengths": {0: batch}, "scales": None, "dp_noise": {0: batch, 2: phon}},
                STAGE_A_INPUTS, STAGE_A_OUTPUTS, path)
        written["stage_a"] = path
        timings["stage_a"] = round(time.perf_counter() - t0, 1)
    for prec in precisions:
        t0 = time.perf_counter()
        _, stage_b = _stage_modules(model, prec)
        path = out_dir / FILES[prec]
        _export(stage_b, tuple(torch.from_numpy(x) for x in b_in),
                {"z_p": {0: batch, 2: frames}, "frame_lengths": {0: batch}}, STAGE_B_INPUTS, STAGE_B_OUTPUTS, path)
        written[prec] = path
        timings[f"stage_b_{prec}"] = round(time.perf_counter() - t0, 1)
    checks = verify_export(model, written) if verify else {}
    meta = {
        "format_version": FORMAT_VERSION, "opset": OPSET, "voice": str(voice.name),
        "source_sha256": voice.model_sha256(), "sample_rate": voice.sample_rate, "hop_length": model.hop_length,
        "hparams": hp, "torch": torch.__version__, "files": {k: v.name for k, v in written.items()},
        "inputs": {"stage_a": STAGE_A_INPUTS, "stage_b": STAGE_B_INPUTS},
        "outputs": {"stage_a": STAGE_A_OUTPUTS, "stage_b": STAGE_B_OUTPUTS},
        "export_s": timings, "verification": checks,
        "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    mpath = out_dir / FILES["meta"]
    old = read_meta(out_dir) or {}
    if old.get("source_sha256") == meta["source_sha256"] and old.get("format_version") == FORMAT_VERSION:
        meta["files"] = {**old.get("files", {}), **meta["files"]}
        meta["verification"] = {**old.get("verification", {}), **checks}
        meta["export_s"] = {**old.get("export_s", {}), **timings}
    atomic_write_bytes(mpath, json.dumps(meta, indent=2).encode())
    written["meta"] = mpath
    return written


def read_meta(out_dir: Path) -> dict | None:
    try:
        return json.loads((Path(out_dir) / FILES["meta"]).read_text())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- verification
def rel_l2(a, b) -> float:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def ort_session(path_or_bytes, threads: int | None = None):
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise EngineUnavailable("onnxruntime is not installed; pip install onnxruntime") from exc
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    src = str(path_or_bytes) if isinstance(path_or_bytes, Path) else path_or_bytes
    return ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])


def verify_export(model, paths: dict[str, Path], batch: int = 2, phonemes: int = 24, frames: int = 40) -> dict:
    """Each exported graph against the port on the same inputs (relative L2 per output)."""
    torch = _torch()
    hp = model.hp.to_dict()
    a_in, b_in = example_inputs(hp, batch, phonemes, frames, seed=1)
    out: dict = {}
    if "stage_a" in paths:
        sa, _ = _stage_modules(model, "fp32")
        with torch.no_grad():
            ref = [t.numpy() for t in sa(*(torch.from_numpy(x) for x in a_in))]
        got = ort_session(paths["stage_a"]).run(list(STAGE_A_OUTPUTS), dict(zip(STAGE_A_INPUTS, a_in)))
        out["stage_a"] = {n: rel_l2(g, r) for n, g, r in zip(STAGE_A_OUTPUTS, got, ref)}
        worst = max(out["stage_a"].values())
        if worst > FP32_TOLERANCE:
            raise DeterministicEngineError(f"stage A export differs from the PyTorch port (relative L2 {worst:.2e})")
    for prec in ("fp32", "fp16"):
        if prec not in paths:
            continue
        _, sb = _stage_modules(model, prec)
        try:
            with torch.no_grad():
                ref = sb(*(torch.from_numpy(x) for x in b_in))[0].numpy()
            got = ort_session(paths[prec]).run(["audio"], dict(zip(STAGE_B_INPUTS, b_in)))[0]
        except Exception as exc:  # fp16 convolutions are missing from some CPU builds of torch / ORT
            if prec == "fp32":
                raise
            out[f"stage_b_{prec}"] = {"skipped": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            continue
        err = rel_l2(got, ref)
        out[f"stage_b_{prec}"] = {"audio": err}
        if prec == "fp32" and err > FP32_TOLERANCE:
            raise DeterministicEngineError(f"stage B export differs from the PyTorch port (relative L2 {err:.2e})")
    return out


# --------------------------------------------------------------------------- alignment (numpy)
def prior_on_frames(m_p: np.ndarray, logs_p: np.ndarray, durations: np.ndarray, n_frames: int,
                    eps: np.ndarray | None, noise_scale: float) -> np.ndarray:
    """``z_p`` [B, C, n_frames] from stage A's outputs: each phoneme's prior repeated over its
    frames (VITS' monotonic path), plus ``eps * exp(logs) * noise_scale``; zero past each item's
    frames. ``eps``: standard normal [B, C, >= n_frames] or None (noise_scale 0)."""
    b, c, t = m_p.shape
    ends = np.cumsum(durations.astype(np.float64), axis=1)  # [b, t]
    frame = np.arange(n_frames, dtype=np.float64)
    idx = np.stack([np.searchsorted(ends[i], frame, side="right") for i in range(b)])  # [b, f]
    valid = (idx < t)[:, None, :]
    idx = np.minimum(idx, t - 1)[:, None, :].repeat(c, axis=1)
    m = np.take_along_axis(m_p, idx, axis=2)
    if eps is not None and noise_scale != 0:
        logs = np.take_along_axis(logs_p, idx, axis=2)
        m = m + eps[:, :, :n_frames] * np.exp(logs) * np.float32(noise_scale)
    return np.where(valid, m, 0).astype(np.float32)


# --------------------------------------------------------------------------- cached exports
@dataclass(frozen=True)
class StagedModels:
    """Paths of a voice's cached staged graphs."""

    directory: Path
    stage_a: Path
    stage_b: dict
    meta: dict


def ensure_exported(voice, precisions=("fp32",), cache_dir: Path | None = None) -> StagedModels:
    """The voice's staged graphs for ``precisions`` (fp32 / fp16), exported into the cache on first use."""
    directory = Path(cache_dir) if cache_dir else voice_cache_dir(voice)
    wanted = ("stage_a", *dict.fromkeys(["fp32", *precisions]))
    need = lambda: [p for p in wanted if not _cached(directory, p, voice)]  # noqa: E731
    if need():
        with cache_lock(directory):
            missing = need()
            if missing:
                notice(f"exporting the staged ONNX graphs of voice {voice.name} ({', '.join(missing)}) from the "
                       f"PyTorch port into {directory} (one time, about a minute)")
                export_voice(voice, directory, tuple(p for p in missing if p != "stage_a"),
                             stage_a="stage_a" in missing)
    meta = read_meta(directory) or {}
    return StagedModels(directory, directory / FILES["stage_a"],
                        {p: directory / FILES[p] for p in ("fp32", "fp16", "int8") if (directory / FILES[p]).is_file()},
                        meta)


def _cached(directory: Path, key: str, voice) -> bool:
    meta = read_meta(directory)
    if not meta or meta.get("format_version") != FORMAT_VERSION or meta.get("source_sha256") != voice.model_sha256():
        return False
    name = meta.get("files", {}).get(key)
    return bool(name) and (directory / name).is_file()
