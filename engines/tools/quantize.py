"""INT8 by calibration: an explicitly quantized (Q/DQ) ONNX graph of stage B (flow + decoder).

Written with ``onnx`` + numpy (not ``onnxruntime.quantization``), so that the placement of
every QuantizeLinear/DequantizeLinear pair is ours and the per-layer sensitivity scan can run
all layers through ONE ONNX Runtime session (see *Sensitivity* below).

What is quantized (symmetric int8, zero point 0, the form TensorRT's explicit quantization
takes)::

    weights      per output channel (Conv: axis 0; ConvTranspose: axis 1): scale = max|w| / 127
    activations  per tensor, from calibration: scale = clip / 127 with clip chosen from a
                 histogram of |x| over the calibration corpus (``mse``: the clip that minimises
                 the expected squared error of rounding + clipping; or ``max``, ``percentile``)

A *site* is one quantizable place of the graph: a convolution (its input activation + its
weights; the bias stays float, as TensorRT keeps it) or a residual addition (both of its
inputs). Each site gets Q/DQ on the input side only (TensorRT's recommended placement: it
fuses the pairs into the neighbouring int8 kernels).

Calibration: the fp32 stage A runs over a corpus of real utterances (the voice's default
scales, a fixed seed), the prior on frames is formed as at synthesis, and stage B runs on it
one utterance at a time (no padding to skew the statistics) with every site's input tensor
exposed as an extra output.

Sensitivity: a *simulation* graph holds, for each site ``i``, the fake-quantized form of its
inputs and weights behind a gate ``g[i]`` (a graph input): ``x' = x + g[i] * (DQ(Q(x)) - x)``,
``w' = w + g[i] * (w_q - w)``. With all gates 0 it is the fp32 graph exactly; with gate ``i``
alone at 1 it is the graph with site ``i`` alone quantized (the real Q/DQ graph gives the same
numbers: ONNX Runtime dequantizes and runs the float kernel). The scan runs each site alone
over a few utterances held out from calibration and measures the distortion it adds to the
audio: mel-cepstral distortion against fp32 (``bench/quality.py``'s MCD) and SNR. Then sites
are admitted from the least sensitive on, each kept only if the whole graph stays within
``target_mcd_db``. Only the admitted sites get Q/DQ nodes in the written model.

Measured on the medium Piper voice (docs/PERFORMANCE.md): the flow and the first decoder stage
tolerate int8 one layer at a time (MCD 0.4-1.3 dB each), the 64x stage less (1.7-3.9 dB), the
full-rate stage (``ups.2``, ``resblocks.6-8``, ``conv_post``) and its residual sums not at all
(6-21 dB: their rounding noise is white, and speech has little energy at 4-8 kHz). SNR ranks
the layers differently (a flow layer can cost 20 dB of SNR and 0.5 dB of MCD: the decoder maps
small changes of its input to phase changes), so the choice is made on MCD.

Stage B has no normalisation layer (the 36 LayerNorms are in stage A, which stays float32 so
that durations do not depend on the precision). The residual additions are sites of their own
and are measured like the convolutions.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from engines.tools.export import STAGE_A_INPUTS, STAGE_B_INPUTS, atomic_write_bytes, notice, ort_session, prior_on_frames
from core.errors import DeterministicEngineError, EngineUnavailable, InputError

GATE_INPUT = "booktts_qgate"
QMAX = 127.0
#: The sensitivity search admits int8 sites while the scan utterances stay within this MCD against
#: fp32 (the quality gate is MCD <= 1.8 dB on held-out text; this leaves a margin).
DEFAULT_TARGET_MCD_DB = 1.4
CALIBRATION_SEED = 1234
#: Histogram of |x| for activation ranges: log-spaced bins over [1e-6, 1e5).
_LOG_LO, _LOG_HI, _BINS_PER_DECADE = -6.0, 5.0, 200
_HIST_STRIDE = 4
_NBINS = int((_LOG_HI - _LOG_LO) * _BINS_PER_DECADE)
_EDGES = 10.0 ** (_LOG_LO + np.arange(_NBINS + 1) / _BINS_PER_DECADE)


# --------------------------------------------------------------------------- the utterances, from the caller
@dataclass(frozen=True)
class CalibrationSet:
    """The phoneme ids calibration runs on. The engines see no text: the caller makes them
    (:class:`jobs.calibration.CalibrationCorpus` from the shipped corpus)."""

    ids: list
    """Calibration utterances (phoneme ids each): activation ranges are measured over them."""
    scan_ids: list
    """Utterances held out from :attr:`ids` for the sensitivity scan."""
    source: list = field(default_factory=list)
    """Where they came from (the corpus files), for the report."""


#: Makes the :class:`CalibrationSet` of a voice, where an INT8 model must be created on first use.
CalibrationSource = Callable[[object], CalibrationSet]


class PriorFeeder:
    """Stage-B inputs for utterances: fp32 stage A (ONNX Runtime), then the prior on frames with
    the voice's default scales and a seeded generator (as the staged engine does at synthesis)."""

    def __init__(self, stage_a_path: Path, voice, threads: int | None = None, seed: int = CALIBRATION_SEED):
        self.session = ort_session(Path(stage_a_path), threads)
        self.scales = np.array([voice.noise_scale, voice.length_scale, voice.noise_w], dtype=np.float32)
        self.seed = seed

    def feeds(self, seqs: list[list[int]]):
        rng = np.random.default_rng(self.seed)
        for s in seqs:
            ids = np.asarray([s], dtype=np.int64)
            lengths = np.asarray([len(s)], dtype=np.int64)
            dp = rng.standard_normal((1, 2, len(s)), dtype=np.float32)
            m_p, logs_p, dur, frames = self.session.run(None, dict(zip(STAGE_A_INPUTS, (ids, lengths, self.scales, dp))))
            n = int(frames.max())
            eps = rng.standard_normal((1, m_p.shape[1], n), dtype=np.float32)
            z = prior_on_frames(m_p, logs_p, dur, n, eps, float(self.scales[0]))
            yield dict(zip(STAGE_B_INPUTS, (z, frames.astype(np.int64))))


