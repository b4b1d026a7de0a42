"""Precompiling the fused kernels (engines/torch_vits/precompile.py) and the launch helpers it uses.

The enumeration is checked against a real synthesis in a child process (precompile_cases.py: on
CPU under Triton's interpreter, on CUDA natively, where it also checks that the first batch
after precompiling compiles nothing). The rest runs here, with stand-in kernels: the switch, the
observer, and that a failure while precompiling is logged once and never raised.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 to test the torch engine")
triton = pytest.importorskip("triton", reason="triton is not installed: pip install triton (the fused kernels need it)")

from engines.torch_vits import precompile as P  # noqa: E402
from engines.torch_vits.launch import KernelLaunch, launch, launch_key, observe  # noqa: E402
from tests.engines.kernel_child import run_cases  # noqa: E402

HERE = Path(__file__).resolve().parent


# ------------------------------------------------------------------ enumeration against a real pass
@pytest.fixture(scope="module")
def results(voice):
    pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")
    return run_cases(HERE / "precompile_cases.py", drop_env=("BOOKTTS_TORCH_PRECOMPILE", "TRITON_CACHE_DIR"))


def test_enumerated_launches_are_the_launched_ones(results):
    device, r = results
    got = r["enumerated-vs-launched"]
    # the batch really went through two frame buckets, one of them as a chunk of two rows, and every kernel
    assert sorted({f for _, f in got["chunks"]}) == [8, 16] and max(n for n, _ in got["chunks"]) >= 2, got
    assert got["max_rows_launched"] >= 2, got
    assert got["names"] == ["coupling_io_kernel", "postconv_pcm_kernel", "resconv_kernel", "sample_prior_kernel",
                            "upsample_kernel", "wn_layer_kernel"], got
    assert got["audio_ok"], got
    # what the dry run enumerates for the engine's shapes is what the real pass launched; beyond it only
    # the stage-B input kernel's variants for other phoneme widths and without noise (it is enumerated for
    # every width a batch may have: 6 widths x noise on/off, one of which this batch used)
    assert got["missing"] == [], got
    assert got["extra_names"] == ["sample_prior_kernel"] and got["extra_count"] == 11, got
    assert got["launched"] == got["enumerated"] - 11 > 10, got


def test_first_batch_after_precompile_compiles_nothing(results):
    device, r = results
    if device != "cuda":
        pytest.skip("Triton compiles only on a GPU (on CPU the kernels run under its interpreter)")
    assert r["engine_extra"]["precompile"] and r["engine_extra"]["precompile_kernels"] > 0, r["engine_extra"]
    assert r["cuda-first-batch-compiles"]["compiled"] == 0, r


# ------------------------------------------------------------------ through the real Triton compiler
def _triton_child(cache_dir) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_CACHE_DIR")}
    proc = subprocess.run([sys.executable, str(HERE / "precompile_triton_cases.py"), str(cache_dir)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_precompile_fills_tritons_caches(tmp_path):
    # Triton's own warm-up and compiler (for sm_90, with its bundled ptxas; no GPU needed to compile)
    r = _triton_child(tmp_path)
    if "stand-in driver" in str(r["first"]["error"]):
        pytest.skip(f"this Triton ({r['triton']}) needs more of its driver than the stand-in has: {r['first']['error']}")
    assert r["first"]["error"] is None and r["first"]["failed"] == 0, r
    assert r["first"]["kernels"] == 2 and r["first"]["compiled"] == 2 and r["cubins"] == 2, r
    assert r["again"]["kernels"] == 0 and r["again"]["error"] is None, r  # in memory now: nothing to do
    assert r["launch_compiles"] == 0 and r["launch_kernels"] == ["CompiledKernel"], r  # launches find them
    r2 = _triton_child(tmp_path)  # a new process, the same cache directory: loaded, not compiled
    assert r2["first"]["kernels"] == 2 and r2["first"]["cached"] == 2 and r2["first"]["compiled"] == 0, r2


# ------------------------------------------------------------------ the switch
def test_precompile_option_from_the_environment():
    from core.settings import SettingError
    from engines.torch_options import ENV, TorchOptions

    var = ENV["precompile"]
    assert TorchOptions.from_env({}).flag("precompile") is None  # default: the engine turns it on where it applies
    assert TorchOptions.from_env({var: ""}).flag("precompile") is None
    assert TorchOptions.from_env({var: "1"}).flag("precompile") is True
    assert TorchOptions.from_env({var: " 0 "}).flag("precompile") is False
    for bad in ("yes", "on", "2", "true"):
        with pytest.raises(SettingError, match=var):
            TorchOptions.from_env({var: bad})


@pytest.fixture(scope="module")
def cpu_engine(voice):
    pytest.importorskip("onnx", reason="the onnx package is needed to read the voice's weights")
    from engines import EngineSpec
    from engines.torch_engine import TorchEngine

    return TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1, max_batch=2))


def test_engine_switch(cpu_engine, voice, monkeypatch):
    from engines import EngineSpec
    from engines.torch_engine import TorchEngine
    from core.settings import SettingError

    # nothing to compile on CPU: off, whatever the switch says, and reported as such
    assert cpu_engine.info.extra["precompile"] is False and cpu_engine.info.extra["precompile_s"] == 0.0
    for on in (True, None):
        assert cpu_engine._resolve_precompile(on) is False
    # where there is something to compile (CUDA with a fused path), on unless switched off
    monkeypatch.setattr(cpu_engine, "is_cuda", True)
    monkeypatch.setattr(cpu_engine, "fused", True)
    for on, want in ((None, True), (True, True), (False, False)):
        assert cpu_engine._resolve_precompile(on) is want, on
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # interpreted kernels are not compiled
    assert cpu_engine._resolve_precompile(True) is False
    monkeypatch.setenv("BOOKTTS_TORCH_PRECOMPILE", "maybe")  # the environment, read when an engine is built
    with pytest.raises(SettingError, match="BOOKTTS_TORCH_PRECOMPILE"):
        TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1, max_batch=2))
    monkeypatch.delenv("BOOKTTS_TORCH_PRECOMPILE")
    # the constructor's argument wins over the options
    from engines.torch_options import TorchOptions

    eng = TorchEngine(voice, EngineSpec(name="torch", device="cpu", threads=1, max_batch=2,
                                        options=TorchOptions(precompile="off")), precompile=True)
    assert eng.options.precompile == "on"


# ------------------------------------------------------------------ the observer
class CountingKernel:
    """Stands in for a jitted kernel: ``kernel[grid](...)`` counts, ``warmup`` does what it is told."""

    def __init__(self, on_warmup=None):
        self.launched = []
        self.warmed = []
        self.on_warmup = on_warmup

    def __getitem__(self, grid):
        return lambda *args, **kw: self.launched.append((grid, args, kw))

    def warmup(self, *args, grid, **kw):
        self.warmed.append((grid, args, kw))
        return self.on_warmup(*args, **kw) if self.on_warmup else None


def test_observe_records_and_leaves_out():
    k = CountingKernel()
    kl = KernelLaunch(k, (4, 2), (torch.zeros(8), 16, 0.5), dict(C=32, num_warps=4))
    seen = []
    with observe(seen.append, run=False):
        launch(kl)
    assert seen == [kl] and k.launched == []  # shown, not launched
    with observe(seen.append):
        launch(kl)
    assert len(seen) == 2 and len(k.launched) == 1  # shown and launched
    launch(kl)
    assert len(seen) == 2 and len(k.launched) == 2  # outside: launched only
    with observe(seen.append, run=False), pytest.raises(RuntimeError):
        with observe(seen.append):
            pass


def test_observe_is_per_thread():
    k = CountingKernel()
    kl = KernelLaunch(k, (1,), (), {})
    seen = []
    with observe(seen.append, run=False):
        t = threading.Thread(target=launch, args=(kl,))
        t.start()
        t.join()
        launch(kl)
    assert len(k.launched) == 1 and seen == [kl]  # the other thread's launch ran and was not observed


def test_launch_key():
    k = CountingKernel()
    a = torch.zeros(64, dtype=torch.float16)
    base = launch_key(KernelLaunch(k, (1, 1), (a, 64, 0.1), dict(C=32)))
    assert launch_key(KernelLaunch(k, (9, 7), (torch.ones(64, dtype=torch.float16), 64, 0.1), dict(C=32))) == base
    for other in (KernelLaunch(k, (1, 1), (a.float(), 64, 0.1), dict(C=32)),  # dtype
                  KernelLaunch(k, (1, 1), (a[1:], 64, 0.1), dict(C=32)),  # 16-byte alignment
                  KernelLaunch(k, (1, 1), (a, 65, 0.1), dict(C=32)),  # an integer argument
                  KernelLaunch(k, (1, 1), (a, 64, 0.1), dict(C=64)),  # a constexpr
                  KernelLaunch(CountingKernel(), (1, 1), (a, 64, 0.1), dict(C=32))):  # another kernel
        assert launch_key(other) != base


# ------------------------------------------------------------------ failures fall back to lazy compiles
def _lists(*kernels):
    return [[KernelLaunch(k, (1,), (torch.zeros(4), i), {"num_warps": 4}) for i, k in enumerate(kernels)]]


def _warnings(caplog):
    return [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "booktts.torch"]


def test_precompile_dedupes_and_reports(caplog):
    k = CountingKernel()
    lists = [[KernelLaunch(k, (g, 1), (torch.zeros(4), 16), {"C": 32}) for g in (1, 2, 3)],
             [KernelLaunch(k, (1, 5), (torch.zeros(4), 16), {"C": 32}),
              KernelLaunch(k, (1, 5), (torch.zeros(4), 32), {"C": 32})]]
    with caplog.at_level(logging.INFO, logger="booktts.torch"):
        rep = P.precompile(iter(lists), "cpu", workers=2)
    assert rep.error is None and rep.failed == 0 and not _warnings(caplog)
    assert rep.launches == 2 and len(k.warmed) == 2  # the same specialization is asked for once


def test_precompile_logs_and_continues_when_warmup_raises(caplog):
    def boom(*args, **kw):
        raise RuntimeError("ptxas fatal: out of memory")

    good = CountingKernel()
    rep = P.precompile(_lists(CountingKernel(boom), good), "cpu", workers=2)
    assert rep.error and "ptxas fatal" in rep.error
    assert len(_warnings(caplog)) == 1 and "compile on first use" in _warnings(caplog)[0].getMessage()
    # nothing was launched, and a later launch goes through as usual
    assert good.launched == []
    launch(_lists(good)[0][0])
    assert len(good.launched) == 1


def _submit_to_triton(fn):
    """Submit ``fn`` as a compile job through Triton's active AsyncCompileMode, as JITFunction does."""
    from triton.runtime import _async_compile

    mode = _async_compile.active_mode.get()
    assert mode is not None, "precompile must run the warm-ups inside triton.AsyncCompileMode"
    extra = [lambda fk: None] * (len(inspect.signature(mode.submit).parameters) - 3)  # 3.9: a cleanup callback
    return mode.submit(("key", id(fn)), fn, lambda kernel: None, *extra)


def test_precompile_logs_and_continues_when_a_compile_job_fails(caplog):
    from triton.runtime import _async_compile

    def failing_compile():
        raise RuntimeError("PassManager::run failed")

    done = []
    ok = CountingKernel(lambda *a, **kw: _submit_to_triton(lambda: done.append(1) or "kernel"))
    bad = CountingKernel(lambda *a, **kw: _submit_to_triton(failing_compile))
    rep = P.precompile(_lists(ok, bad), "cpu", workers=2)
    assert done == [1] and rep.kernels == 2 and rep.failed == 1
    assert rep.error and "1 of 2" in rep.error and "PassManager" in rep.error
    assert len(_warnings(caplog)) == 1
    assert _async_compile.active_mode.get() is None  # Triton's compile mode is not left on


def test_precompile_logs_and_continues_when_the_dry_run_fails(caplog):
    def dry_run():
        yield from _lists(CountingKernel())
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    rep = P.precompile(dry_run(), "cpu", workers=1)
    assert rep.error and "OutOfMemoryError" in rep.error
    assert len(_warnings(caplog)) == 1
