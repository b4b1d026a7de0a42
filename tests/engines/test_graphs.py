"""Stage A replayed as CUDA graphs (engines.torch_vits.graphs, the engine's BOOKTTS_TORCH_GRAPHS): what
can be checked without a GPU, and, through a child process, with one.

On CPU: the row padding that makes stage A's chunk shapes repeat (sizes, keys, padding rows that
change no real row of the voice's stage A, channels-last with ordinary GEMMs here and through the
GEMM kernel under Triton's interpreter in ``graphs_cases.py``), the switch's resolution and its
one-line refusal on CPU, and :class:`GraphCache`'s bookkeeping (first sight eager, capture on the
second, replays after, a failed capture) with the CUDA calls replaced by a stand-in. On a GPU
``graphs_cases.py`` also captures and replays the real stage A and checks it bit for bit against
eager runs.
"""

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")

from engines import EngineSpec  # noqa: E402
from engines.base import Scales, SynthesisBatch  # noqa: E402
from engines.torch_engine import STAGE_A_ROW_STEP, TorchEngine, pad_stage_a_inputs  # noqa: E402
from engines.torch_options import ENV, TorchOptions  # noqa: E402
from engines.torch_vits.graphs import GraphCache, _Graph  # noqa: E402
from core.errors import EngineUnavailable  # noqa: E402
from core.settings import SettingError  # noqa: E402

HERE = Path(__file__).resolve().parent


def shell_engine(**attrs):
    """A TorchEngine without weights: enough for stage_a_rows, stage_a_chunks and the switch's resolution."""
    eng = TorchEngine.__new__(TorchEngine)
    eng.max_phonemes_per_chunk = 65536
    for k, v in attrs.items():
        setattr(eng, k, v)
    return eng


# ---------------------------------------------------------------------------- padding and keys
def test_pad_stage_a_inputs():
    ids = torch.arange(1, 7).view(2, 3)
    lengths = torch.tensor([3, 2])
    noise = torch.randn(2, 2, 3)
    p_ids, p_len, p_noise = pad_stage_a_inputs(ids, lengths, noise, 5)
    assert p_ids.shape == (5, 3) and p_len.shape == (5,) and p_noise.shape == (5, 2, 3)
    assert torch.equal(p_ids[:2], ids) and not p_ids[2:].any() and p_ids.dtype == ids.dtype
    assert p_len.tolist() == [3, 2, 1, 1, 1]  # length 1: a valid row (one real key), never an empty softmax
    assert torch.equal(p_noise[:2], noise) and not p_noise[2:].any()
    same = pad_stage_a_inputs(ids, lengths, noise, 2)
    assert all(torch.equal(a, b) for a, b in zip(same, (ids, lengths, noise)))
    with pytest.raises(ValueError):
        pad_stage_a_inputs(ids, lengths, noise, 1)


@pytest.mark.parametrize("budget", [65536, 2000, 100])
def test_stage_a_rows(budget):
    eng = shell_engine(max_phonemes_per_chunk=budget)
    for tc in (32, 64, 96, 160, 320, 512):
        cap = budget // tc
        sizes = set()
        for n in range(1, max(cap, 1) + 1):
            r = eng.stage_a_rows(n, tc)
            # a multiple of the step (fewer than a step of padding rows), or the width's full chunk
            assert n <= r <= max(n, cap) and (r % STAGE_A_ROW_STEP == 0 or r == max(n, cap)), (n, tc)
            assert r - n < STAGE_A_ROW_STEP, (n, tc)
            sizes.add(r)
        if cap >= 1:
            assert eng.stage_a_rows(cap, tc) == cap  # a full chunk is not padded
            assert len(sizes) <= cap // STAGE_A_ROW_STEP + 1, sizes  # one size per step: bounded graphs per width
    assert eng.stage_a_rows(1, budget * 2) == 1  # a chunk wider than the budget holds one item, unpadded


