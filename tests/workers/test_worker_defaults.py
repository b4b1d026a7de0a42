"""The worker's engine processes per GPU when --concurrency is not given (workers.gpus.engines_per_gpu,
default_concurrency): from the GPUs and the host's cores; 1 on CPU. No Redis, no GPU."""

from __future__ import annotations

import pytest

from workers import gpus
from workers.gpus import MAX_ENGINES_PER_GPU, default_concurrency, engines_per_gpu


@pytest.mark.parametrize("cores,n_gpus,want", [
    (16, 1, 3),    # the H200 host of the bulk figures: three were the fastest
    (128, 8, 3),   # 16 cores a GPU
    (10, 1, 2), (14, 1, 2),
    (8, 1, 1), (2, 1, 1), (16, 2, 1),  # 8 cores a GPU
    (256, 1, MAX_ENGINES_PER_GPU),  # four were no faster than three
    (1, 0, 1),
])
def test_engines_per_gpu_from_the_cores_each_gpu_has(cores, n_gpus, want):
    n, why = engines_per_gpu(cores, n_gpus)
    assert n == want and f"{cores} host cores" in why


def test_a_mig_instance_gets_one_engine():
    assert engines_per_gpu(64, 2, mig=True)[0] == 1


def _smi(tmp_path, lines):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'EOF'\n" + "".join(l + "\n" for l in lines) + "EOF\n")
    smi.chmod(0o755)
    return str(smi)


def test_default_concurrency_counts_the_hosts_gpus_even_behind_cuda_visible_devices(tmp_path, monkeypatch):
    monkeypatch.setattr(gpus, "usable_cores", lambda: 32)
    smi = _smi(tmp_path, ["GPU 0: H (UUID: GPU-a)", "GPU 1: H (UUID: GPU-b)"])
    assert default_concurrency(None, "cpu", False, {"BOOKTTS_NVIDIA_SMI": smi})[0] == 1, "a CPU worker: 1"
    assert default_concurrency("all", "cpu", False, {"BOOKTTS_NVIDIA_SMI": smi})[0] == 3, "16 cores a GPU"
    # one worker per GPU with its own CUDA_VISIBLE_DEVICES (bench/bulk_gpu.py): the other GPU still counts
    assert default_concurrency(None, "cuda:0", True, {"BOOKTTS_NVIDIA_SMI": smi, "CUDA_VISIBLE_DEVICES": "1"})[0] == 3
    monkeypatch.setattr(gpus, "usable_cores", lambda: 16)
    assert default_concurrency(None, "cuda:0", True, {"BOOKTTS_NVIDIA_SMI": smi, "CUDA_VISIBLE_DEVICES": "1"})[0] == 1
    assert default_concurrency(None, "cuda:0", True, {"BOOKTTS_NVIDIA_SMI": str(tmp_path / "none")})[0] == 3, \
        "no nvidia-smi: one GPU"
    mig = _smi(tmp_path, ["GPU 0: H (UUID: GPU-a)", "  MIG 3g.71gb     Device  0: (UUID: MIG-x)"])
    assert default_concurrency("all", "cpu", False, {"BOOKTTS_NVIDIA_SMI": mig})[0] == 1


def test_usable_cores_is_at_least_one():
    assert gpus.usable_cores() >= 1
