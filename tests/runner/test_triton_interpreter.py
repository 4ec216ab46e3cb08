"""The Triton kernel against the torch reference under TRITON_INTERPRET=1 on CPU tensors:
prefill, decode, mixed ragged batches, chunked prefill, MHA, GQA (2, 3, 4 queries per KV head),
odd head and block sizes, a sliding window, chunked local attention; every block table
shuffled. Within 1e-5 (fp32).

The interpreter must be on before triton is first imported, so the cases run in a child process
(`python -m tests.runner.attention_cases`), once for the module, which also runs a short
engine workload on both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the model runner needs torch")
pytest.importorskip("triton", reason="the Triton backend needs triton")

from tests.runner.attention_cases import CASES  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def interpreter_run(tiny_model_dir: Path, tiny_llama4_dir: Path) -> dict[str, Any]:
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "tests.runner.attention_cases",
                          str(tiny_model_dir), str(tiny_llama4_dir)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("name", list(CASES))
def test_triton_interpreter_matches_reference(name: str,
                                              interpreter_run: dict[str, Any]) -> None:
    assert interpreter_run["max_abs_diff"][name] <= 1e-5


def test_engine_on_the_triton_backend(interpreter_run: dict[str, Any]) -> None:
    """The whole runner with the kernel (interpreted) gives the reference backend's tokens."""
    engine = interpreter_run["engine"]
    assert engine["triton"] == engine["torch"]


def test_chunked_local_engine_on_the_triton_backend(interpreter_run: dict[str, Any]) -> None:
    """Llama 4's chunked local layers through the kernel (interpreted): the reference's tokens."""
    (engine,) = interpreter_run["engines"].values()
    assert engine["triton"] == engine["torch"]