def test_keys_repeat_across_batches():
    # the engine's keys (padded rows, width) over many batches of random lengths: few distinct
    # ones, so after the first batches nearly every chunk replays a captured graph
    eng = shell_engine(max_phonemes_per_chunk=8192)
    rng = np.random.default_rng(0)
    keys, chunks = set(), 0
    for _ in range(40):
        lengths = rng.integers(3, 300, size=256)
        for rows, tc in eng.stage_a_chunks(lengths, int(lengths.max())):
            keys.add((eng.stage_a_rows(len(rows), tc), tc))
            chunks += 1
    assert chunks > 300 and len(keys) < chunks / 3, (len(keys), chunks)
    for r, tc in keys:
        assert r % STAGE_A_ROW_STEP == 0 or r == 8192 // tc, (r, tc)  # every key's rows are an allowed size


# ---------------------------------------------------------------------------- padding rows change no real row
@pytest.fixture(scope="module")
def fast_model(voice):
    pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")
    from engines.torch_vits.hparams import VitsHParams
    from engines.torch_vits.model import VitsSynthesizer
    from engines.tools.weights import onnx_state_and_hparams

    state, hp = onnx_state_and_hparams(voice.model_path)
    m = VitsSynthesizer(VitsHParams.from_dict(hp))
    m.load_weights({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()})
    return m.eval().use_fast_stage_a()


def sentences(n, seed):
    d = np.load(HERE.parents[1] / "bench" / "data" / "alice_ids.npz")
    off = d["offsets"]
    seqs = [d["ids"][off[i]:off[i + 1]].astype(np.int64) for i in range(len(off) - 1)]
    pool = [s for s in seqs if 8 <= len(s) <= 150]
    rng = np.random.default_rng(seed)
    pick = [pool[i] for i in rng.choice(len(pool), size=n, replace=False)]
    t = -(-max(len(s) for s in pick) // 32) * 32
    ids = torch.zeros(n, t, dtype=torch.long)
    for i, s in enumerate(pick):
        ids[i, :len(s)] = torch.from_numpy(s)
    noise = torch.randn(n, 2, t, generator=torch.Generator().manual_seed(seed)) * 0.8
    return ids, torch.tensor([len(s) for s in pick]), noise


@pytest.mark.parametrize("n, rows", [(5, 6), (7, 8), (3, 12), (1, 2)])
def test_padding_rows_change_no_real_row(fast_model, n, rows):
    # every op of the channels-last stage A treats each row on its own; only float rounding of a
    # GEMM whose blocking depends on the row count may differ (1e-6 of the largest value)
    ids, lengths, noise = sentences(n, seed=n)
    with torch.inference_mode():
        want = fast_model.stage_a(ids, lengths, noise, 1.1)
        got = fast_model.stage_a(*pad_stage_a_inputs(ids, lengths, noise, rows), 1.1)
    assert all(g.shape[0] == rows for g in got)
    for g, w in zip(got[:2], want[:2]):
        assert float((g[:n] - w).abs().max()) <= 1e-6 * float(w.abs().max())
    assert torch.equal(got[2][:n], want[2]) and torch.equal(got[3][:n], want[3])
    assert all(torch.isfinite(g[n:].float()).all() for g in got)  # padding rows stay finite


@pytest.fixture(scope="module")
def kernel_results(voice):
    pytest.importorskip("triton", reason="triton is not installed: stage A's GEMM kernel needs it")
    pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")
    from tests.engines.kernel_child import run_cases

    return run_cases(HERE / "graphs_cases.py", drop_env=("TRITON_INTERPRET",))


def test_padding_rows_through_the_gemm_kernel(kernel_results):
    # the engine's default stage A on CUDA (GEMMs in the Triton kernel): padding rows change no real row
    device, r = kernel_results
    for rows, got in r["padding"].items():
        assert got["durations_equal"] and got["frames_equal"] and got["padding_finite"], (rows, got)
        assert got["prior_rel"] <= (1e-6 if device == "cpu" else 2e-5), (rows, got)


def test_graphs_on_the_gpu(kernel_results):
    # on a GPU: captured and replayed stage A is bitwise the eager one, on any stream, after other captures
    device, r = kernel_results
    if device != "cuda":
        pytest.skip("CUDA graphs need a GPU (graphs_cases.py runs them there)")
    g = r["graphs"]
    for name in ("first_sight_eager", "capture", "replay_other_values", "replay_same_values", "outputs_are_static",
                 "other_key_first_sight", "other_key_capture", "replay_after_other_capture", "replay_on_side_stream"):
        assert g[name], (name, g)
    assert g["stats"] == {"eager": 2, "captures": 2, "replays": 6, "bypassed": 0, "primed": 0} and g["graphs"] == 2, g
    f = r["failure"]
    assert f["equal"] and not f["enabled"] and f["error"] and f["cuda_ok"], f
    assert len(f["warnings"]) == 1 and "\n" not in f["warnings"][0], f
    assert f["stats"] == {"eager": 1, "captures": 0, "replays": 0, "bypassed": 2, "primed": 0}, f


GRAPHS_ENV = ENV["cuda_graphs"]


# ---------------------------------------------------------------------------- the switch
def test_switch_on_cpu(voice, monkeypatch):
    monkeypatch.delenv(GRAPHS_ENV, raising=False)
    eng = TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1), fast_stage_a=True)
    assert eng.stage_a_graphs is False and eng.info.extra["stage_a_graphs"] is False
    assert eng.stage_a_graph_stats() == {"on": False, "graphs": 0, "eager": 0, "captures": 0, "replays": 0,
                                         "bypassed": 0, "primed": 0}
    monkeypatch.setenv(GRAPHS_ENV, "0")
    assert TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1)).stage_a_graphs is False
    monkeypatch.setenv(GRAPHS_ENV, "1")
    with pytest.raises(EngineUnavailable) as exc:
        TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1), fast_stage_a=True)
    msg = str(exc.value)
    assert "\n" not in msg and GRAPHS_ENV in msg and "CUDA" in msg and "cuda:0" in msg, msg


