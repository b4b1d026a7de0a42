"""What each deliverable's encoder costs finalize: CPU seconds per hour of speech, FLAC levels against WAV, Opus, M4B.

    BOOKTTS_TEST_ENGINES=1 python bench/finalize_formats.py [--hours 1] [--repeats 2] [--variants ...] [--json FILE]

The job of ``bench/finalize_loudness.py`` (Alice's prose read as one chapter by ``--engine fake``,
about ``--hours`` hours), delivered again with ``cli.py deliver OUT --format F [--flac-level N]
--loudness L`` for each variant in turn (``flac:0``, ``flac:5``, ``flac:8``, ``wav``, ``opus``,
``m4b``, ``mp3``; the variants alternate within each repeat, so that other load on the machine falls
on all of them), each in a child process: its CPU seconds (user + system), peak resident memory and
wall seconds, per hour of speech, and the bytes delivered per hour. WAV's figure is the
chapter-writing code with next to no encoder (reading the batch audio, loudness, the PCM write): a
format's figure less WAV's is its encoder's cost. ``--loudness`` (default ``ebu``, the product's)
applies to every variant. ``--work DIR`` keeps the synthesized job there (reused when it exists).

``--codec-trials``: then the lossy encoders alone, in this process, on the job's first ``--trial-minutes``
of speech (delivered as WAV first): FFmpeg's AAC with its ``twoloop`` coder (what M4B uses) and its
``fast`` coder, libopus at complexity 10 (what Opus uses), 5 and 0; CPU seconds and bytes per hour of
speech (the same container, bitrate and resampling as jobs/formats.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from finalize_loudness import ROOT, run_child, synthesize_once  # noqa: E402

DEFAULT_VARIANTS = "flac:0,flac:5,flac:8,wav,opus,m4b"
#: Files of a delivery by format (what ``bytes_per_hour`` counts).
SUFFIX = {"flac": ".flac", "wav": ".wav", "opus": ".opus", "m4b": ".m4b", "mp3": ".mp3"}


def deliver_args(py: str, out: Path, variant: str, loudness: str) -> list[str]:
    fmt, _, level = variant.partition(":")
    return [py, "cli.py", "deliver", "-o", str(out), "--format", fmt, "--loudness", loudness,
            *(["--flac-level", level] if level else [])]


def delivered_bytes(out: Path, fmt: str) -> int:
    return sum(p.stat().st_size for p in out.rglob(f"*{SUFFIX[fmt]}") if ".work" not in p.parts)


#: (name, format, codec, options) of ``--codec-trials``.
CODEC_TRIALS = [
    ("aac twoloop (m4b)", "m4b", {"aac_coder": "twoloop"}),
    ("aac fast", "m4b", {"aac_coder": "fast"}),
    ("opus complexity 10 (opus)", "opus", {"compression_level": "10"}),
    ("opus complexity 5", "opus", {"compression_level": "5"}),
    ("opus complexity 0", "opus", {"compression_level": "0"}),
]


def codec_trial(pcm, rate: int, fmt: str, options: dict, path: Path) -> tuple[float, int]:
    """CPU seconds and bytes of encoding mono float32 ``pcm`` as jobs.formats does for ``fmt``, with
    the codec ``options``."""
    import av
    import numpy as np

    from jobs.formats import BITRATES, OPUS_RATE, WRITERS

    container, codec = WRITERS[fmt].av
    out_rate = OPUS_RATE if fmt == "opus" else rate
    t0 = time.process_time()
    with av.open(str(path), "w", format=container) as c:
        st = c.add_stream(codec, rate=out_rate, layout="mono")
        st.bit_rate = BITRATES[fmt]
        st.codec_context.options = dict(options)
        res = av.AudioResampler(format=st.codec_context.codec.audio_formats[0].name, layout="mono", rate=out_rate)
        for i in range(0, len(pcm), 1 << 15):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm[i:i + (1 << 15)]).reshape(1, -1),
                                               format="flt", layout="mono")
            frame.sample_rate = rate
            for r in res.resample(frame):
                for packet in st.encode(r):
                    c.mux(packet)
        for r in res.resample(None):
            for packet in st.encode(r):
                c.mux(packet)
        for packet in st.encode(None):
            c.mux(packet)
    return time.process_time() - t0, path.stat().st_size


def codec_trials(py: str, out: Path, work: Path, minutes: float, loudness: str, repeats: int) -> list[dict]:
    import soundfile as sf

    run_child([py, "cli.py", "deliver", "-o", str(out), "--format", "wav", "--loudness", loudness])
    wav = sorted(p for p in out.rglob("*.wav") if ".work" not in p.parts)[0]
    info = sf.info(str(wav))
    pcm, rate = sf.read(str(wav), dtype="float32", frames=int(minutes * 60 * info.samplerate))
    hours = len(pcm) / rate / 3600.0
    rows = []
    for rep in range(repeats):
        for name, fmt, options in CODEC_TRIALS:
            cpu, size = codec_trial(pcm, rate, fmt, options, work / f"trial.{fmt}")
            row = {"trial": name, "repeat": rep, "hours": round(hours, 4), "cpu_s_per_hour": cpu / hours,
                   "mib_per_hour": size / hours / 2**20}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=1.0, help="about this much speech in the one chapter")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated FORMAT[:FLAC_LEVEL]")
    ap.add_argument("--loudness", default="ebu", help="--loudness of every delivery")
    ap.add_argument("--work", type=Path, default=None, help="keep the synthesized job here (reused)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--codec-trials", action="store_true", help="then the lossy encoders' options alone")
    ap.add_argument("--trial-minutes", type=float, default=10.0)
    a = ap.parse_args()
    os.environ.setdefault("BOOKTTS_TEST_ENGINES", "1")
    tmp = None
    if a.work is None:
        work = tmp = Path(tempfile.mkdtemp(prefix="finalize-formats-"))
    else:
        work = a.work
        work.mkdir(parents=True, exist_ok=True)
    out = work / "job"
    py = sys.executable
    try:
        synthesize_once(work, out, a.hours, ["--format", "wav"])
        summary = json.loads((out / ".work" / "finalized.json").read_text())
        hours = summary["audio_s"] / 3600.0
        print(f"job: {out} ({hours:.2f} h of audio, {len(summary['chapter_files'])} chapter file(s))", file=sys.stderr)
        rows = []
        for rep in range(a.repeats):
            for variant in a.variants.split(","):
                m = run_child(deliver_args(py, out, variant, a.loudness))
                fmt = variant.partition(":")[0]
                row = {"variant": variant, "repeat": rep, "loudness": a.loudness, "hours": round(hours, 3), **m,
                       "cpu_s_per_hour": m["cpu_s"] / hours,
                       "mib_per_hour": delivered_bytes(out, fmt) / hours / 2**20}
                rows.append(row)
                print(json.dumps(row), flush=True)
        trials = codec_trials(py, out, work, a.trial_minutes, a.loudness, a.repeats) if a.codec_trials else []
        if a.json:
            a.json.write_text(json.dumps({"deliveries": rows, "codec_trials": trials}, indent=1) + "\n")
        print(f"\n{'variant':8} {'CPU s/h':>8} {'wall s':>7} {'MiB/h':>7} {'peak RSS MiB':>13}")
        for r in rows:
            print(f"{r['variant']:8} {r['cpu_s_per_hour']:8.2f} {r['wall_s']:7.1f} {r['mib_per_hour']:7.1f} "
                  f"{r['peak_rss_mib']:13.0f}")
        for r in trials:
            print(f"{r['trial']:28} {r['cpu_s_per_hour']:8.2f} CPU s/h {r['mib_per_hour']:7.1f} MiB/h")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
