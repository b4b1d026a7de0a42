"""ONNX Runtime backend: runs the voice's own ONNX graph on CPU with real batches.

The Piper graph returns padded audio only. To recover each item's exact length,
the graph is patched to also output its internal frame-count tensor
(``y_lengths``, the clamped sum of the ceiled durations); samples = frames x hop.
Nothing is guessed from silence. The patched graph is kept in the voice's cache
(:func:`patched_model`): patching means parsing and writing the whole 63 MB model,
which costs a one-off run most of a second before its first utterance.
"""

from __future__ import annotations

import logging
import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from engines.spec import EngineSpec
from engines.base import EngineInfo, SynthesisBatch, SynthesisResult, float_to_int16
from core.errors import DeterministicEngineError, EngineError, EngineOutOfMemory, EngineUnavailable, VoiceError

log = logging.getLogger("booktts.engine")

LENGTHS_OUTPUT = "booktts_frame_lengths"
#: The patched graph's file name in the voice's cache (a new name whenever :func:`patched_model_bytes` changes).
PATCHED_NAME = "cpu-frame-lengths-v1.onnx"
#: Items run through one ONNX Runtime session at once: this graph's convolutions already fill a
#: core with one utterance, and larger batches only add padding and memory traffic
#: (docs/PERFORMANCE.md, "CPU").
CPU_MICRO_BATCH = 1
#: Most parallel sessions. The cores are shared between sessions of one intra-op thread each
#: (utterance-level parallelism), faster than one session using every core (docs/PERFORMANCE.md, "CPU").
MAX_SESSIONS = 8


def map_ort_error(exc: BaseException, what: str) -> EngineError:
    """An onnxruntime failure (its own pybind exception types) as a project engine error."""
    if isinstance(exc, EngineError):
        return exc
    if isinstance(exc, MemoryError):
        return EngineOutOfMemory(f"onnxruntime ran out of host memory on {what}")
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "alloc" in msg.lower() or "memory" in msg.lower():
        return EngineOutOfMemory(f"onnxruntime: {msg}")
    return DeterministicEngineError(f"onnxruntime failed on {what}: {msg}")


def _find_frame_lengths_tensor(graph) -> str:
    """The output of the Clip that clamps ``sum(ceil(durations))`` to at least one frame."""
    producers = {o: n for n in graph.node for o in n.output}
    for node in graph.node:
        if node.op_type != "Clip":
            continue
        src = producers.get(node.input[0])
        if src is None or src.op_type != "ReduceSum":
            continue
        ceil = producers.get(src.input[0])
        if ceil is not None and ceil.op_type == "Ceil":
            return node.output[0]
    raise VoiceError("voice ONNX graph has no recognisable frame-length tensor (Ceil -> ReduceSum -> Clip); "
                     "is it a Piper VITS export?")


