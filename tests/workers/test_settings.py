"""Worker settings that travel through the environment to the pool processes."""

from __future__ import annotations

import sys

from engines import EngineSpec
from workers import runtime
from workers.runtime import WorkerSettings


def test_switch_interval_defaults_to_half_a_millisecond_on_a_gpu_and_travels_in_the_environment():
    gpu = WorkerSettings(EngineSpec(name="torch", precision="fp16", device="cuda:0"))
    cpu = WorkerSettings(EngineSpec())
    assert gpu.switch_interval_ms == runtime.GPU_SWITCH_INTERVAL_MS and cpu.switch_interval_ms is None
    assert WorkerSettings.from_env(gpu.to_env()).switch_interval_ms == runtime.GPU_SWITCH_INTERVAL_MS
    assert runtime.SWITCH_INTERVAL_ENV not in cpu.to_env()
    assert WorkerSettings.from_env({**cpu.to_env(), runtime.SWITCH_INTERVAL_ENV: "2"}).switch_interval_ms == 2.0
    before = sys.getswitchinterval()
    try:
        runtime.apply_switch_interval(gpu)
        assert abs(sys.getswitchinterval() - 0.0005) < 1e-9
        runtime.apply_switch_interval(cpu)  # None: left as it is
        assert abs(sys.getswitchinterval() - 0.0005) < 1e-9
    finally:
        sys.setswitchinterval(before)
