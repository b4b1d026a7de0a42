"""Text -> phonemes -> phoneme ids, with the voice's own frontend (piper-tts / espeak-ng).

``Phonemizer`` turns a piece of text into one phoneme-id sequence for the voice:
espeak-ng's phonemes (as Piper produces them), mapped through the voice config's
``phoneme_id_map`` exactly as Piper's ``phonemes_to_ids`` does (BOS, each
phoneme followed by PAD, EOS). If espeak-ng splits the text into several
sentences, their phonemes are joined with a word break so the piece stays one
utterance. Phonemes missing from the map are dropped, as Piper drops them, and
counted so the manifest can say so.
"""

from __future__ import annotations

import threading
import unicodedata
from dataclasses import dataclass

from core.errors import VoiceError
from core.voice import VoiceConfig

BOS, EOS, PAD = "^", "$", "_"
_LOCK = threading.Lock()
#: The espeak-ng voice this process last set (guarded by ``_LOCK``).
_voice_set: list[str | None] = [None]


def _set_voice_once(espeakbridge) -> None:
    """Make ``espeakbridge.set_voice`` skip a call that sets the voice already set in this process.

    Piper's phonemizer sets the voice before every piece of text; espeak-ng then reloads the voice
    and its language's rules each time, about a third of the phonemizer's CPU time on a book (the
    submits' CPU on a GPU node). Its output does not depend on it: the phonemes are the same with
    one call per process, whole books and mixed scripts included
    (tests/jobs/test_phonemize_voice_once.py). Installed once, under ``_LOCK``, which every call
    into espeak-ng here holds."""
    if getattr(espeakbridge.set_voice, "_booktts_once", False):
        return
    original = espeakbridge.set_voice

    def set_voice(voice: str) -> None:
        if _voice_set[0] != voice:
            _voice_set[0] = None  # unknown until the call returns
            set_voice._booktts_original(voice)
            _voice_set[0] = voice

    set_voice._booktts_once = True
    set_voice._booktts_original = original
    espeakbridge.set_voice = set_voice


@dataclass
class Phonemes:
    """The phonemes of one piece of text."""

    symbols: list[str]
    """Phoneme symbols (after NFD decomposition, as Piper does)."""
    ids: list[int]
    """Phoneme ids for the voice, with BOS/PAD/EOS."""
    missing: int
    """Symbols that the voice's id map does not know (dropped)."""

    @property
    def speakable(self) -> bool:
        """False when nothing but BOS/EOS/PAD and punctuation is left."""
        return any(s.strip() and unicodedata.category(s)[0] not in "PZ" for s in self.symbols)


class Phonemizer:
    """The voice's phoneme frontend; knows nothing about batches or engines."""

    def __init__(self, voice: VoiceConfig) -> None:
        self.voice = voice
        self.id_map = voice.phoneme_id_map
        if voice.phoneme_type not in ("espeak", "text"):
            raise VoiceError(f"voice {voice.name} uses phoneme type {voice.phoneme_type!r}; only espeak and text voices are supported")
        for sym in (BOS, EOS, PAD):
            if sym not in self.id_map:
                raise VoiceError(f"voice config {voice.config_path} has no id for {sym!r} in phoneme_id_map")
        self._espeak = None

    def _espeak_phonemizer(self):
        if self._espeak is None:
            try:
                from piper import espeakbridge
                from piper.phonemize_espeak import EspeakPhonemizer
            except ImportError as exc:  # pragma: no cover - dependency of the project
                raise VoiceError("piper-tts is not installed; pip install piper-tts") from exc
            # (called under _LOCK)
            _set_voice_once(espeakbridge)
            self._espeak = EspeakPhonemizer()
            _voice_set[0] = None  # its initialize() resets espeak-ng
        return self._espeak

    def symbols(self, text: str) -> list[str]:
        """Phoneme symbols for ``text`` as one sequence. Piper's ``[[ phonemes ]]`` blocks are taken
        as they are (NFD symbols, spaces as word breaks), without espeak-ng."""
        if self.voice.phoneme_type == "text":
            return list(unicodedata.normalize("NFD", text))
        if "[[" not in text:
            return self._espeak_symbols(text)
        from jobs.normalize import split_phoneme_blocks

        out: list[str] = []
        for is_ph, part in split_phoneme_blocks(text):
            if is_ph:
                syms = list(unicodedata.normalize("NFD", " ".join(part[2:-2].split())))
            else:
                syms = self._espeak_symbols(part) if part.strip() else []
            if not syms:
                continue
            if out and out[-1] != " " and syms[0] != " " and (part[:1].isspace() or is_ph):
                out.append(" ")
            out.extend(syms)
        return out

    def _espeak_symbols(self, text: str) -> list[str]:
        with _LOCK:  # espeak-ng keeps global state
            sentences = self._espeak_phonemizer().phonemize(
                self.voice.espeak_voice, text, vowel_clusters=set(self.voice.vowel_clusters) if self.voice.vowel_clusters else None
            )
        out: list[str] = []
        for sent in sentences:
            if not sent:
                continue
            if out and out[-1] != " ":
                out.append(" ")
            out.extend(sent)
        return out

    def to_ids(self, symbols: list[str]) -> tuple[list[int], int]:
        m = self.id_map
        ids = list(m[BOS]) + list(m[PAD])
        missing = 0
        for s in symbols:
            if s not in m:
                missing += 1
                continue
            ids.extend(m[s])
            ids.extend(m[PAD])
        ids.extend(m[EOS])
        return ids, missing

    def __call__(self, text: str) -> Phonemes:
        symbols = self.symbols(text)
        ids, missing = self.to_ids(symbols)
        return Phonemes(symbols, ids, missing)