# --------------------------------------------------------------------------- sites
@dataclass
class Site:
    """One quantizable place of the graph."""

    name: str
    """Readable name: the module (``dec.resblocks.3.convs.1``) or ``<module>+residual``."""
    kind: str
    """``conv`` or ``add``."""
    node: str
    """ONNX node name."""
    acts: list
    """Activation tensors quantized at this site's inputs (input index, tensor name)."""
    weight: str | None = None
    """Weight initializer (conv sites)."""
    axis: int = 0
    """Output-channel axis of the weight (0 for Conv, 1 for ConvTranspose)."""


def find_sites(model) -> list[Site]:
    """Every Conv/ConvTranspose with initializer weights, and every Add of two activations that
    come from convolutions (residual additions, skip sums; named after the nearest convolution)."""
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    consts = inits | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    prod = {o: n for n in graph.node for o in n.output}
    conv_name = {}
    sites: list[Site] = []
    for n in graph.node:
        if n.op_type in ("Conv", "ConvTranspose") and len(n.input) > 1 and n.input[1] in inits:
            name = n.input[1][: -len(".weight")] if n.input[1].endswith(".weight") else n.name
            conv_name[n.output[0]] = name
            sites.append(Site(name, "conv", n.name, [(0, n.input[0])], n.input[1],
                              1 if n.op_type == "ConvTranspose" else 0))
    def upstream_conv(t: str, depth: int = 6) -> str | None:
        """The convolution a tensor comes from, through slices, masks, sums and activations."""
        while depth > 0:
            if t in conv_name:
                return conv_name[t]
            n = prod.get(t)
            if n is None or not n.input:
                return None
            t = next((i for i in n.input[::-1] if i in conv_name), n.input[0])
            depth -= 1
        return None

    for n in graph.node:
        if n.op_type != "Add" or len(n.input) != 2 or any(i in consts for i in n.input):
            continue
        if not any(upstream_conv(i) for i in n.input):
            continue
        direct = next((conv_name[i] for i in n.input[::-1] if i in conv_name), None)
        label = f"{direct}+residual" if direct else f"{upstream_conv(n.input[1]) or upstream_conv(n.input[0])}+add"
        if any(x.name == label for x in sites):
            label = f"{label}@{n.name}"
        sites.append(Site(label, "add", n.name, [(0, n.input[0]), (1, n.input[1])]))
    return sites