@pytest.mark.parametrize("env, fast, want", [
    (None, True, True),         # CUDA default: the channels-last eager stage A
    (None, False, False),       # the channel-first stage A: no graphs
    ("0", True, False),
    ("1", True, True),
    ("1", False, "refused"),    # asked for, but the stage A it replays is off
    ("yes", True, "bad value"),  # not 0/1: one line naming the variable (core.settings)
], ids=["default", "channel-first", "env-off", "env-on", "env-on-no-fast-a", "other-value"])
def test_switch_on_cuda(env, fast, want):
    # the resolution for a CUDA engine, without one: a shell with the attributes it reads
    if want == "bad value":
        with pytest.raises(SettingError, match=GRAPHS_ENV):
            TorchOptions.from_env({GRAPHS_ENV: env})
        return
    on = TorchOptions.from_env({} if env is None else {GRAPHS_ENV: env}).flag("cuda_graphs")
    eng = shell_engine(is_cuda=True, device=torch.device("cuda:0"))
    if want == "refused":
        with pytest.raises(EngineUnavailable, match="channels-last stage A"):
            eng._resolve_stage_a_graphs(on, fast)
    else:
        assert eng._resolve_stage_a_graphs(on, fast) is want


# ---------------------------------------------------------------------------- GraphCache
def test_graph_cache_refuses_cpu():
    with pytest.raises(ValueError, match="CUDA device"):
        GraphCache(lambda x: x, "cpu")


class _StandIn:
    """In place of a captured ``torch.cuda.CUDAGraph``: a replay runs the function again on the static
    inputs and writes the results into the static outputs, as a real replay does."""

    def __init__(self, fn, inputs, args, outputs):
        self.fn, self.inputs, self.args, self.outputs = fn, inputs, args, outputs

    def replay(self):
        res = self.fn(*self.inputs, *self.args)
        for o, v in zip(self.outputs, (res,) if isinstance(res, torch.Tensor) else res):
            o.copy_(v)


