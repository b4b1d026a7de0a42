"""Batch limits a job gets when the command line does not set them: they follow the engine's device."""

import click
import pytest
from click.testing import CliRunner

from engines import EngineSpec
from jobs.cli_options import engine_options, job_options
from jobs.config import (
    CPU_MAX_BATCH,
    DEFAULT_MAX_BATCH_PHONEMES,
    GPU_MAX_BATCH,
    GPU_MAX_BATCH_PHONEMES,
    batch_defaults,
)


@click.command()
@engine_options
@job_options
def probe(config, engine_spec):
    click.echo(f"{config.max_batch} {config.max_batch_phonemes} {engine_spec.max_batch}")


@pytest.mark.parametrize("args, want", [
    ([], (CPU_MAX_BATCH, DEFAULT_MAX_BATCH_PHONEMES)),  # the CPU default: batching buys little there
    (["--engine", "torch", "--device", "cuda:0"], (GPU_MAX_BATCH, GPU_MAX_BATCH_PHONEMES)),
    (["--engine", "tensorrt", "--device", "cuda:1"], (GPU_MAX_BATCH, GPU_MAX_BATCH_PHONEMES)),
    (["--engine", "torch", "--device", "cpu"], (CPU_MAX_BATCH, DEFAULT_MAX_BATCH_PHONEMES)),
    # an explicit setting wins on any device
    (["--engine", "torch", "--device", "cuda:0", "--max-batch", "64"], (64, GPU_MAX_BATCH_PHONEMES)),
    (["--max-batch", "8", "--max-batch-phonemes", "999"], (8, 999)),
], ids=["cpu-default", "cuda-torch", "tensorrt", "torch-on-cpu", "cuda-explicit-batch", "cpu-explicit-both"])
def test_batch_limits_follow_the_engine(args, want):
    res = CliRunner().invoke(probe, args)
    assert res.exit_code == 0, res.output
    batch, phonemes, engine_batch = map(int, res.output.split())
    assert (batch, phonemes) == want
    assert engine_batch == batch  # the engine is built for the batches the job is planned with


def test_batch_defaults_without_engine_are_the_cpu_ones():
    assert batch_defaults(None) == (CPU_MAX_BATCH, DEFAULT_MAX_BATCH_PHONEMES)
    assert batch_defaults(EngineSpec(name="onnx", device="cpu")) == (CPU_MAX_BATCH, DEFAULT_MAX_BATCH_PHONEMES)
