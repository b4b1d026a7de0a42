"""The INT8 calibration corpus as phoneme ids: text in, :class:`engines.tools.quantize.CalibrationSet` out.

The engines see no text: :func:`engines.tools.quantize.ensure_int8` (and ``cli.py calibrate``) take the
utterances they calibrate on from their caller. This module makes them: the shipped public-domain
corpus (``data/calibration/``) or given ``.txt`` files, split into paragraphs and sentences
(:func:`jobs.segment.split_sentences`) and phonemized for the voice (:class:`jobs.phonemize.Phonemizer`).
A caller hands a :class:`CalibrationCorpus` to :func:`engines.load_engine` (``calibration=``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.errors import InputError
from engines.tools.quantize import CalibrationSet

ROOT = Path(__file__).resolve().parent.parent
#: The calibration corpus shipped with the project (public-domain text).
CALIBRATION_DIR = ROOT / "data" / "calibration"
#: Calibration defaults: utterances of the corpus, utterances of the sensitivity scan.
DEFAULT_UTTERANCES = 200
DEFAULT_SCAN_UTTERANCES = 4


def corpus_files(paths=None) -> list[Path]:
    """The text files of a corpus: given files / directories, or the shipped :data:`CALIBRATION_DIR`."""
    paths = [Path(p) for p in (paths or [CALIBRATION_DIR])]
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(q for q in p.glob("*.txt") if q.is_file())
        elif p.is_file():
            files.append(p)
        else:
            raise InputError(f"calibration corpus {p} does not exist; pass a text file or a directory of .txt files")
    if not files:
        raise InputError(f"calibration corpus {', '.join(map(str, paths))} holds no .txt file")
    return files


def corpus_sentences(paths=None) -> list[str]:
    """Sentences of the corpus, in order (paragraphs split at blank lines, then into sentences)."""
    from jobs.segment import split_sentences

    out: list[str] = []
    for f in corpus_files(paths):
        text = f.read_text(encoding="utf-8-sig")
        for para in re.split(r"\n\s*\n", text):
            para = " ".join(para.split())
            if para and not para.startswith("#"):
                out += split_sentences(para)
    return out


def corpus_ids(voice, paths=None, n: int = DEFAULT_UTTERANCES, min_ids: int = 12, max_ids: int = 300,
               skip: int = 0) -> list[list[int]]:
    """Phoneme ids of ``n`` corpus sentences (``min_ids``..``max_ids`` ids), spread evenly over the corpus.

    ``skip`` drops every sentence chosen by ``corpus_ids(..., n=skip)`` first, so a scan set
    can be held out from the calibration set."""
    from jobs.phonemize import Phonemizer

    sents = corpus_sentences(paths)
    ph = Phonemizer(voice)
    pool = []
    for s in sents:
        p = ph(s)
        if p.speakable and min_ids <= len(p.ids) <= max_ids:
            pool.append(p.ids)
    if not pool:
        raise InputError(f"the calibration corpus has no sentence of {min_ids}..{max_ids} phoneme ids")
    return _spread(pool, n, skip)


def _spread(pool: list, n: int, skip: int = 0) -> list:
    taken = set(np.linspace(0, len(pool) - 1, num=min(skip, len(pool))).astype(int).tolist()) if skip else set()
    rest = [x for i, x in enumerate(pool) if i not in taken] or pool
    idx = np.linspace(0, len(rest) - 1, num=min(n, len(rest))).astype(int)
    return [rest[i] for i in sorted(set(idx.tolist()))]


@dataclass(frozen=True)
class CalibrationCorpus:
    """Where calibration utterances come from and how many: called with a voice, it gives the
    :class:`CalibrationSet` (the scan set first, held out from the calibration set)."""

    paths: tuple = ()
    """Text files or directories of ``.txt`` files; empty: the shipped :data:`CALIBRATION_DIR`."""
    n_utterances: int = DEFAULT_UTTERANCES
    scan_utterances: int = DEFAULT_SCAN_UTTERANCES
    max_ids: int = 300
    """Longest calibration utterance in phoneme ids."""

    def __call__(self, voice) -> CalibrationSet:
        paths = list(self.paths) or None
        scan = corpus_ids(voice, paths, n=self.scan_utterances, max_ids=self.max_ids)
        cal = corpus_ids(voice, paths, n=self.n_utterances, skip=self.scan_utterances, max_ids=self.max_ids)
        return CalibrationSet(cal, scan, [str(p) for p in corpus_files(paths)])
