#!/usr/bin/env python3
"""booktts: turn books (TXT, Markdown, EPUB) into chapter audio with a Piper voice.

    python cli.py run BOOK... -o OUTDIR          synthesize in this process (the embedded default)
    python cli.py plan BOOK...                    show chapters, utterances and batches; synthesize nothing
    python cli.py submit / worker / status ...    the distributed runner (Celery via Redis)

Errors are one line on stderr with a non-zero exit code; set BOOKTTS_DEBUG=1 for tracebacks.
"""

from __future__ import annotations

import logging
import sys

import click

from commands.options import clip_values, exit_broken_pipe


def usage_error_line(exc: click.ClickException) -> str:
    """click's own error (unknown option, missing argument, bad choice or range) as one line."""
    msg = clip_values(" ".join(exc.format_message().split()))  # a 100 kB value: its first characters
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        msg += f" (see `{ctx.command_path} --help`)"
    return msg


class OneLineErrorGroup(click.Group):
    """The command group whose usage errors are one ``error:`` line (exit code 2), like every other
    error of the CLI, instead of click's Usage/Try/Error block. A broken stdout pipe exits quietly."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except getattr(click.exceptions, "NoArgsIsHelpError", ()) as exc:  # bare `cli.py`: the help
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {usage_error_line(exc)}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        except BrokenPipeError:
            exit_broken_pipe()
        sys.exit(rv if isinstance(rv, int) else 0)  # an int: click's Exit (after --help, say)


@click.group(cls=OneLineErrorGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("-v", "--verbose", is_flag=True, help="Log more.")
@click.version_option(None, "--version", package_name="booktts", prog_name="booktts",
                      message="%(prog)s %(version)s")
def main(verbose: bool) -> None:
    """Batch audiobook synthesis with Piper voices: books in, chapter audio and timing manifests out."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not verbose:
        logging.getLogger("piper").setLevel(logging.ERROR)


def _register_commands() -> None:
    """The commands, one module per concern in :mod:`commands`: the embedded runner's always; the
    distributed runner's, operations' and engine building's where their packages are installed.

    A host without those packages (a GPU box with only torch, say) still gets `run` and `plan`;
    the missing commands are named in `--help`.
    """
    import importlib

    from commands.local import COMMANDS as LOCAL

    for cmd in LOCAL:
        main.add_command(cmd)
    missing = []
    for module in ("commands.distributed", "commands.ops", "commands.engine"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            if exc.name and exc.name.split(".")[0] in ("core", "jobs", "engines", "workers", "commands"):
                raise
            missing.append(f"{module} (needs {exc.name}: pip install the project)")
            continue
        for cmd in mod.COMMANDS:
            main.add_command(cmd)
    if missing:
        main.epilog = "Not available on this host: " + "; ".join(missing)


def _register_or_exit() -> None:
    """:func:`_register_commands`; a setting that cannot be read while the commands are built (an
    environment variable, :mod:`core.settings`) is one ``error:`` line and exit code 2, not a traceback."""
    from core.settings import SettingError

    try:
        _register_commands()
    except SettingError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)


_register_or_exit()

if __name__ == "__main__":
    main()