class StandInCache(GraphCache):
    """GraphCache with its one CUDA-specific step (the capture) replaced by :class:`_StandIn`; ``fail``:
    the capture raises instead."""

    fail = False

    def _wait(self):
        pass  # nothing runs asynchronously here

    def _capture(self, inputs, args):
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing\nsecond line")
        static = tuple(x.clone() for x in inputs)
        out = self.fn(*static, *args)
        single = isinstance(out, torch.Tensor)
        outputs = tuple(o.clone() for o in ((out,) if single else out))
        return _Graph(_StandIn(self.fn, static, args, outputs), static, outputs, single)


def affine(x, y, scale):
    return x * scale + y, (x - y).sum(dim=-1)


def test_graph_cache_capture_after_one_captures_on_first_sight():
    cache = StandInCache(affine, "cuda:0", capture_after=1)
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    want = affine(x, y, 2.0)
    r1 = cache(("k", 2.0), (x, y), 2.0)  # first sight: captured and replayed, no eager call
    assert ("k", 2.0) in cache and cache.stats.as_dict() == {"eager": 0, "captures": 1, "replays": 1, "bypassed": 0, "primed": 0}
    assert all(torch.equal(a, b) for a, b in zip(r1, want))
    x2 = torch.randn(4, 3)
    r2 = cache(("k", 2.0), (x2, y), 2.0)  # replayed on new values
    assert cache.stats.captures == 1 and cache.stats.replays == 2
    assert all(torch.equal(a, b) for a, b in zip(r2, affine(x2, y, 2.0)))
    with pytest.raises(ValueError, match="capture_after"):
        StandInCache(affine, "cuda:0", capture_after=3)


def test_graph_cache_first_sight_capture_replay():
    cache = StandInCache(affine, "cuda:0")
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    want = affine(x, y, 2.0)
    r1 = cache(("k", 2.0), (x, y), 2.0)  # first sight: eager
    assert len(cache) == 0 and cache.stats.as_dict() == {"eager": 1, "captures": 0, "replays": 0, "bypassed": 0, "primed": 0}
    r2 = cache(("k", 2.0), (x, y), 2.0)  # second: captured, replayed
    assert ("k", 2.0) in cache and cache.stats.captures == 1 and cache.stats.replays == 1
    x2 = torch.randn(4, 3)
    r3 = cache(("k", 2.0), (x2, y), 2.0)  # replay with new values: the static outputs are overwritten
    assert all(torch.equal(a, b) for a, b in zip(r1, want))
    assert all(torch.equal(a, b) for a, b in zip(r3, affine(x2, y, 2.0)))
    assert r3[0] is r2[0]  # the same static tensor: r2's values are gone (consume before the next replay)
    assert cache.stats.as_dict() == {"eager": 1, "captures": 1, "replays": 2, "bypassed": 0, "primed": 0}
    x5, y5 = torch.randn(5, 3), torch.randn(5, 3)  # other shapes under the same key: another graph
    assert all(torch.equal(a, b) for a, b in zip(cache(("k", 2.0), (x5, y5), 2.0), affine(x5, y5, 2.0)))
    assert cache.stats.eager == 2 and len(cache) == 1
    cache(("k", 2.0), (x5, y5), 2.0)
    assert cache.stats.captures == 2 and len(cache) == 2
    single = StandInCache(lambda x: x * 3, "cuda:0")
    for _ in range(3):
        out = single("s", (x,))
        assert isinstance(out, torch.Tensor) and torch.equal(out, x * 3)
    cache.reset()  # e.g. re-packed weights: every graph dropped, every key new again
    assert len(cache) == 0
    cache(("k", 2.0), (x, y), 2.0)
    assert cache.stats.eager == 3 and len(cache) == 0


def test_graph_cache_bound_and_switch():
    cache = StandInCache(affine, "cuda:0", max_graphs=1)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    for key in ("a", "a", "b", "b", "b"):
        cache(key, (x, y), 1.0)
    assert len(cache) == 1 and "a" in cache and cache.stats.eager == 4  # "b" past the bound: eager
    cache.enabled = False  # switched off by the caller: eager, counted as bypassed
    assert all(torch.equal(a, b) for a, b in zip(cache("a", (x, y), 1.0), affine(x, y, 1.0)))
    assert cache.stats.bypassed == 1


