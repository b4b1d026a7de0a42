"""The espeak-ng voice is set once per process (jobs.phonemize._set_voice_once), not before every
piece of text as piper's phonemizer does: the phonemes must be the same, text after text, on a whole
book and on text that makes espeak-ng switch languages (other scripts, foreign words)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from core.voice import resolve_voice
from jobs import phonemize
from jobs.phonemize import Phonemizer

DATA = Path(__file__).resolve().parents[1] / "data"

MIXED = [
    "The quick brown fox jumps over the lazy dog.", "He said: «Привет, как дела?» and left.",
    "Καλημέρα means good morning in Greek.", "I read 1,234 pages in 3.5 days, Dr. Smith!",
    "She ordered a café au lait, très bien, déjà vu.", "日本語のテキスト and English.", "שלום עליכם friend.",
    "مرحبا بالعالم hello.", "Naïve coöperation; the résumé — of Zoë.", "Wie geht's? Sehr gut, danke schön.",
    "¿Dónde está la biblioteca? Aquí.", "Mr. O'Neil's 2nd Ave. apt #5B, 10:30 p.m.",
    "Ελληνικά και Русский together.", "Ich bin ein Berliner.", "Tschüß!", "...", "Ah!",
]


@pytest.fixture(scope="module")
def ph():
    return Phonemizer(resolve_voice(None))


def test_the_phonemes_are_the_same_with_the_voice_set_once(ph):
    from piper import espeakbridge

    ph.symbols("warm up")  # installs the once-per-process set_voice
    assert getattr(espeakbridge.set_voice, "_booktts_once", False)
    book = (DATA / "alice-pg11.txt").read_text(encoding="utf-8")
    texts = [s for s in (t.strip() for t in re.split(r"(?<=[.!?])\s+|\n\s*\n", book)) if s]
    rng = random.Random(7)
    for k in range(300):  # language switches scattered through the book's text
        texts.insert(rng.randrange(len(texts)), MIXED[k % len(MIXED)])
    assert len(texts) > 1500

    calls = []
    original = espeakbridge.set_voice._booktts_original

    def counting(voice):
        calls.append(voice)
        original(voice)

    espeakbridge.set_voice._booktts_original = counting  # (the wrapper calls the original it kept)
    try:
        reference = []
        for t in texts:  # as piper does it: the voice set again before every text
            phonemize._voice_set[0] = None
            reference.append(ph.symbols(t))
        n_reference = len(calls)
        once = [ph.symbols(t) for t in texts]
    finally:
        espeakbridge.set_voice._booktts_original = original
    assert n_reference >= len(texts), "the reference set the voice before every text"
    assert len(calls) - n_reference <= 1, "then the voice was set once at most"
    diff = [t for t, a, b in zip(texts, reference, once) if a != b]
    assert not diff, f"{len(diff)} texts phonemized differently, e.g. {diff[:3]}"