def patched_model_bytes(model_path) -> bytes:
    """The voice graph with its frame-length tensor exposed as output ``booktts_frame_lengths``."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(model_path))
    name = _find_frame_lengths_tensor(model.graph)
    model.graph.node.append(helper.make_node("Identity", [name], [LENGTHS_OUTPUT], name="booktts_lengths"))
    model.graph.output.append(helper.make_tensor_value_info(LENGTHS_OUTPUT, TensorProto.FLOAT, ["batch_size"]))
    return model.SerializeToString()


def patched_model(voice, cache_root: Path | None = None) -> Path | bytes:
    """The patched graph (:func:`patched_model_bytes`) as a file in the voice's cache
    (:func:`engines.tools.export.voice_cache_dir`), written there atomically on first use; its
    bytes, made in memory, where the cache cannot be written (a read-only home, a full disk)."""
    from engines.tools.export import atomic_write_bytes, cache_lock, voice_cache_dir

    path = voice_cache_dir(voice, cache_root) / PATCHED_NAME
    if path.is_file():
        return path
    try:
        with cache_lock(path.parent):
            if not path.is_file():
                atomic_write_bytes(path, patched_model_bytes(voice.model_path))
        return path
    except OSError as exc:
        log.debug("the patched voice graph is not cached (%s): patching it in memory", exc)
        return patched_model_bytes(voice.model_path)


class OnnxEngine:
    """ONNX Runtime on CPU (fp32; int8 where a quantized model is given). Text-blind."""

    def __init__(self, voice, spec: EngineSpec | None = None, model_bytes: bytes | None = None,
                 micro_batch: int = CPU_MICRO_BATCH, sessions: int | None = None) -> None:
        spec = spec or EngineSpec()
        if spec.device != "cpu":
            raise EngineUnavailable(f"the onnx engine runs on cpu only (asked for {spec.device}); use --engine torch for GPUs")
        if spec.precision not in ("fp32",):
            raise EngineUnavailable(f"the onnx engine has no {spec.precision} model here; use --precision fp32")
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise EngineUnavailable("onnxruntime is not installed; pip install onnxruntime") from exc
        self.voice = voice
        self.micro_batch = micro_batch
        self.hop_length = voice.hop_length
        threads = int(spec.threads or os.cpu_count() or 1)
        n_sessions = max(1, min(sessions or threads, MAX_SESSIONS, threads))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, threads // n_sessions)
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        t0 = time.perf_counter()
        model = model_bytes or patched_model(voice)
        self._sessions: queue.SimpleQueue = queue.SimpleQueue()
        self._pool = ThreadPoolExecutor(n_sessions, thread_name_prefix="onnx") if n_sessions > 1 else None

        def make_session(_):
            if not isinstance(model, Path):
                return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
            fix = "delete it: the next run writes it again"
            try:
                session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime's own exception types: a damaged file
                raise VoiceError(f"the cached voice graph {model} cannot be read ({str(exc).splitlines()[0]}); "
                                 f"{fix}") from exc
            if LENGTHS_OUTPUT not in {o.name for o in session.get_outputs()}:
                raise VoiceError(f"{model} is not the patched voice graph (it has no {LENGTHS_OUTPUT} output); {fix}")
            return session

        for sess in (self._pool.map(make_session, range(n_sessions)) if self._pool else [make_session(0)]):
            self._sessions.put(sess)
        self.load_s = time.perf_counter() - t0
        self.info = EngineInfo("onnx", spec.precision, "cpu", voice.sample_rate, spec.max_batch,
                               {"threads": threads, "sessions": n_sessions, "micro_batch": micro_batch})

    def synthesize(self, batch: SynthesisBatch) -> SynthesisResult:
        t0 = time.perf_counter()
        step = max(1, self.micro_batch)
        slices = [(i, min(i + step, len(batch))) for i in range(0, len(batch), step)]
        if len(slices) == 1:
            parts = [self._run(batch)]
        elif self._pool is None:
            parts = [self._run(batch.slice(a, b)) for a, b in slices]
        else:
            # longest first: the sessions then end the batch on short items together, instead of
            # one session running the longest item alone while the others wait (a batch is a barrier)
            longest_first = sorted(range(len(slices)), key=lambda k: -int(batch.lengths[slices[k][0]:slices[k][1]].max()))
            done = dict(zip(longest_first, self._pool.map(lambda k: self._run(batch.slice(*slices[k])), longest_first)))
            parts = [done[k] for k in range(len(slices))]
        lengths = np.concatenate([l for _, l in parts])
        audio = np.zeros((len(batch), int(max(a.shape[1] for a, _ in parts))), dtype=np.int16)
        row = 0
        for a, l in parts:
            audio[row : row + len(l), : a.shape[1]] = a
            row += len(l)
        return SynthesisResult(audio, lengths, (time.perf_counter() - t0) * 1000.0)

    def _run(self, batch: SynthesisBatch) -> tuple[np.ndarray, np.ndarray]:
        session = self._sessions.get()
        try:
            feed = {"input": batch.phoneme_ids, "input_lengths": batch.lengths, "scales": batch.scales.as_array()}
            if any(i.name == "sid" for i in session.get_inputs()):  # a multi-speaker voice
                feed["sid"] = (batch.speaker_ids if batch.speaker_ids is not None
                               else np.zeros(len(batch), dtype=np.int64))
            audio, frames = session.run(["output", LENGTHS_OUTPUT], feed)
        except Exception as exc:
            raise map_ort_error(exc, f"a batch of {len(batch)}") from exc
        finally:
            self._sessions.put(session)
        audio = audio.reshape(len(batch), -1)
        lengths = np.minimum(np.rint(frames).astype(np.int64) * self.hop_length, audio.shape[1])
        return float_to_int16(audio), lengths