def test_graph_cache_failed_capture_warns_once_and_runs_eagerly():
    cache = StandInCache(affine, "cuda:0", name="stage A")
    cache.fail = True
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    cache("k", (x, y), 1.0)
    with pytest.warns(RuntimeWarning) as caught:
        got = cache("k", (x, y), 1.0)  # the capture fails: the eager result, graphs off
        again = cache("j", (x, y), 1.0)
    assert len(caught) == 1
    msg = str(caught[0].message)
    assert "\n" not in msg and "stage A" in msg and "RuntimeError" in msg and "second line" not in msg, msg
    assert all(torch.equal(a, b) for a, b in zip(got, affine(x, y, 1.0)))
    assert all(torch.equal(a, b) for a, b in zip(again, affine(x, y, 1.0)))
    assert not cache.enabled and cache.error.startswith("RuntimeError: operation not permitted")
    assert len(cache) == 0 and cache.stats.as_dict() == {"eager": 1, "captures": 0, "replays": 0, "bypassed": 2, "primed": 0}


# ---------------------------------------------------------------------------- the engine's use of it
@pytest.fixture(scope="module")
def engine(voice):
    pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")
    # small stage-A chunks: several widths, full chunks and partial ones that are padded
    return TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=2, max_batch=64), fast_stage_a=True,
                       max_phonemes_per_chunk=512, max_frames_per_chunk=2048)


def batch_of(n, seed):
    rng = np.random.default_rng(seed)
    seqs = [[int(v) for v in rng.integers(1, 120, size=int(rng.integers(4, 60)))] for _ in range(n)]
    return SynthesisBatch.from_sequences(seqs, Scales(0.667, 1.0, 0.8), seed=seed)


def test_engine_with_graphs_gives_the_same_audio(engine, monkeypatch):
    # the engine's keys, padding and output slicing, with the stand-in cache in place of CUDA graphs:
    # the same audio as the engine without graphs, batch after batch (first sight, capture, replay);
    # every key's rows are stage_a_rows of a chunk
    eng = engine
    batches = [batch_of(16, 1), batch_of(16, 2), batch_of(16, 1)]
    ref = [eng.synthesize(b) for b in batches]
    keys = []

    class Recording(StandInCache):
        def __call__(self, key, inputs, *args):
            keys.append(key)
            return super().__call__(key, inputs, *args)

    cache = Recording(eng.model.stage_a, "cuda:0", name="stage A")
    monkeypatch.setattr(eng, "_graphs", cache)
    monkeypatch.setattr(eng, "stage_a_graphs", True)
    monkeypatch.setattr(eng, "_graphs_for", None)
    got = [eng.synthesize(b) for b in batches]
    stats = eng.stage_a_graph_stats()
    assert stats["on"] and stats["captures"] > 0 and stats["replays"] > 0 and stats["eager"] > 0, stats
    for g, r in zip(got, ref):
        assert np.array_equal(g.sample_lengths, r.sample_lengths)
        diff = np.abs(g.audio.astype(np.int32) - r.audio)
        # rows past a chunk's items change no item's durations; CPU GEMMs blocked by row count may round
        # the prior differently: at most one int16 step at a few samples (as test_torch_engine_host's padding)
        assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, (diff.max(), (diff > 0).sum())
    assert np.array_equal(got[0].audio, got[2].audio)  # the same batch and seed: eager first sight == replay
    assert keys and all(len(k) == 2 for k in keys)  # (rows, width): the length scale is an input, not a key
    chunks = [c for b in batches for c in eng.stage_a_chunks(b.lengths, b.phoneme_ids.shape[1])]
    assert {(eng.stage_a_rows(len(r), tc), tc) for r, tc in chunks} == set(keys)
    assert any(eng.stage_a_rows(len(r), tc) > len(r) for r, tc in chunks)  # padding did happen


