"""Loudness statistics per utterance (jobs/loudness_stats.py) and the streaming chapter writer
(jobs/loudness_stream.py), checked on real synthesized speech (the ONNX CPU engine) against
pyloudnorm and the whole-signal functions of jobs/loudness.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pyloudnorm
import pytest
from scipy.signal import resample_poly

from jobs import loudness as L
from jobs import loudness_stats as S
from jobs import loudness_stream as LS
from tests.conftest import DATA

#: Pause patterns (seconds after each utterance, cycled): the defaults' sentence and paragraph
#: pauses, and pauses shorter than the statistics' 50 ms tail, down to none.
PAUSES = {"defaults": [0.25, 0.25, 0.6], "short": [0.0, 0.003, 0.02, 0.1], "long": [1.0, 0.25]}


@pytest.fixture(scope="module")
def speech(voice):
    """A dozen sentences of tests/data/short-story.txt as the voice speaks them (int16 each), the same
    samples in every run: from an engine of one ONNX Runtime session made here (the voice's graph draws
    its noise from the session's generator, so the shared `onnx_engine` gives other audio after other
    tests' calls, and under pytest-xdist those differ from run to run)."""
    from engines import EngineSpec
    from engines.base import Scales, SynthesisBatch
    from engines.onnx_cpu import OnnxEngine
    from jobs.phonemize import Phonemizer

    engine = OnnxEngine(voice, EngineSpec(threads=1, max_batch=16))
    text = (DATA / "short-story.txt").read_text(encoding="utf-8")
    sentences = [s.strip() + "." for s in text.replace("\n", " ").split(".") if len(s.split()) >= 3][:12]
    ph = Phonemizer(voice)
    res = engine.synthesize(SynthesisBatch.from_sequences([ph(s).ids for s in sentences],
                                                          Scales(0.667, 1.0, 0.8), seed=1))
    return [np.array(res.item(i)) for i in range(len(res))], voice.sample_rate


def chapter(utts, sr, pauses):
    """(int16 pieces, [(offset, utterance)], samples) of the utterances joined with ``pauses``."""
    pieces, placed, off = [], [], 0
    for i, u in enumerate(utts):
        p = int(round(pauses[i % len(pauses)] * sr))
        placed.append((off, u))
        pieces += [u, np.zeros(p, np.int16)]
        off += len(u) + p
    return pieces, placed, off


@pytest.mark.parametrize("pattern", sorted(PAUSES))
def test_combined_utterance_stats_agree_with_pyloudnorm_on_the_joined_chapter(speech, pattern):
    utts, sr = speech
    pieces, placed, n = chapter(utts, sr, PAUSES[pattern])
    x = np.concatenate(pieces).astype(np.float64) / 32768.0
    # the statistics as the record keeps them (JSON, 0.01 dB steps)
    stats = [(off, S.UtteranceStats.from_json(json.loads(json.dumps(S.utterance_stats(u, sr).to_json())), len(u), sr))
             for off, u in placed]
    c = S.combine(stats, n, sr)
    ref = pyloudnorm.Meter(sr).integrated_loudness(x)
    assert abs(c.integrated_lufs() - ref) < 0.05, (c.integrated_lufs(), ref)
    assert abs(c.rms_db() - L.rms_db(x.astype(np.float32))) < 1e-6
    assert c.sample_peak_db() == pytest.approx(L.sample_peak_db(x.astype(np.float32)), abs=1e-6)
    # the true peak: exact where pauses are at least the interpolation filter's reach
    assert abs(c.true_peak_db() - L.true_peak_db(x.astype(np.float32))) < (0.05 if pattern == "short" else 1e-4)
    # a chapter whose utterances were louder by 6 dB reads as pyloudnorm reads that chapter (not
    # always exactly 6 dB louder: a quiet block may cross the absolute gate, and the ONNX voice's
    # noise is not seeded, so whether one does changes from run to run)
    loud = S.combine([(off, st.scaled(2.0)) for off, st in stats], n, sr)
    assert abs(loud.integrated_lufs() - pyloudnorm.Meter(sr).integrated_loudness(x * 2.0)) < 0.05


def test_stream_meter_is_the_whole_signal_measurement_in_any_chunking(speech):
    utts, sr = speech
    pieces, _, n = chapter(utts, sr, PAUSES["defaults"])
    x = np.concatenate(pieces)
    xf = x.astype(np.float32) / 32768.0
    for cut in (1, 777, 1 << 15):
        m = S.StreamMeter(sr)
        for a in range(0, len(x), cut if cut > 1 else len(x)):
            m.feed(x[a:a + (cut if cut > 1 else len(x))])
        r = m.result()
        assert r.samples == n
        assert abs(r.integrated_lufs() - L.integrated_lufs(xf, sr)) < 1e-3
        assert abs(r.true_peak_db() - L.true_peak_db(xf)) < 1e-6
        assert abs(r.rms_db() - L.rms_db(xf)) < 1e-9


def _device(name):
    torch = pytest.importorskip("torch", reason="the torch implementation needs torch")
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device here (CPU-only CI runs the same functions on CPU tensors)")
    return torch, name


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_statistics_match_numpy(speech, device):
    torch, dev = _device(device)
    utts, sr = speech
    width = max(len(u) for u in utts) + 999
    audio = torch.full((len(utts), width), 4321, dtype=torch.int16)  # past each row's length: ignored
    for i, u in enumerate(utts):
        audio[i, :len(u)] = torch.from_numpy(u)
    audio = audio.to(dev)
    got = S.utterance_stats_torch(audio, [len(u) for u in utts], sr)
    floats = S.utterance_stats_torch(audio.float() / 32768.0, [len(u) for u in utts], sr)
    for u, a, f in zip(utts, got, floats):
        b = S.utterance_stats(u, sr)
        for t in (a, f):
            assert t.samples == b.samples and len(t.k) == len(b.k) == S.n_sub(len(u), sr)
            assert np.max(np.abs(t.k - b.k)) <= 1e-5 * b.k.max()
            assert t.ss == pytest.approx(b.ss, rel=1e-5)  # float32 sums on the device
            assert t.tp == pytest.approx(b.tp, rel=1e-5) and t.sp == pytest.approx(b.sp, rel=1e-6)


def test_record_form_refuses_what_does_not_fit(speech):
    utts, sr = speech
    st = S.utterance_stats(utts[0], sr)
    d = st.to_json()
    assert S.UtteranceStats.from_json(d, len(utts[0]), sr) is not None
    assert S.UtteranceStats.from_json(d, len(utts[0]) + S.sub_samples(sr) * 3, sr) is None  # other length
    assert S.UtteranceStats.from_json({**d, "v": 0}, len(utts[0]), sr) is None
    assert S.UtteranceStats.from_json(d, len(utts[0]), 24000) is None
    assert S.UtteranceStats.from_json({**d, "ss": "x"}, len(utts[0]), sr) is None
    assert S.UtteranceStats.from_json(None, len(utts[0]), sr) is None
    silent = S.utterance_stats(np.zeros(5000, np.int16), sr)
    back = S.UtteranceStats.from_json(json.loads(json.dumps(silent.to_json())), 5000, sr)
    assert back is not None and not back.k.any() and back.tp == 0.0


@pytest.mark.parametrize("rates", [(22050, 44100), (24000, 44100), (16000, 44100), (48000, 44100)])
def test_stream_resampler_gives_resample_polys_samples(speech, rates):
    fr, to = rates
    utts, _ = speech
    x = np.concatenate(utts[:4]).astype(np.float32) / 32768.0
    r = LS.StreamResampler(fr, to)
    y = np.concatenate([r.push(x[a:a + 7777]) for a in range(0, len(x), 7777)] + [r.finish()])
    g = math.gcd(fr, to)
    ref = resample_poly(x, to // g, fr // g).astype(np.float32)
    assert len(y) == len(ref) and np.abs(y - ref).max() < 1e-6


def test_stream_limiter_holds_the_ceiling_and_changes_only_samples_near_peaks(speech):
    utts, sr = speech
    x = np.concatenate([np.concatenate([u, np.zeros(3000, np.int16)]) for u in utts]).astype(np.float32) / 32768.0
    x *= np.float32(10 ** (8 / 20))  # true peak well over -1 dBTP
    ref, limited = L.limit(x.copy(), sr, L.EBU_CEILING_DBTP)
    def chained(cut):
        stages = [LS.StreamLimiter(sr, L.EBU_CEILING_DBTP) for _ in range(LS.LIMIT_STAGES)]
        out = []
        for a in range(0, len(x), cut):
            y = x[a:a + cut]
            for st in stages:
                y = st.push(y)
            out.append(y)
        for i, st in enumerate(stages):
            y = st.finish()
            for later in stages[i + 1:]:
                y = later.push(y)
            out.append(y)
        return np.concatenate(out), stages

    y, stages = chained(10000)
    whole, _ = chained(len(x))  # one window: the whole signal's gain curve
    assert limited and stages[0].limited and len(y) == len(x)
    assert np.abs(y - whole).max() < 1e-6  # the same samples in any chunking (up to a running sum's rounding)
    assert L.true_peak_db(y) <= L.EBU_CEILING_DBTP - L.LIMITER_MARGIN_DB / 2 + 1e-3
    # as loud as the whole-signal limiter leaves it
    assert abs(L.integrated_lufs(y, sr) - L.integrated_lufs(ref, sr)) < 0.05
    far = L._oversampled_abs(x) < 10 ** ((L.EBU_CEILING_DBTP - 3) / 20)
    from scipy.ndimage import minimum_filter1d

    untouched = minimum_filter1d(far.astype(np.uint8), size=4 * stages[0].w + 1).astype(bool)
    assert np.array_equal(y[untouched], x[untouched])


def _written(pieces, sr, mode, stats):
    got = {}

    def write(blocks, rate):
        got["audio"] = np.concatenate(list(blocks))
        got["rate"] = rate
    report, n = LS.process(pieces, sr, mode, stats, write)
    assert n == len(got["audio"])
    return got["audio"], got["rate"], report


@pytest.mark.parametrize("mode", ["ebu", "acx"])
@pytest.mark.parametrize("level_db", [0.0, 12.0])
def test_streamed_chapter_meets_its_target(speech, mode, level_db):
    """The written chapter (int16, as encoded), read by pyloudnorm and a 4x-oversampled meter: EBU
    within 0.1 LU of -23 LUFS, ACX's RMS within 0.1 dB of -20; true peaks under the ceiling. The
    combined statistics give the gain that measuring the chapter gives. ``level_db``: the voice 12 dB
    quieter (the limiter must act for ACX and EBU)."""
    utts, sr = speech
    g = 10 ** (-level_db / 20)
    quiet = [np.rint(u * g).astype(np.int16) for u in utts]
    pieces, placed, n = chapter(quiet, sr, PAUSES["defaults"])
    stats = S.combine([(off, S.utterance_stats(u, sr)) for off, u in placed], n, sr)
    audio, rate, report = _written(lambda: iter(pieces), sr, mode, stats)
    measured = _written(lambda: iter(pieces), sr, mode, None)[2]
    assert abs(measured.gain_db - report.gain_db) <= 0.05
    x = audio.astype(np.float64) / 32768.0
    assert rate == L.output_rate(mode, sr)
    if mode == "ebu":
        assert abs(pyloudnorm.Meter(rate).integrated_loudness(x) - L.EBU_TARGET_LUFS) <= 0.1
        ceiling = L.EBU_CEILING_DBTP
    else:
        assert abs(L.rms_db(x.astype(np.float32)) - L.ACX_TARGET_RMS_DB) <= 0.1
        ceiling = L.ACX_CEILING_DBTP
    assert L.true_peak_db(x.astype(np.float32)) <= ceiling
    assert report.output["true_peak_dbtp"] <= ceiling
    if level_db:
        assert report.limited  # 12 dB more gain on the same speech: its peaks pass the ceiling


def test_loudness_none_streams_the_samples_unchanged(speech):
    utts, sr = speech
    pieces, _, _ = chapter(utts, sr, PAUSES["defaults"])
    audio, rate, report = _written(lambda: iter(pieces), sr, "none", None)
    assert rate == sr and np.array_equal(audio, np.concatenate(pieces)) and report.gain == 1.0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torch_engine_returns_the_statistics_of_its_items(voice, speech, device):
    """The torch engine computes each item's statistics in its stage B chunks, on its device, when
    given the hook: the same as NumPy's of the int16 audio it returns."""
    _device(device)
    pytest.importorskip("onnx", reason="the torch engine reads the voice's weights with onnx")
    from engines import EngineSpec
    from engines.base import Scales, SynthesisBatch
    from engines.torch_engine import TorchEngine
    from jobs.phonemize import Phonemizer

    eng = TorchEngine(voice, EngineSpec(name="torch", device=device if device == "cpu" else "cuda:0"))
    ph = Phonemizer(voice)
    batch = SynthesisBatch.from_sequences([ph(s).ids for s in ("Oh dear!", "It was a bright cold day in April.",
                                                                "Down the rabbit hole she went.")],
                                          Scales(0.667, 1.0, 0.8), seed=3)
    assert eng.synthesize(batch).stats is None  # no hook, no statistics
    eng.item_stats = S.TorchStats(voice.sample_rate)
    res = eng.synthesize(batch)
    assert res.stats is not None and len(res.stats) == len(res)
    for i, st in enumerate(res.stats):
        ref = S.utterance_stats(res.item(i), voice.sample_rate)
        assert st.samples == len(res.item(i)) and len(st.k) == len(ref.k)
        assert np.max(np.abs(st.k - ref.k)) <= 1e-5 * ref.k.max()
        assert st.tp == pytest.approx(ref.tp, rel=1e-5) and st.ss == pytest.approx(ref.ss, rel=1e-5)


# --------------------------------------------------------------------------- through finalize


def _chapter_reports(out):
    return sorted((out / ".work" / "loudness").glob("*.json"))


@pytest.mark.parametrize("mode", ["ebu", "acx"])
def test_finished_flac_meets_the_target_from_the_records_statistics(tmp_path, onnx_engine, mode):
    """A real-voice job through the local runner: each batch record carries its utterances'
    statistics, finalize takes the chapter's gain from them, and the decoded FLAC reads (pyloudnorm,
    a 4x-oversampled peak) within 0.1 of the target, peaks under the ceiling. Then the records lose
    their statistics (a job of an older version): deliver measures the chapter instead and finds
    the same gain."""
    import soundfile as sf

    from jobs.config import JobConfig
    from jobs.job import load_job
    from jobs.prepare import prepare_job
    from jobs.redeliver import redeliver
    from jobs.runner import run_local

    out = tmp_path / "o"
    job = prepare_job([DATA / "short-story.txt"], out, JobConfig(loudness=mode, max_batch=4))
    run_local(job, onnx_engine)
    records = sorted((out / ".work" / "batches").glob("*.json"))
    assert records and all("loudness" in it for r in records for it in json.loads(r.read_text())["items"])
    reports = [json.loads(p.read_text()) for p in _chapter_reports(out)]
    assert reports and all(r["statistics"] == "utterances" for r in reports)
    for r in reports:
        x, rate = sf.read(str(out / r["file"]), dtype="float64")
        assert rate == L.output_rate(mode, job.sample_rate)
        if mode == "ebu":
            assert abs(pyloudnorm.Meter(rate).integrated_loudness(x) - L.EBU_TARGET_LUFS) <= 0.1, r
            assert L.true_peak_db(x.astype(np.float32)) <= L.EBU_CEILING_DBTP, r
        else:
            assert abs(L.rms_db(x.astype(np.float32)) - L.ACX_TARGET_RMS_DB) <= 0.1, r
            assert L.true_peak_db(x.astype(np.float32)) <= L.ACX_CEILING_DBTP, r
    for rec in records:  # as an older version wrote them
        d = json.loads(rec.read_text())
        for it in d["items"]:
            del it["loudness"]
        rec.write_text(json.dumps(d))
    redeliver(load_job(out), {"loudness": mode})
    again = {r["file"]: r for r in (json.loads(p.read_text()) for p in _chapter_reports(out))}
    for r in reports:
        assert again[r["file"]]["statistics"] == "measured"
        # within the combined statistics' stated accuracy (0.1 LU, jobs/loudness_stats.py): their
        # approximate split of energy between blocks can move a block near the relative gate to
        # its other side, and the unseeded ONNX voice gives other audio each run (CI saw 0.07 dB once)
        assert abs(again[r["file"]]["gain_db"] - r["gain_db"]) <= 0.1, (again[r["file"]], r)


def test_loudness_none_records_no_statistics_and_the_chapter_is_the_samples(tmp_path, fake_engine):
    from jobs.config import JobConfig
    from jobs.prepare import prepare_job
    from jobs.runner import run_local
    from tests.fake_audio import assert_rows_play_their_own_audio

    out = tmp_path / "o"
    job = prepare_job([DATA / "short-story.txt"], out, JobConfig(loudness="none", audio_format="wav"))
    run_local(job, fake_engine)
    for r in (out / ".work" / "batches").glob("*.json"):
        assert not any("loudness" in it for it in json.loads(r.read_text())["items"])
    assert assert_rows_play_their_own_audio(out) > 0


def test_where_a_gpu_engines_units_are_measured_follows_the_setting(monkeypatch):
    """By default a GPU engine is given the device hook (its statistics cost it about 24 ms per hour
    of speech on an H200, docs/PERFORMANCE.md); BOOKTTS_GPU_LOUDNESS_STATS=finalize leaves its units
    without them (finalize meters the chapter), =writer measures them as written. A CPU engine's
    units are always measured by the writer; an engine's own statistics are kept."""
    class Eng:
        item_stats = None

    eng = Eng()
    monkeypatch.delenv("BOOKTTS_GPU_LOUDNESS_STATS", raising=False)
    S.engine_hook(eng, 22050, True)
    assert isinstance(eng.item_stats, S.TorchStats)
    S.engine_hook(eng, 22050, False)  # a job with --loudness none takes it away
    assert eng.item_stats is None
    assert S.measured_by_writer("cpu", None)
    assert S.measured_by_writer("cuda:0", [S.utterance_stats(np.zeros(10, np.int16), 22050)])
    monkeypatch.setenv("BOOKTTS_GPU_LOUDNESS_STATS", "finalize")
    S.engine_hook(eng, 22050, True)
    assert eng.item_stats is None
    assert not S.measured_by_writer("cuda:0", None)
    assert S.measured_by_writer("cpu", None)
    monkeypatch.setenv("BOOKTTS_GPU_LOUDNESS_STATS", "writer")
    S.engine_hook(eng, 22050, True)
    assert eng.item_stats is None
    assert S.measured_by_writer("cuda:0", None)
    monkeypatch.setenv("BOOKTTS_GPU_LOUDNESS_STATS", "device")
    S.engine_hook(eng, 22050, True)
    assert isinstance(eng.item_stats, S.TorchStats)
    assert not S.measured_by_writer("cuda:0", [None, None])
    monkeypatch.setenv("BOOKTTS_GPU_LOUDNESS_STATS", "gpu")
    from core.settings import SettingError
    with pytest.raises(SettingError, match="BOOKTTS_GPU_LOUDNESS_STATS"):
        S.gpu_stats_at()


def test_a_gpu_engines_units_are_metered_by_finalize_when_chosen(tmp_path, onnx_engine, monkeypatch):
    """With BOOKTTS_GPU_LOUDNESS_STATS=finalize, units from an engine on a CUDA device (one without
    a device hook) carry no statistics and finalize meters each chapter from its stream: the chapter
    still meets the EBU target; with the writer chosen the same job's records carry them again."""
    import dataclasses

    import soundfile as sf

    from jobs.config import JobConfig
    from jobs.prepare import prepare_job
    from jobs.runner import run_local

    class OnCuda:  # the ONNX voice, reporting a CUDA device as a GPU engine does
        def __init__(self, inner):
            self._inner = inner
            self.info = dataclasses.replace(inner.info, device="cuda:0")

        def __getattr__(self, name):
            return getattr(self._inner, name)

    monkeypatch.delenv("BOOKTTS_GPU_LOUDNESS_STATS", raising=False)
    for at, expect in (("finalize", False), ("writer", True)):
        monkeypatch.setenv("BOOKTTS_GPU_LOUDNESS_STATS", at)
        out = tmp_path / at
        job = prepare_job([DATA / "short-story.txt"], out, JobConfig(loudness="ebu", max_batch=4))
        run_local(job, OnCuda(onnx_engine))
        items = [it for r in (out / ".work" / "batches").glob("*.json") for it in json.loads(r.read_text())["items"]]
        assert items and all(("loudness" in it) == expect for it in items)
        reports = [json.loads(p.read_text()) for p in _chapter_reports(out)]
        assert reports and all(r["statistics"] == ("utterances" if expect else "measured") for r in reports)
        for r in reports:
            x, rate = sf.read(str(out / r["file"]), dtype="float64")
            assert abs(pyloudnorm.Meter(rate).integrated_loudness(x) - L.EBU_TARGET_LUFS) <= 0.1, r