def site_tensors(sites: list[Site]) -> list[str]:
    return sorted({t for s in sites for _, t in s.acts})


# --------------------------------------------------------------------------- calibration statistics
class RangeStats:
    """Per tensor: exact max |x| and a log-spaced histogram of |x| (zeros counted apart)."""

    def __init__(self, tensors: list[str]):
        self.tensors = list(tensors)
        self.absmax = {t: 0.0 for t in tensors}
        self.hist = {t: np.zeros(_NBINS, dtype=np.int64) for t in tensors}
        self.count = {t: 0 for t in tensors}
        self.steps_per_frame: dict[str, float] = {}

    def update(self, name: str, x: np.ndarray) -> None:
        a = np.abs(np.asarray(x, dtype=np.float32).reshape(-1))
        if not np.all(np.isfinite(a)):
            raise DeterministicEngineError(f"calibration: tensor {name} holds NaN/inf in the fp32 model")
        self.absmax[name] = max(self.absmax[name], float(a.max(initial=0.0)))
        a = a[::_HIST_STRIDE]  # the histogram of every 4th value: millions per tensor, 4x cheaper
        nz = a[a > 0]
        self.count[name] += a.size
        if nz.size:
            b = np.floor((np.log10(nz) - _LOG_LO) * _BINS_PER_DECADE).astype(np.int64)
            self.hist[name] += np.bincount(np.clip(b, 0, _NBINS - 1), minlength=_NBINS)

    def clip(self, name: str, method: str = "mse", percentile: float = 99.999) -> float:
        amax = self.absmax[name]
        if amax <= 0:
            return 1.0
        h = self.hist[name].astype(np.float64)
        if method == "max" or h.sum() == 0:
            return amax
        centers = np.sqrt(_EDGES[:-1] * _EDGES[1:])
        if method == "percentile":
            cum = np.cumsum(h) + (self.count[name] - h.sum())  # zeros sit below every bin
            k = int(np.searchsorted(cum, percentile / 100.0 * self.count[name]))
            return float(min(amax, _EDGES[min(k + 1, _NBINS)]))
        if method != "mse":
            raise InputError(f"unknown calibration method {method!r}; choose mse, max or percentile")
        # expected squared error for clip c: rounding noise (c/127)^2/12 on every value, plus
        # (|x| - c)^2 for the clipped ones; candidates: bin edges from amax/64 to amax.
        lo = np.searchsorted(_EDGES, amax / 64.0)
        hi = np.searchsorted(_EDGES, amax)
        cand = np.append(_EDGES[lo:hi], amax)
        n_total = float(self.count[name])
        best, best_err = amax, math.inf
        for c in cand:
            over = centers > c
            err = n_total * (c / QMAX) ** 2 / 12.0 + float((h[over] * (centers[over] - c) ** 2).sum())
            if err < best_err:
                best, best_err = float(c), err
        return best

    def to_dict(self, method: str) -> dict:
        return {t: {"absmax": self.absmax[t], "clip": self.clip(t, method)} for t in self.tensors}


def collect_ranges(stage_b_model, sites: list[Site], feeds, threads: int | None = None) -> RangeStats:
    """Run the fp32 stage B over ``feeds`` with every site input exposed; gather :class:`RangeStats`."""
    import onnx

    tensors = site_tensors(sites)
    model = onnx.ModelProto()
    model.CopyFrom(stage_b_model)
    have = {o.name for o in model.graph.output}
    for t in tensors:
        if t not in have:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(t))
    sess = ort_session(model.SerializeToString(), threads)
    stats = RangeStats(tensors)
    for fd in feeds:
        outs = sess.run(tensors, fd)
        frames = float(fd["z_p"].shape[-1])
        for t, x in zip(tensors, outs):
            stats.update(t, x)
            stats.steps_per_frame[t] = x.shape[-1] / frames
    return stats