def test_engine_graphs_serve_every_length_scale(engine, monkeypatch):
    # one graph per (rows, width) for all speaking rates: a batch at another length scale replays the
    # graphs captured at 1.0 and gets the durations and audio of the engine without graphs at its scale
    eng = engine
    slow = batch_of(16, 1)
    slow.scales = Scales(0.667, 1.37, 0.8)
    ref = eng.synthesize(slow)
    cache = StandInCache(eng.model.stage_a, "cuda:0", name="stage A")
    monkeypatch.setattr(eng, "_graphs", cache)
    monkeypatch.setattr(eng, "stage_a_graphs", True)
    monkeypatch.setattr(eng, "_graphs_for", None)
    eng.synthesize(batch_of(16, 1))
    eng.synthesize(batch_of(16, 1))  # captured at 1.0
    held = len(cache)
    replays = cache.stats.replays
    got = eng.synthesize(slow)
    assert len(cache) == held and cache.stats.captures == held and cache.stats.replays > replays
    assert np.array_equal(got.sample_lengths, ref.sample_lengths)
    assert got.sample_lengths.sum() > eng.synthesize(batch_of(16, 1)).sample_lengths.sum() * 1.2
    diff = np.abs(got.audio.astype(np.int32) - ref.audio)
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, (diff.max(), (diff > 0).sum())


def test_engine_repack_drops_graphs(engine, monkeypatch):
    # graphs read the packed weights they were captured with: a re-pack (new weights, kernel switch,
    # device move) must drop them
    eng = engine
    cache = StandInCache(eng.model.stage_a, "cuda:0", name="stage A")
    monkeypatch.setattr(eng, "_graphs", cache)
    monkeypatch.setattr(eng, "stage_a_graphs", True)
    monkeypatch.setattr(eng, "_graphs_for", None)
    ids, lengths, noise = sentences(3, seed=4)
    with torch.inference_mode():
        for _ in range(2):
            out = eng._run_stage_a(ids, lengths, noise, 1.0)
        assert len(cache) == 1 and out[0].shape[0] == eng.stage_a_rows(3, ids.shape[1])
        eng.model.use_fast_stage_a(True)  # re-pack
        eng._run_stage_a(ids, lengths, noise, 1.0)
    assert len(cache) == 0 and eng._graphs_for is eng.model.packed_stage_a


def test_engine_mixes_scales_in_one_batch(engine, monkeypatch):
    # jobs of several speaking rates and noise settings in one call (SynthesisBatch.item_scales): each
    # noise-free item gets the durations and audio it gets in a batch of its own scales, eagerly and
    # through (stand-in) graphs; items with noise get their own noise, not their neighbours' zero
    eng = engine
    assert eng.info.per_item_scales
    base = batch_of(12, 3)
    seqs = [[int(v) for v in base.phoneme_ids[i, :base.lengths[i]]] for i in range(len(base))]
    kinds = [Scales(0.0, 1.0, 0.0), Scales(0.0, 1.37, 0.0), Scales(0.667, 0.8, 0.8)]
    per = [kinds[i % 3] for i in range(len(seqs))]
    mixed = SynthesisBatch.from_sequences(seqs, kinds[0], seed=5, item_scales=per)
    assert mixed.item_scales is not None and mixed.scales_of(1).length_scale == pytest.approx(1.37)

    def alone(k, scales=None):
        idx = [i for i in range(len(seqs)) if i % 3 == k]
        return idx, eng.synthesize(SynthesisBatch.from_sequences([seqs[i] for i in idx], scales or kinds[k], seed=5))

    refs = {k: alone(k) for k in (0, 1)}
    quiet_idx, quiet = alone(2, Scales(0.0, 0.8, 0.0))
    runs = [eng.synthesize(mixed)]
    cache = StandInCache(eng.model.stage_a, "cuda:0", name="stage A")
    monkeypatch.setattr(eng, "_graphs", cache)
    monkeypatch.setattr(eng, "stage_a_graphs", True)
    monkeypatch.setattr(eng, "_graphs_for", None)
    runs += [eng.synthesize(mixed) for _ in range(3)]  # first sight, capture, replay
    assert cache.stats.replays > 0
    for got in runs:
        for k, (idx, ref) in refs.items():
            for j, i in enumerate(idx):
                assert int(got.sample_lengths[i]) == int(ref.sample_lengths[j]), (k, i)
                diff = np.abs(got.item(i).astype(np.int32) - ref.item(j))
                # other chunk companions than in its own batch: CPU GEMMs blocked by row count round the
                # prior differently, by at most one int16 step (at under 1% of the samples here)
                assert diff.max() <= 1 and (diff > 0).mean() < 2e-2, (k, i, diff.max(), (diff > 0).mean())
        noisy = [not (got.sample_lengths[i] == quiet.sample_lengths[j]
                      and np.array_equal(got.item(i), quiet.item(j))) for j, i in enumerate(quiet_idx)]
        assert all(noisy), "an item with noise scales came out as if it had none"
    _, at_one = alone(1, kinds[0])  # the 1.37 items at 1.0: the mixed call did not give them its first rate
    assert runs[0].sample_lengths[refs[1][0]].sum() > at_one.sample_lengths.sum() * 1.2


