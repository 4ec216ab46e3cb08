"""`vtwin kv plan`'s words: one line per group saying why these layers and this page size."""

from __future__ import annotations

from impl.plan import ModelSpec, PlanOptions, plan_kv_cache
from impl.plan.explain import explain
from impl.plan.units import size
from tests.plan.test_planner import attn, mamba, seed_case_2


def test_ratio_groups_say_how_layers_were_dealt() -> None:
    lines = explain(plan_kv_cache(seed_case_2(), 1 << 30))
    assert lines[0] == "seed-case-2: 30 layers -> 3 KV-cache groups"
    assert lines[2] == (
        "  group 1: sliding_window(32), 10 layers (layers 1, 4, 7, 10, 13, 16, ...), block 16: "
        "20 sliding_window(32) layers dealt round-robin into 2 groups; groups hold up to 10 "
        "layers (the smallest type has 10); page 64 KiB = 16 tokens x 4 KiB per token; 129 "
        "blocks per max-length request")


def test_mamba_hybrid_says_why_the_block_grew_and_the_state_is_padded() -> None:
    layers = [attn(i) if i % 8 == 4 else mamba(i) for i in range(16)]
    lines = explain(plan_kv_cache(ModelSpec("jamba-ish", tuple(layers)), 4 << 30))
    assert "page 320 KiB = one 304 KiB state (padded from 304 KiB to 320 KiB" in lines[1]
    assert ("page 320 KiB = 80 tokens x 4 KiB per token (block grown from 16 to 80 tokens so a "
            "page holds the 304 KiB mamba state)") in lines[-2]


def test_packed_groups_keep_their_pages() -> None:
    model = ModelSpec("m", (attn(0, heads=8), attn(1, "sliding_window", heads=2,
                                                   sliding_window=64), attn(2, heads=8)))
    lines = explain(plan_kv_cache(model, 1 << 30, PlanOptions(kv_cache_layout="BLHNC")))
    assert "a block-outer layout packs pages of different sizes side by side" in lines[1]
    assert "128 KiB a block = 2 x 64 KiB (each layer keeps its own page)" in lines[1]


def test_sizes() -> None:
    assert [size(n) for n in (1000, 65536, 2162688, 8589803520, 5 << 30)] == [
        "1000 B", "64 KiB", "2112 KiB", "8.00 GiB", "5 GiB"]
