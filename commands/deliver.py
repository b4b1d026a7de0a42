"""``deliver``: write a finished job's files again with other output settings, without synthesis.

Option parsing and printing only; the work is :func:`jobs.redeliver.redeliver`.
"""

from __future__ import annotations

from pathlib import Path

import click

from core import settings as env_settings
from commands.options import FlacLevel, friendly_errors, limit_type, metadata_options
from commands.progress import audio_lines, fmt_duration
from jobs.config import AUDIO_FORMATS, LIMITS, LOUDNESS_MODES


def _pause_options() -> list:
    """``--chapter-pause``/``--section-pause`` where the job settings have them."""
    return [click.option(LIMITS[name].option, name, type=limit_type(name), default=None,
                         help=f"Seconds of silence {what} [default: the job's].")
            for name, what in (("chapter_pause_s", "at the end of each chapter but the last"),
                               ("section_pause_s", "between a chapter's sections"))
            if name in LIMITS]


def _with(options):
    def decorate(f):
        for opt in reversed(options):
            f = opt(f)
        return f
    return decorate


@click.command("deliver")
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="The job's output directory (a job run to the end: its synthesis is kept in .work/batches).")
@click.option("--format", "audio_format", type=click.Choice(AUDIO_FORMATS), default=None,
              help="Deliverable format [default: the job's].")
@click.option("--loudness", type=click.Choice(LOUDNESS_MODES), default=None, help="Loudness [default: the job's].")
@click.option("--captions", default=None, metavar="LIST", help="srt, vtt, srt,vtt or none [default: the job's].")
@click.option("--flac-level", type=FlacLevel(), default=None,
              help="FLAC compression level 0-8, or auto (chosen from the host's load) [default: the job's].")
@_with(metadata_options())
@_with(_pause_options())
@click.option("--redis-url", envvar=env_settings.setting("REDIS_URL").name, default=None, metavar="URL",
              help="For a job the workers ran (submit): the Redis whose record of it is brought up to date "
                   "[env REDIS_URL; default redis://localhost:6379/0].")
@friendly_errors
def deliver(out_dir, redis_url, **changes) -> None:
    """Write the deliverables of the finished job in OUT again (format, loudness, captions, tags,
    cover, pauses) from its kept synthesis, without synthesizing: no engine is loaded.

    Options left out keep the job's settings. The new files are written aside first; if anything
    fails, the job's files stay as they were. job.json records the new settings.
    """
    from jobs.job import load_job
    from jobs.redeliver import redeliver

    job = load_job(out_dir)
    click.echo(f"job {job.job_id}: writing its files again from its kept synthesis (no engine)...", err=True)
    done = redeliver(job, changes)
    cfg = load_job(out_dir).config
    s = done.summary
    from jobs import formats

    kind = cfg.audio_format.upper() if formats.per_book(cfg.audio_format) else "chapter"
    click.echo(f"delivered: {len(done.files)} {kind} file{'' if len(done.files) == 1 else 's'}, {s.utterances} utterances, {fmt_duration(s.audio_s)} of "
               f"audio in {fmt_duration(done.seconds)}, nothing synthesized ({cfg.output_flags()})")
    if done.removed:
        click.echo(f"removed {len(done.removed)} files of the earlier settings")
    for line in audio_lines(out_dir, done.files, cfg.audio_format):
        click.echo(line)
    click.echo(f"manifest: {Path(out_dir) / s.manifest}")
    _update_record(load_job(out_dir), redis_url)


def _update_record(job, redis_url) -> None:
    """A job the workers ran (its directory records a queue): its record in Redis gets the new
    summary (:func:`workers.control.record_delivery`). Redis unreachable: one line, the deliver stands."""
    from workers.control import record_delivery, recorded_queue

    if recorded_queue(job.out_dir) is None:  # a local run's job: no record in Redis
        return
    import redis

    from workers.celery_app import redact_url
    from workers.state import JobStore

    store = None
    try:
        store = JobStore(redis_url)
        store.r.ping()
        if record_delivery(store, job):
            click.echo(f"job {job.job_id}: its record in Redis updated ({redact_url(store.url)})")
        else:
            click.echo(f"note: job {job.job_id}'s record in Redis was not updated: Redis at {redact_url(store.url)} "
                       f"has no done job {job.job_id} in {job.out_dir} (--redis-url / REDIS_URL names the Redis "
                       f"it was submitted to)", err=True)
    except (redis.exceptions.RedisError, OSError, ValueError) as exc:  # (ValueError: an unparsable URL)
        where = redact_url(store.url) if store is not None else "Redis"
        click.echo(f"note: job {job.job_id}'s record in Redis ({where}) was not updated ({type(exc).__name__}); "
                   f"`status` shows the earlier files until `cli.py resume {job.out_dir}` with Redis up", err=True)


COMMANDS = [deliver]
