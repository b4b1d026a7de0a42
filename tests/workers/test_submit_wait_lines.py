"""``submit --wait`` as a user meets it (issue 28, R4), against a real redis-server and a real worker
(fake engine): progress as ``progress:`` lines when stderr is not a terminal, the path of the audio in
the closing lines, and the metadata options reaching the files' tags."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from mutagen.flac import FLAC

from cli import main

pytestmark = [pytest.mark.redis, pytest.mark.timeout(180)]


def test_submit_wait_prints_progress_lines_and_where_the_audio_is(redis_url, start_worker, short_book, tmp_path):
    start_worker(redis_url, "lines")
    out = tmp_path / "out"
    res = CliRunner(env={"REDIS_URL": redis_url}).invoke(
        main, ["submit", str(short_book), "-o", str(out), "--max-batch", "2", "--wait", "--narrator", "Ann Reader"])
    assert res.exit_code == 0, res.output
    progress = [l for l in res.stderr.splitlines() if l.startswith("progress: ")]
    assert progress and "batches" in progress[0], res.stderr
    flacs = sorted(out.rglob("*.flac"))
    assert len(flacs) == 2
    audio = [l for l in res.stdout.splitlines() if l.startswith("audio: ")]
    assert audio == [f"audio: {flacs[0].parent}/ (2 FLAC files: {flacs[0].name} ... {flacs[1].name})"], res.stdout
    assert FLAC(flacs[0])["composer"] == ["Ann Reader"]
