"""Run a kernel-cases script in a child process and read the JSON it prints.

Triton's CPU interpreter must be chosen (``TRITON_INTERPRET=1``) before Triton is first
imported, and other tests in the pytest process may already have imported it (torch.compile
does), so the kernel tests run their cases in a fresh interpreter: on CPU under the
interpreter, on CUDA natively.
"""

import json
import os
import subprocess
import sys
from pathlib import Path


def run_cases(script: Path, drop_env=()) -> tuple[str, dict]:
    """(device, the script's results): on ``cuda`` when PyTorch sees a GPU, else on ``cpu`` under
    Triton's interpreter; ``drop_env``: variables the child must not inherit."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    env = {k: v for k, v in os.environ.items() if k not in drop_env}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, str(script), device], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return device, json.loads(proc.stdout.strip().splitlines()[-1])