# --------------------------------------------------------------------------- graph building
def quantize_weight(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel int8: (int8 weights, float32 scales along ``axis``)."""
    w = np.asarray(w, dtype=np.float32)
    red = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=red)
    scale = np.where(amax > 0, amax / QMAX, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -QMAX, QMAX).astype(np.int8)
    return q, scale


def _init_map(model) -> dict:
    from onnx import numpy_helper

    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def _rewire(graph, node_name: str, input_index: int, new_tensor: str) -> None:
    for n in graph.node:
        if n.name == node_name:
            n.input[input_index] = new_tensor
            return
    raise KeyError(node_name)


def _topo_insert(graph, new_nodes: list) -> None:
    """Append ``new_nodes`` and re-sort the graph topologically (ONNX requires it)."""
    nodes = list(graph.node) + list(new_nodes)
    avail = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending = nodes
    ordered = []
    while pending:
        rest = []
        for n in pending:
            if all(i in avail for i in n.input):
                ordered.append(n)
                avail.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise DeterministicEngineError("quantize: graph is not a DAG after inserting Q/DQ nodes")
        pending = rest
    del graph.node[:]
    graph.node.extend(ordered)


def build_qdq_model(model, sites: list[Site], clips: dict[str, float], chosen: set[str]):
    """A copy of ``model`` with real Q/DQ pairs at the ``chosen`` sites (names)."""
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = _init_map(model)
    new_nodes, new_inits = [], []
    act_qdq: dict[str, str] = {}  # tensor -> its dequantized twin (shared by every chosen consumer)
    w_done: dict[str, str] = {}

    def act(t: str) -> str:
        if t not in act_qdq:
            s = f"{t}__qscale"
            zp = f"{t}__qzp"
            new_inits.append(numpy_helper.from_array(np.array(clips[t] / QMAX, dtype=np.float32), s))
            new_inits.append(numpy_helper.from_array(np.array(0, dtype=np.int8), zp))
            new_nodes.append(helper.make_node("QuantizeLinear", [t, s, zp], [f"{t}__q"], name=f"{t}__Q"))
            new_nodes.append(helper.make_node("DequantizeLinear", [f"{t}__q", s, zp], [f"{t}__dq"], name=f"{t}__DQ"))
            act_qdq[t] = f"{t}__dq"
        return act_qdq[t]

    drop = set()
    for site in sites:
        if site.name not in chosen:
            continue
        for idx, t in site.acts:
            _rewire(g, site.node, idx, act(t))
        if site.weight is not None and site.weight not in w_done:
            w = inits[site.weight]
            q, scale = quantize_weight(w, site.axis)
            wq, ws, wz = f"{site.weight}__int8", f"{site.weight}__wscale", f"{site.weight}__wzp"
            new_inits += [numpy_helper.from_array(q, wq), numpy_helper.from_array(scale, ws),
                          numpy_helper.from_array(np.zeros(scale.shape, dtype=np.int8), wz)]
            new_nodes.append(helper.make_node("DequantizeLinear", [wq, ws, wz], [f"{site.weight}__dq"],
                                              name=f"{site.weight}__DQ", axis=site.axis))
            w_done[site.weight] = f"{site.weight}__dq"
            drop.add(site.weight)
        if site.weight is not None:
            _rewire(g, site.node, 1, w_done[site.weight])
    still_used = {i for n in list(g.node) + new_nodes for i in n.input}
    keep = [i for i in g.initializer if not (i.name in drop and i.name not in still_used)]
    del g.initializer[:]
    g.initializer.extend(keep + new_inits)
    _topo_insert(g, new_nodes)
    return out


def build_sim_model(model, sites: list[Site], clips: dict[str, float]):
    """The fp32 graph plus, per site i, fake quantization of its inputs and weights behind gate
    ``booktts_qgate[i]`` (a float input of shape [n_sites])."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    inits = _init_map(model)
    g.input.append(helper.make_tensor_value_info(GATE_INPUT, TensorProto.FLOAT, [len(sites)]))
    nodes, new_inits = [], []
    fq: dict[str, str] = {}
    for i, site in enumerate(sites):
        p = f"qsim{i}"
        new_inits.append(numpy_helper.from_array(np.array([i], dtype=np.int64), f"{p}_idx"))
        nodes.append(helper.make_node("Gather", [GATE_INPUT, f"{p}_idx"], [f"{p}_g"], axis=0))
        for idx, t in site.acts:
            if t not in fq:  # DQ(Q(x)) once per tensor
                s, zp = f"{t}__simscale", f"{t}__simzp"
                new_inits += [numpy_helper.from_array(np.array(clips[t] / QMAX, dtype=np.float32), s),
                              numpy_helper.from_array(np.array(0, dtype=np.int8), zp)]
                nodes += [helper.make_node("QuantizeLinear", [t, s, zp], [f"{t}__simq"]),
                          helper.make_node("DequantizeLinear", [f"{t}__simq", s, zp], [f"{t}__simdq"]),
                          helper.make_node("Sub", [f"{t}__simdq", t], [f"{t}__simdelta"])]
                fq[t] = f"{t}__simdelta"
            nodes += [helper.make_node("Mul", [fq[t], f"{p}_g"], [f"{p}_a{idx}_d"]),
                      helper.make_node("Add", [t, f"{p}_a{idx}_d"], [f"{p}_a{idx}"])]
            _rewire(g, site.node, idx, f"{p}_a{idx}")
        if site.weight is not None:
            w = inits[site.weight].astype(np.float32)
            q, scale = quantize_weight(w, site.axis)
            shape = [1] * w.ndim
            shape[site.axis] = -1
            delta = q.astype(np.float32) * scale.reshape(shape) - w
            new_inits.append(numpy_helper.from_array(delta.astype(np.float32), f"{p}_wdelta"))
            nodes += [helper.make_node("Mul", [f"{p}_wdelta", f"{p}_g"], [f"{p}_wd"]),
                      helper.make_node("Add", [site.weight, f"{p}_wd"], [f"{p}_w"])]
            _rewire(g, site.node, 1, f"{p}_w")
    g.initializer.extend(new_inits)
    _topo_insert(g, nodes)
    return out


# --------------------------------------------------------------------------- measurement
from engines.tools.audio_quality import snr_db  # noqa: E402  (one definition, re-exported for the bench)


def mcd_function():
    """The project's mel-cepstral distortion (:mod:`engines.tools.audio_quality`: 0-8 kHz, c1..c24, speech frames)."""
    from engines.tools.audio_quality import mcd

    return mcd


def to_int16(audio: np.ndarray) -> np.ndarray:
    return np.clip(np.asarray(audio, dtype=np.float32) * 32767.0, -32767.0, 32767.0).astype(np.int16).reshape(-1)


def audio_checks(audio: np.ndarray) -> dict:
    """Artefact measures of float audio in [-1, 1]: NaN/inf, clipped samples, DC offset."""
    a = np.asarray(audio, dtype=np.float64).reshape(-1)
    finite = bool(np.all(np.isfinite(a)))
    a = np.nan_to_num(a)
    return {"finite": finite, "clipped_fraction": float(np.mean(np.abs(a) >= 32767.0 / 32768.0)) if a.size else 0.0,
            "dc": float(a.mean()) if a.size else 0.0, "rms": float(np.sqrt((a ** 2).mean())) if a.size else 0.0}


class Scanner:
    """Runs the simulation graph over fixed stage-B inputs for any gate vector; scores against fp32
    (all gates 0) by MCD (mean over the utterances) and SNR (all samples)."""

    def __init__(self, sim_model, feeds: list[dict], n_sites: int, threads: int | None = None):
        self.session = ort_session(sim_model.SerializeToString(), threads)
        self.feeds = feeds
        self.n = n_sites
        self.mcd = mcd_function()
        self.ref = [to_int16(a) for a in self.run(np.zeros(n_sites, dtype=np.float32))]
        self.evals = 0

    def run(self, gates: np.ndarray) -> list[np.ndarray]:
        g = np.asarray(gates, dtype=np.float32)
        return [self.session.run(["audio"], {**fd, GATE_INPUT: g})[0] for fd in self.feeds]

    def score(self, gates: np.ndarray) -> tuple[float, float]:
        """(MCD dB, SNR dB) of the graph with these gates against fp32."""
        self.evals += 1
        outs = [to_int16(a) for a in self.run(gates)]
        mcds = [self.mcd(r, o) for r, o in zip(self.ref, outs)]
        return float(np.mean(mcds)), snr_db(np.concatenate(self.ref), np.concatenate(outs))


@dataclass
class CalibrationReport:
    voice_sha256: str
    method: str
    utterances: int
    scan_utterances: int
    target_mcd_db: float
    sites: list = field(default_factory=list)
    """Per site: name, kind, alone (MCD, SNR with this site alone quantized), int8 (chosen), macs share."""
    int8_sites: int = 0
    int8_mac_share: float = 0.0
    """Share of stage B's multiply-accumulates whose inputs and weights are int8."""
    scan_final: dict = field(default_factory=dict)
    """MCD / SNR of the written model against fp32 on the scan utterances."""
    scan_evals: int = 0
    seconds: dict = field(default_factory=dict)
    corpus: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def choose_sites(scanner: Scanner, sites: list[Site], target_mcd_db: float, patience: int = 12,
                 log=None) -> tuple[dict, set, tuple[float, float]]:
    """Measure each site alone, then admit sites from the least sensitive on while the whole
    graph stays within ``target_mcd_db`` (a site alone above the target is never admitted; the
    search stops after ``patience`` rejections in a row)."""
    n = len(sites)
    alone = {}
    for i, s in enumerate(sites):
        g = np.zeros(n, dtype=np.float32)
        g[i] = 1.0
        alone[s.name] = scanner.score(g)
    order = sorted(range(n), key=lambda i: alone[sites[i].name][0])
    gates = np.zeros(n, dtype=np.float32)
    current = (0.0, math.inf)
    misses = 0
    for i in order:
        if alone[sites[i].name][0] > target_mcd_db or misses >= patience:
            break
        gates[i] = 1.0
        score = scanner.score(gates)
        if score[0] <= target_mcd_db:
            current, misses = score, 0
            if log:
                log(f"  int8 {sites[i].name}: MCD {score[0]:.2f} dB, SNR {score[1]:.1f} dB")
        else:
            gates[i] = 0.0
            misses += 1
    chosen = {sites[i].name for i in range(n) if gates[i] > 0}
    return alone, chosen, current


def site_macs(model, sites: list[Site], steps_per_frame: dict[str, float]) -> dict[str, float]:
    """Multiply-accumulates per stage-B frame of each conv site (0 for additions): input time steps
    per frame x the weight's size (Conv [out, in/groups, k] per output step = per input step at
    stride 1; ConvTranspose [in, out/groups, k] per input step)."""
    inits = _init_map(model)
    return {s.name: 0.0 if s.weight is None else
            float(steps_per_frame.get(s.acts[0][1], 1.0) * np.prod(inits[s.weight].shape)) for s in sites}


def calibrate_stage_b(voice, stage_a_path: Path, stage_b_path: Path, out_path: Path, calibration: CalibrationSet,
                      method: str = "mse", target_mcd_db: float = DEFAULT_TARGET_MCD_DB,
                      threads: int | None = None, progress=None) -> CalibrationReport:
    """Calibrate on ``calibration.ids``, scan on ``calibration.scan_ids``, choose and write ``out_path``
    (Q/DQ stage B) plus ``<out_path>.json`` (the report)."""
    import onnx

    say = progress or (lambda msg: None)
    if not calibration.ids or not calibration.scan_ids:
        raise InputError("calibration needs at least one calibration and one scan utterance")
    t0 = time.perf_counter()
    model = onnx.load(str(stage_b_path))
    sites = find_sites(model)
    scan_ids, cal_ids = calibration.scan_ids, calibration.ids
    feeder = PriorFeeder(stage_a_path, voice, threads)
    say(f"calibration: activation ranges of {len(sites)} sites over {len(cal_ids)} utterances ({method})")
    stats = collect_ranges(model, sites, feeder.feeds(cal_ids), threads)
    clips = {t: stats.clip(t, method) for t in stats.tensors}
    t1 = time.perf_counter()
    say(f"sensitivity scan: each of {len(sites)} sites alone, then the least sensitive together, "
        f"on {len(scan_ids)} held-out utterances (target MCD <= {target_mcd_db} dB)")
    scan_feeds = list(PriorFeeder(stage_a_path, voice, threads, seed=CALIBRATION_SEED + 1).feeds(scan_ids))
    scanner = Scanner(build_sim_model(model, sites, clips), scan_feeds, len(sites), threads)
    alone, chosen, final = choose_sites(scanner, sites, target_mcd_db, log=say)
    t2 = time.perf_counter()
    qdq = build_qdq_model(model, sites, clips, chosen)
    qdq.producer_name = "booktts-quantize"
    for k, v in {"booktts.int8.sites": ",".join(sorted(chosen)), "booktts.int8.method": method,
                 "booktts.source_sha256": voice.model_sha256()}.items():
        e = qdq.metadata_props.add()
        e.key, e.value = k, v
    out_path = Path(out_path)
    atomic_write_bytes(out_path, qdq.SerializeToString())
    macs = site_macs(model, sites, stats.steps_per_frame)
    total = sum(macs.values()) or 1.0
    report = CalibrationReport(
        voice_sha256=voice.model_sha256(), method=method, utterances=len(cal_ids), scan_utterances=len(scan_ids),
        target_mcd_db=target_mcd_db,
        sites=[{"name": s.name, "kind": s.kind, "alone_mcd_db": round(alone[s.name][0], 3),
                "alone_snr_db": round(alone[s.name][1], 2), "int8": s.name in chosen,
                "mac_share": round(macs[s.name] / total, 4),
                "clip": [round(clips[t], 5) for _, t in s.acts]} for s in sites],
        int8_sites=len(chosen), int8_mac_share=round(sum(macs[n] for n in chosen) / total, 4),
        scan_final={"mcd_db": round(final[0], 3), "snr_db": round(final[1], 2)}, scan_evals=scanner.evals,
        seconds={"calibration": round(t1 - t0, 1), "scan": round(t2 - t1, 1), "write": round(time.perf_counter() - t2, 1)},
        corpus=[str(p) for p in calibration.source],
    )
    atomic_write_bytes(out_path.with_suffix(".json"), json.dumps(report.to_dict(), indent=1).encode())
    say(f"INT8 model: {len(chosen)} of {len(sites)} sites in int8 ({100 * report.int8_mac_share:.0f}% of stage-B "
        f"MACs), scan MCD {final[0]:.2f} dB; written to {out_path}")
    return report


def ensure_int8(voice, cache_dir: Path | None = None, calibration: CalibrationSource | None = None,
                threads: int | None = None, **kw) -> Path:
    """The voice's cached INT8 stage B, created on first use from the utterances ``calibration(voice)``
    gives (its caller's: the engines phonemize nothing). Without ``calibration`` a missing model is
    :class:`EngineUnavailable`, one line saying how to make it."""
    from engines.tools.export import FILES, cache_lock, ensure_exported

    staged = ensure_exported(voice, ("fp32",), cache_dir)
    path = staged.directory / FILES["int8"]
    if _int8_ok(path, voice):
        return path
    if calibration is None:
        raise EngineUnavailable(f"voice {voice.name} has no INT8 model in {staged.directory} yet and nothing was "
                                f"given to calibrate it on; run it once through cli.py (run, worker), or make it "
                                f"with: python cli.py calibrate --out DIR")
    with cache_lock(staged.directory):
        if _int8_ok(path, voice):
            return path
        cal = calibration(voice)
        notice(f"creating the INT8 model of voice {voice.name} in {staged.directory} from the calibration corpus "
               f"({len(cal.ids)} utterances; one time, a few minutes on CPU)")
        calibrate_stage_b(voice, staged.stage_a, staged.stage_b["fp32"], path, cal, threads=threads,
                          progress=_progress, **kw)
    return path


def _progress(msg: str) -> None:
    """Steps on stderr, per-site details only in the log."""
    if msg.startswith("  "):
        import logging

        logging.getLogger("booktts.quantize").info(msg.strip())
    else:
        notice(msg)


def read_report(path: Path) -> dict:
    """The calibration report written beside an INT8 model (``stage_b.int8.json``)."""
    try:
        return json.loads(Path(path).with_suffix(".json").read_text())
    except (OSError, ValueError):
        return {}


def _int8_ok(path: Path, voice) -> bool:
    rep = path.with_suffix(".json")
    if not (path.is_file() and rep.is_file()):
        return False
    try:
        return json.loads(rep.read_text()).get("voice_sha256") == voice.model_sha256()
    except (OSError, ValueError):
        return False
