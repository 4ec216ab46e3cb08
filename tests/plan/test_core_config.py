"""Planned groups as the KV-cache manager's specs (`impl.core.specs`), and what cannot be."""

from __future__ import annotations

import pytest

from impl.core.specs import FullAttentionSpec, MambaSpec, SlidingWindowSpec
from impl.plan import LayerSpec, ModelSpec, PlanError, PlanOptions
from impl.plan.core_config import core_groups
from impl.plan.planner import plan_groups
from tests.plan.test_planner import attn, seed_case_2
from workloads.models import load_model


def test_window_and_full_groups() -> None:
    groups = core_groups(plan_groups(load_model("gpt-oss-20b").spec, PlanOptions()))
    assert [g.kv_cache_spec for g in groups] == [
        SlidingWindowSpec(16, 8, 64, "bfloat16", sliding_window=128),
        FullAttentionSpec(16, 8, 64, "bfloat16")]
    assert groups[0].layer_names[:2] == ("model.layers.0.self_attn.attn",
                                         "model.layers.2.self_attn.attn")


def test_mamba_groups_carry_the_padded_page_as_their_state() -> None:
    groups = core_groups(plan_groups(load_model("jamba-v0.1").spec, PlanOptions()))
    assert groups[0].kv_cache_spec == MambaSpec(80, state_bytes=80 * 4096,
                                                mamba_cache_mode="align")
    assert groups[-1].kv_cache_spec == FullAttentionSpec(80, 8, 128, "bfloat16")


@pytest.mark.parametrize(("layers", "options", "problem"), [
    ((attn(0), attn(1, "sliding_window", sliding_window=8)), PlanOptions(block_size=24),
     "kv_cache_groups[1]: pages padded to 98304 bytes"),
    ((attn(0, heads=8), attn(1, heads=2)), PlanOptions(),
     "kv_cache_groups[0]: layers of one type with different specs"),
    (seed_case_2().layers, PlanOptions(disable_hybrid_kv_cache_manager=True),
     "kv_cache_groups[0]: a local layer promoted to full allocation"),
    ((LayerSpec("model.layers.0.self_attn.attn", "full", 8, 128, "float8_e4m3fn"),),
     PlanOptions(), "kv_cache_groups[0]: cache dtype float8_e4m3fn"),
])
def test_what_the_core_specs_cannot_hold(layers: tuple[LayerSpec, ...], options: PlanOptions,
                                         problem: str) -> None:
    with pytest.raises(PlanError) as refused:
        core_groups(plan_groups(ModelSpec("m", layers), options))
    assert str(refused.value).startswith(problem)
