"""Deliverables: chapter files in FLAC, WAV, MP3 or Opus, or one M4B per book; tags and cover art.

Called by :mod:`jobs.finalize`: :func:`write_chapter_audio` writes one chapter's PCM (after
:mod:`jobs.loudness`) into a temporary path that the caller renames; :func:`write_m4b` assembles a
book's chapters (kept as WAV under ``.work/chapters``) into one M4B with a chapter marker per
chapter. Encoders: libsndfile (FLAC, WAV), PyAV's bundled FFmpeg (AAC, LAME MP3, libopus); tags
with mutagen (FLAC Vorbis comments, ID3v2.4, MP4 atoms, Opus comments), WAV tags as a RIFF
LIST/INFO chunk (libsndfile).

Tags: title (the chapter's; the book's for an M4B), album (book title), artist and album artist
(the book's author, when the EPUB names one), composer (the narrator: the voice; audiobook players
show composer as narrator), comment ("Narrated by <voice>"), year, track number (chapter i of n),
genre "Audiobook", and the EPUB's cover image. The user's ``--title --author --narrator --cover --year``
replace the book's values (:mod:`jobs.metadata`; :func:`jobs.deliver.tags_for` puts them together).
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import logging
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from core.errors import InputError

BITRATES = {"mp3": 64000, "opus": 32000, "m4b": 64000}
OPUS_RATE = 48000
#: Intermediate chapter audio of an M4B (processed PCM, WAV) lives here, under the job's .work.
M4B_CHAPTER_DIR = ".work/chapters"

log = logging.getLogger("booktts.formats")


@dataclass
class Tags:
    title: str
    album: str
    narrator: str
    artist: str | None = None
    year: str | None = None
    track: tuple[int, int] | None = None
    genre: str = "Audiobook"
    cover: bytes | None = field(default=None, repr=False)
    cover_mime: str | None = None

    @property
    def comment(self) -> str:
        return f"Narrated by {self.narrator}"


# --------------------------------------------------------------------------- availability


def _import_av():
    try:
        import av
    except ImportError:
        return None
    return av


def check_available(fmt: str) -> None:
    """Raise one-line :class:`InputError` naming the package if ``fmt`` cannot be written here."""
    if fmt not in WRITERS:
        raise InputError(f"--format {fmt!r} is not supported; choose {', '.join(WRITERS)}")
    w = WRITERS[fmt]
    if w.av is not None:
        av = _import_av()
        if av is None:
            raise InputError(f"--format {fmt} needs PyAV (FFmpeg's encoders): pip install av")
        container, codec = w.av
        try:
            av.codec.Codec(codec, "w")
        except Exception:
            raise InputError(f"--format {fmt}: this PyAV build has no {codec} encoder; install a PyAV wheel "
                             f"that bundles it: pip install --force-reinstall av") from None
    if w.mutagen and importlib.util.find_spec("mutagen") is None:
        raise InputError(f"--format {fmt} needs mutagen to write tags: pip install mutagen")


def describe(fmt: str) -> str:
    """One line for ``plan``."""
    return WRITERS[fmt].describe


def per_book(fmt: str) -> bool:
    """Whether ``fmt`` delivers one file per book (M4B) rather than a file per chapter."""
    return WRITERS[fmt].book is not None


# --------------------------------------------------------------------------- paths


def chapter_relpath(book_dir: str, index: int, slug_title: str, fmt: str) -> str:
    """Where a chapter's audio goes, relative to the job directory. For a format of one file per book
    (M4B): the intermediate WAV."""
    if per_book(fmt):
        return f"{M4B_CHAPTER_DIR}/{book_dir}/{index:03d}-{slug_title}.wav"
    return f"{book_dir}/{index:03d}-{slug_title}.{fmt}"


def book_relpath(book_dir: str, fmt: str = "m4b") -> str:
    """The file of a book in a format of one file per book (M4B), relative to the job directory."""
    return f"{book_dir}.{fmt}"


# --------------------------------------------------------------------------- the book's own metadata and cover


def book_details(path) -> dict:
    """Author, year and the cover's member name, as far as the book file says them (an EPUB does; a
    TXT/MD file says none): its reader's :attr:`~jobs.ingest.readers.Reader.details`. ``{}`` when
    unreadable, with one warning line."""
    from jobs.ingest import reader_for

    return reader_for(path).details(Path(path))


def read_cover(book: dict) -> tuple[bytes, str] | None:
    """The cover image of ``book`` (a job.json book entry) as (bytes, mime), or None.

    Only from the same book file the job was planned from (its SHA-256 is checked), through its
    reader (:attr:`~jobs.ingest.readers.Reader.cover`: an EPUB's member-name checks and size limits,
    at most :data:`jobs.metadata.MAX_COVER_BYTES`), and only a real JPEG or PNG (by its first bytes)."""
    from core.files import sha256_file
    from jobs.ingest import reader_for
    from jobs.metadata import image_type

    member = book.get("cover")
    if not member:
        return None
    p = Path(book["path"])
    try:
        if sha256_file(p) != book["sha256"]:
            log.warning("%s changed since the job was planned; its M4B/tags get no cover", p)
            return None
        data = reader_for(p).cover(p, member)
    except (InputError, OSError) as exc:
        log.warning("%s: cover not read (%s)", p, exc)
        return None
    if data is None:
        return None
    mime = image_type(data)
    if mime is None:
        log.warning("%s: its cover %r is not a JPEG or PNG image; the files get no cover art", p, member)
        return None
    return data, mime


#: Where a job keeps its books' own cover images (relative to the job directory), copied when it is planned.
COVERS_DIR = ".work/covers"


def keep_covers(out_dir, books: list[dict]) -> Iterator[Path]:
    """Copy each book's own cover (:func:`read_cover`: the planned file, size-limited, JPEG or PNG) into
    ``out_dir``'s :data:`COVERS_DIR`, atomically, and record it in the book's entry as ``cover_copy``
    (``file``, ``sha256``, ``mime``): the book file may be gone by finalize (a watched inbox plans from
    a private copy it removes once the book is submitted). Yields each file once it is written."""
    import hashlib

    from core.files import atomic_path, inside

    for book in books:
        if not book.get("cover") or book.get("cover_copy"):
            continue
        got = read_cover(book)
        if got is None:
            continue
        data, mime = got
        rel = f"{COVERS_DIR}/{book['dir']}.{'png' if mime == 'image/png' else 'jpg'}"
        path = inside(out_dir, rel)
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
        book["cover_copy"] = {"file": rel, "sha256": hashlib.sha256(data).hexdigest(), "mime": mime}
        yield path


def read_kept_cover(job_dir, entry: dict) -> tuple[bytes, str] | None:
    """The cover :func:`keep_covers` copied into ``job_dir`` (its ``cover_copy`` entry) as (bytes, mime):
    a regular file (no link followed), at most :data:`jobs.metadata.MAX_COVER_BYTES`, with the recorded
    SHA-256. None, with one warning line, otherwise."""
    import hashlib
    import os
    import stat

    from core.files import inside
    from jobs.metadata import MAX_COVER_BYTES, image_type

    try:
        inside(job_dir, entry["file"])  # (refuses a name that leads out of the job directory)
        fd = os.open(Path(job_dir).resolve() / entry["file"], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_COVER_BYTES:
                raise OSError(f"not a regular file of at most {MAX_COVER_BYTES} bytes")
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(MAX_COVER_BYTES + 1)
        finally:
            os.close(fd)
    except (OSError, KeyError, TypeError, ValueError, InputError) as exc:
        log.warning("%s: the job's copy of the cover (%s) not read (%s); the book file is tried", job_dir,
                    entry.get("file") if isinstance(entry, dict) else entry, exc)
        return None
    if hashlib.sha256(data).hexdigest() != entry.get("sha256") or image_type(data) is None:
        log.warning("%s: the job's copy of the cover (%s) changed since the job was planned; the book file is "
                    "tried", job_dir, entry["file"])
        return None
    return data, image_type(data)


# --------------------------------------------------------------------------- encoders


def _blocks(pcm: np.ndarray, block: int = 1 << 15):
    for k in range(0, len(pcm), block):
        yield pcm[k:k + block]


def _encode_av(tmp: Path, fmt: str, blocks, sample_rate: int, chapters=None,
               metadata: dict | None = None) -> None:
    """Encode mono float32 audio (an iterable of arrays) with PyAV into ``tmp`` (the container and
    codec of ``fmt``)."""
    import av

    container_fmt, codec = WRITERS[fmt].av
    rate = OPUS_RATE if fmt == "opus" else sample_rate
    opts = {"movflags": "+faststart"} if fmt == "m4b" else {}
    with av.open(str(tmp), "w", format=container_fmt, options=opts) as c:
        s = c.add_stream(codec, rate=rate, layout="mono")
        s.bit_rate = BITRATES[fmt]
        if metadata:
            c.metadata.update({k: v for k, v in metadata.items() if v})
        if chapters:
            c.set_chapters(chapters)
        fmt_name = s.codec_context.codec.audio_formats[0].name
        res = av.AudioResampler(format=fmt_name, layout="mono", rate=rate)  # libswresample for Opus' 48 kHz
        pts = 0
        for part in blocks:
            part = (part.astype(np.float32) / 32768.0 if part.dtype == np.int16 else
                    np.ascontiguousarray(part, dtype=np.float32)).reshape(-1)
            if len(part) == 0:
                continue
            frame = av.AudioFrame.from_ndarray(part[None, :], format="flt", layout="mono")
            frame.sample_rate = sample_rate
            frame.pts = pts
            pts += len(part)
            for f in res.resample(frame):
                for pkt in s.encode(f):
                    c.mux(pkt)
        for f in res.resample(None):
            for pkt in s.encode(f):
                c.mux(pkt)
        for pkt in s.encode(None):
            c.mux(pkt)


def _tag_flac(tmp: Path, tags: Tags) -> None:
    from mutagen.flac import FLAC, Picture

    f = FLAC(str(tmp))
    f.update(_vorbis_fields(tags))
    if tags.cover:
        f.add_picture(_picture(tags, Picture))
    f.save()


def _picture(tags: Tags, Picture):
    pic = Picture()
    pic.type = 3  # front cover
    pic.mime = tags.cover_mime or "image/jpeg"
    pic.desc = "Cover"
    pic.data = tags.cover
    return pic


def _vorbis_fields(tags: Tags) -> dict[str, list[str]]:
    d = {"title": [tags.title], "album": [tags.album], "composer": [tags.narrator], "performer": [tags.narrator],
         "comment": [tags.comment], "genre": [tags.genre]}
    if tags.artist:
        d["artist"] = [tags.artist]
        d["albumartist"] = [tags.artist]
    if tags.year:
        d["date"] = [tags.year]
    if tags.track:
        d["tracknumber"] = [str(tags.track[0])]
        d["tracktotal"] = [str(tags.track[1])]
    return d


def _tag_opus(tmp: Path, tags: Tags) -> None:
    from mutagen.flac import Picture
    from mutagen.oggopus import OggOpus

    f = OggOpus(str(tmp))
    f.update(_vorbis_fields(tags))
    if tags.cover:
        f["metadata_block_picture"] = [base64.b64encode(_picture(tags, Picture).write()).decode("ascii")]
    f.save()


def _tag_mp3(tmp: Path, tags: Tags) -> None:
    from mutagen import id3

    t = id3.ID3()
    t.add(id3.TIT2(encoding=3, text=tags.title))
    t.add(id3.TALB(encoding=3, text=tags.album))
    t.add(id3.TCOM(encoding=3, text=tags.narrator))
    t.add(id3.COMM(encoding=3, lang="eng", desc="", text=tags.comment))
    t.add(id3.TCON(encoding=3, text=tags.genre))
    if tags.artist:
        t.add(id3.TPE1(encoding=3, text=tags.artist))
        t.add(id3.TPE2(encoding=3, text=tags.artist))
    if tags.year:
        t.add(id3.TDRC(encoding=3, text=tags.year))
    if tags.track:
        t.add(id3.TRCK(encoding=3, text=f"{tags.track[0]}/{tags.track[1]}"))
    if tags.cover:
        t.add(id3.APIC(encoding=3, mime=tags.cover_mime or "image/jpeg", type=3, desc="Cover", data=tags.cover))
    t.save(str(tmp), v2_version=4)


def _tag_mp4(tmp: Path, tags: Tags) -> None:
    from mutagen.mp4 import MP4, MP4Cover

    f = MP4(str(tmp))
    f["\xa9nam"] = [tags.title]
    f["\xa9alb"] = [tags.album]
    f["\xa9wrt"] = [tags.narrator]
    f["\xa9cmt"] = [tags.comment]
    f["\xa9gen"] = [tags.genre]
    f["stik"] = [2]  # media kind: audiobook
    if tags.artist:
        f["\xa9ART"] = [tags.artist]
        f["aART"] = [tags.artist]
    if tags.year:
        f["\xa9day"] = [tags.year]
    if tags.track:
        f["trkn"] = [tags.track]
    if tags.cover:
        kind = MP4Cover.FORMAT_PNG if tags.cover_mime == "image/png" else MP4Cover.FORMAT_JPEG
        f["covr"] = [MP4Cover(tags.cover, imageformat=kind)]
    f.save()


def write_chapter_audio(tmp: Path, final: Path, fmt: str, pcm, sample_rate: int, tags: Tags | None,
                        writer_errors=contextlib.nullcontext, flac_level: int | None = None) -> None:
    """Write mono ``pcm`` (float32 or int16: one array, or an iterable of blocks, encoded as they
    come) as ``fmt`` into ``tmp`` (renamed to ``final`` by the caller) and tag it: ``fmt``'s :class:`Writer`.

    ``writer_errors(final)``: a context that maps the sound library's write errors (libsndfile's).
    ``flac_level``: libFLAC's compression level 0-8 for FLAC (None: libsndfile's default, level 5)."""
    check_available(fmt)
    w = WRITERS[fmt]
    blocks = _blocks(pcm) if isinstance(pcm, np.ndarray) else pcm
    w.write(tmp, final, blocks, sample_rate, tags, writer_errors, flac_level)
    if tags and w.tag is not None:
        w.tag(tmp, tags)


def _sndfile(major: str, info_tags: bool = False):
    """A chapter writer through libsndfile (16-bit PCM in ``major``: ``FLAC``, ``WAV``); ``info_tags``:
    the tags go into the file as it is written (WAV's RIFF INFO)."""

    def write(tmp: Path, final: Path, blocks, sample_rate: int, tags: Tags | None, writer_errors, flac_level) -> None:
        import soundfile as sf

        from jobs.loudness import to_int16

        # libsndfile takes the level as a fraction of 8 (lrint(x * 8)); 5/8 is its own default
        level = {"compression_level": flac_level / 8} if major == "FLAC" and flac_level is not None else {}
        with writer_errors(final):
            f = sf.SoundFile(str(tmp), "w", samplerate=sample_rate, channels=1, subtype="PCM_16", format=major,
                             **level)
        try:
            if info_tags and tags:
                f.title, f.album, f.comment, f.genre = tags.title, tags.album, tags.comment, tags.genre
                if tags.artist:
                    f.artist = tags.artist
                if tags.year:
                    f.date = tags.year
                if tags.track:
                    f.tracknumber = str(tags.track[0])
            for block in blocks:
                with writer_errors(final):  # read the C errno right after the failed call
                    f.write(to_int16(block))
        except BaseException:
            with contextlib.suppress(Exception):
                f.close()
            raise
        with writer_errors(final):
            f.close()

    return write


def _av(fmt: str):
    """A chapter writer through PyAV's encoder of ``fmt`` (:attr:`Writer.av`)."""

    def write(tmp: Path, final: Path, blocks, sample_rate: int, tags: Tags | None, writer_errors, flac_level) -> None:
        _encode_av(tmp, fmt, blocks, sample_rate)

    return write


def write_m4b(tmp: Path, chapter_wavs: list[tuple[Path, str]], tags: Tags) -> list[float]:
    """Encode the chapters' WAVs, in order, into one M4B at ``tmp`` with a chapter marker (name,
    start) per chapter and ``tags``. Returns each chapter's start in seconds."""
    import soundfile as sf

    check_available("m4b")
    infos = [sf.info(str(p)) for p, _ in chapter_wavs]
    rates = {i.samplerate for i in infos}
    if len(rates) != 1:
        raise InputError(f"chapters of one M4B have different sample rates ({sorted(rates)}); finalize again")
    rate = rates.pop()
    starts, pos = [], 0
    chapters = []
    for k, (info, (_, title)) in enumerate(zip(infos, chapter_wavs)):
        starts.append(pos / rate)
        chapters.append({"id": k + 1, "start": pos, "end": pos + info.frames, "time_base": Fraction(1, rate),
                         "metadata": {"title": title}})
        pos += info.frames

    def blocks():  # chapter by chapter, a block at a time: a book never sits in memory whole
        for p, _ in chapter_wavs:
            yield from sf.blocks(str(p), blocksize=1 << 15, dtype="float32")

    _encode_av(tmp, "m4b", blocks(), rate, chapters=chapters)
    _tag_mp4(tmp, tags)
    return starts


# --------------------------------------------------------------------------- the formats


@dataclass(frozen=True)
class Writer:
    """One deliverable format: ``--format NAME``."""

    name: str
    describe: str
    """One line for ``plan``."""
    write: Callable
    """``(tmp, final, blocks, sample_rate, tags, writer_errors, flac_level)``: one chapter's file into ``tmp``
    from its mono blocks (float32 or int16, in order)
    (for a format of one file per book: the chapter's intermediate WAV)."""
    tag: Callable[[Path, Tags], None] | None = None
    """Tags a written chapter file (None: :attr:`write` wrote them, or chapter files have none)."""
    av: tuple[str, str] | None = None
    """(container, codec) of the PyAV encoder it needs; None: it needs no PyAV."""
    mutagen: bool = True
    """Needs mutagen (to write tags)."""
    book: Callable[[Path, list, Tags], list[float]] | None = None
    """One file per book from its chapters' WAVs: ``(tmp, [(wav, title)], tags) -> chapter starts``
    (M4B: :func:`write_m4b`); None: the chapter files are what is delivered."""


#: Every ``--format``, in the order the command line lists them.
WRITERS: dict[str, Writer] = {w.name: w for w in (
    Writer("flac", "FLAC per chapter (lossless, Vorbis comment tags)", _sndfile("FLAC"), tag=_tag_flac),
    Writer("wav", "WAV per chapter (16-bit PCM, RIFF INFO tags)", _sndfile("WAV", info_tags=True), mutagen=False),
    Writer("mp3", f"MP3 per chapter (LAME, {BITRATES['mp3'] // 1000} kbit/s, ID3v2.4 tags)", _av("mp3"),
           tag=_tag_mp3, av=("mp3", "libmp3lame")),
    Writer("opus", f"Opus in Ogg per chapter ({BITRATES['opus'] // 1000} kbit/s, 48 kHz, Vorbis comment tags)",
           _av("opus"), tag=_tag_opus, av=("ogg", "libopus")),
    Writer("m4b", f"one M4B per book (AAC {BITRATES['m4b'] // 1000} kbit/s, a chapter marker per chapter, MP4 "
           f"tags)", _sndfile("WAV"), av=("ipod", "aac"), book=write_m4b),
)}