def test_graph_cache_prime_captures_ahead_and_counts_calls():
    cache = StandInCache(affine, "cuda:0")
    x, y = torch.ones(3), torch.arange(3.0)
    assert cache.prime("k", (x, y), 2.0) and not cache.prime("k", (x, y), 2.0)  # once per key and shapes
    assert cache.stats.as_dict() == {"eager": 0, "captures": 1, "replays": 0, "bypassed": 0, "primed": 1}
    out, _ = cache("k", (x * 5, y), 2.0)  # the first call replays: no eager first sight, no capture
    assert torch.equal(out, x * 10 + y) and cache.stats.eager == 0 and cache.stats.replays == 1
    cache("j", (x, y), 2.0)
    cache("j", (x, y), 2.0)
    assert cache.calls == {"k": 1, "j": 2}
    cache.fail = True
    assert not cache.prime("i", (x, y), 2.0) and not cache.enabled  # a failed capture: graphs off, as in a call


def test_engine_prepares_the_shapes_an_earlier_engine_met(engine, monkeypatch):
    # a worker records the shape profile of its engine; the next engine of the node captures those
    # shapes before its first batch (prepare_shapes), whose chunks then all replay: no eager first sight
    eng = engine
    batches = [batch_of(16, 1), batch_of(16, 2)]
    ref = [eng.synthesize(b) for b in batches]

    def fresh_cache():
        monkeypatch.setattr(eng, "_graphs", StandInCache(eng.model.stage_a, "cuda:0", name="stage A"))
        monkeypatch.setattr(eng, "stage_a_graphs", True)
        monkeypatch.setattr(eng, "_graphs_for", None)

    fresh_cache()
    for b in batches:
        eng.synthesize(b)
    profile = eng.shape_profile()
    keys = {(r, w) for r, w, _ in profile["stage_a"]}
    chunks = [c for b in batches for c in eng.stage_a_chunks(b.lengths, b.phoneme_ids.shape[1])]
    assert keys == {(eng.stage_a_rows(len(r), tc), tc) for r, tc in chunks} and profile["stage_b"] == []
    fresh_cache()  # the next process
    damaged = {"stage_a": profile["stage_a"] + [["x", 1, 1], [10_000, 64, 99], [9, 64, 1]], "stage_b": [[3, 77, 5]]}
    report = eng.prepare_shapes(damaged, budget_s=600)
    assert report["captured"] == len(keys) and report["skipped"] == 4, report  # foreign entries are skipped
    got = [eng.synthesize(b) for b in batches]
    stats = eng.stage_a_graph_stats()
    assert stats["eager"] == 0 and stats["primed"] == len(keys) and stats["replays"] >= len(chunks), stats
    for g, r in zip(got, ref):
        assert np.array_equal(g.sample_lengths, r.sample_lengths)
        diff = np.abs(g.audio.astype(np.int32) - r.audio)
        assert diff.max() <= 1 and (diff > 0).mean() < 1e-3, (diff.max(), (diff > 0).sum())
    assert eng.prepare_shapes(profile, budget_s=0)["captured"] == 0  # no time: nothing prepared
