"""The offloading-manager machine against another vLLM release, inside that release's managed
environment (two releases cannot share a process).

`python -m conformance.offloading.release --release 0.33.0 --examples 200` is what the tests
run with the environment's interpreter: the twin follows that release (`impl.behaviour`), the
upstream side is the environment's own `CPUOffloadingManager`. It prints one line per shape
and exits 1 on the first divergence (Hypothesis's shrunk steps above it). `run_in_env` starts
it from the project's interpreter, installing Hypothesis into the environment when missing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from conformance.paths import REPO_ROOT


def run_shapes(release: str, examples: int, shapes: list[str]) -> int:
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    from conformance.offloading.machine import SHAPES, lockstep_machine
    from conformance.offloading.systems import ImplOffloadManager, ManagerShape
    from conformance.offloading.upstream import UpstreamOffloadManager

    def twin(shape: ManagerShape) -> ImplOffloadManager:
        return ImplOffloadManager(shape, release=release)

    def upstream(shape: ManagerShape) -> UpstreamOffloadManager:
        return UpstreamOffloadManager(shape, name=f"vllm=={release}")

    chosen = [shape for shape in SHAPES if not shapes or shape.name in shapes]
    for shape in chosen:
        machine = lockstep_machine(shape, twin, upstream)
        run_state_machine_as_test(machine, settings=settings(
            max_examples=examples, stateful_step_count=40, deadline=None, database=None,
            suppress_health_check=list(HealthCheck)))
        print(f"offloading manager {shape.name}: {examples} examples exact against "
              f"vllm=={release}", flush=True)
    return 0


def run_in_env(python: Path, release: str, examples: int) -> subprocess.CompletedProcess[str]:
    """Run the machine under the environment's interpreter `python` (Hypothesis installed
    into it first when missing); the completed process, output captured."""
    if subprocess.run([str(python), "-c", "import hypothesis"], check=False,
                      capture_output=True).returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "hypothesis>=6.100"],
                       check=True)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [str(python), "-m", "conformance.offloading.release", "--release", release,
         "--examples", str(examples)], cwd=REPO_ROOT, env=env, check=False,
        capture_output=True, text=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.offloading.release")
    parser.add_argument("--release", required=True, help="the release installed here")
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--shape", action="append", default=[], help="only this shape")
    args = parser.parse_args(argv)
    return run_shapes(args.release, args.examples, args.shape)


if __name__ == "__main__":
    sys.exit(main())
