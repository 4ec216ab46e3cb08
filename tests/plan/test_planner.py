"""The KV-cache planner on the seed's cases and the rules found by probing, with exact values.

Each expected value is worked out in the test from the rule it checks (bytes per token, pages,
block counts), so a failure says which rule moved. Equality with upstream's planner is the
differential tests' job (conformance/tests/test_plan_*.py).
"""

from __future__ import annotations

import pytest

from impl.plan import LayerSpec, ModelSpec, PlanError, PlanOptions, plan_kv_cache
from impl.plan.layers import attention_layer_name, mamba_layer_name
from impl.plan.render import plan_to_dict

GIB = 1 << 30


def attn(index: int, kind: str = "full", heads: int = 8, size: int = 128,
         **window: int) -> LayerSpec:
    return LayerSpec(attention_layer_name(index), kind, heads, size, **window)  # type: ignore[arg-type]


def mamba(index: int, shapes: tuple[tuple[int, ...], ...] = ((8192, 3), (8192, 16))) -> LayerSpec:
    return LayerSpec(mamba_layer_name(index), "mamba", state_shapes=shapes,
                     state_dtypes=("bfloat16",) * len(shapes))


def names(plan_groups: list[list[int]]) -> list[tuple[str, ...]]:
    return [tuple(attention_layer_name(i) for i in group) for group in plan_groups]


def seed_case_2() -> ModelSpec:
    """10 full + 20 sliding-window layers, the pattern (full, sw, sw) ten times."""
    return ModelSpec("seed-case-2", tuple(
        attn(i) if i % 3 == 0 else attn(i, "sliding_window", sliding_window=32)
        for i in range(30)))


def test_seed_case_2_three_groups_of_ten_share_ten_buffers() -> None:
    plan = plan_kv_cache(seed_case_2(), 8 * GIB)
    assert [g.layer_names for g in plan.groups] == names([
        list(range(0, 30, 3)), list(range(1, 30, 3)), list(range(2, 30, 3))])
    page = 16 * 2 * 8 * 128 * 2  # tokens x (K, V) x heads x head size x bf16
    assert page == 65536 and plan.bytes_per_block == 10 * page
    assert plan.num_blocks == 8 * GIB // (10 * page) == 13107
    # One tensor per group, each spanning the whole pool; layer j of every group aliases.
    assert [(t.size, t.layer_stride, t.block_stride, t.offset) for t in plan.tensors] == [
        (13107 * 10 * page, 13107 * page, page, 0)] * 3
    # A 2048-token request: 128 full blocks; a 32-token window holds 31 + 2048 in flight
    # tokens, capped at the request's 2048, plus one block for a window off the block grid.
    assert plan.request_blocks() == (128, 129, 129)
    short = plan_kv_cache(seed_case_2(), 8 * GIB, PlanOptions(max_num_batched_tokens=64))
    assert short.request_blocks() == (128, -(-(31 + 64) // 16) + 1, 7)


def test_seed_case_3_gemma_groups_by_the_smallest_type_round_robin() -> None:
    """52 sliding + 10 full: groups of 10, sliding layers dealt into 6 groups (9,9,9,9,8,8)."""
    layers = [attn(i, "sliding_window", 16, 128, sliding_window=1024) if (i + 1) % 6
              else attn(i, "full", 16, 128) for i in range(62)]
    plan = plan_kv_cache(ModelSpec("gemma", tuple(layers)), 24 * GIB,
                         PlanOptions(max_model_len=8192))
    sliding = [i for i in range(62) if (i + 1) % 6]
    assert [len(g.layer_names) for g in plan.groups] == [9, 9, 9, 9, 8, 8, 10]
    assert [g.layer_names for g in plan.groups] == names(
        [sliding[k::6] for k in range(6)] + [list(range(5, 62, 6))])
    assert plan.bytes_per_block == 10 * 16 * 2 * 16 * 128 * 2  # the widest group: 10 pages


def test_group_size_takes_the_largest_count_below_one_and_a_half() -> None:
    """12 full + 13 sliding (gpt-oss with a drafter layer): groups of 13, full padded."""
    layers = [attn(i, "sliding_window", sliding_window=128) if i < 13 else attn(i)
              for i in range(25)]
    plan = plan_kv_cache(ModelSpec("m", tuple(layers)), 8 * GIB)
    assert [len(g.layer_names) for g in plan.groups] == [13, 12]
    assert plan.bytes_per_block == 13 * 65536


@pytest.mark.parametrize(("counts", "size"), [((2, 3), 2), ((2, 2), 2), ((3, 4), 4),
                                               ((10, 14), 14), ((10, 15), 10), ((1, 7), 1)])
def test_group_size_at_and_around_the_one_and_a_half_boundary(counts: tuple[int, int],
                                                              size: int) -> None:
    """The largest count only when strictly under 1.5 times the smallest: 2:3 layers (exactly
    1.5) group by the smallest, as upstream's planner does."""
    from impl.plan.grouping import group_size

    assert group_size(counts) == size


def test_seed_case_4_jamba_block_grows_and_mamba_pads() -> None:
    """One attention : seven mamba. A state is 8192*3*2 + 8192*16*2 = 311296 B; a token 4096 B:
    the block grows in steps of 16 tokens to 16 * ceil(311296 / 65536) = 80, mamba pads to it."""
    layers = [attn(i) if i % 8 == 4 else mamba(i) for i in range(32)]
    plan = plan_kv_cache(ModelSpec("jamba", tuple(layers)), 24 * GIB)
    assert plan.sizes.block_size == 80 and plan.sizes.mamba_state_bytes == 311296
    assert plan.sizes.mamba_page_size_padded == 80 * 4096
    assert plan.block_sizes == (80,) * 8
    mamba_group = plan_to_dict(plan)["groups"][0]["spec"]
    assert mamba_group == {"type": "mamba", "block_size": 80, "shapes": [[8192, 3], [8192, 16]],
                           "dtypes": ["bfloat16", "bfloat16"], "mamba_cache_mode": "align",
                           "page_size_bytes": 327680, "page_size_padded": 327680}
    assert plan.request_blocks() == (2,) * 7 + (-(-2048 // 80),)


def test_mamba_without_prefix_caching_spans_the_whole_request() -> None:
    layers = [attn(0), mamba(1)]
    plan = plan_kv_cache(ModelSpec("m", tuple(layers)), GIB,
                         PlanOptions(enable_prefix_caching=False, max_model_len=4096))
    spec = plan_to_dict(plan)["groups"][1]["spec"]
    assert (spec["type"], spec["block_size"], spec["mamba_cache_mode"]) == ("mamba", 4096, "none")
    assert plan.request_blocks() == (-(-4096 // 80), 1)


def test_window_blocks_follow_the_kernel_block() -> None:
    """Block 8 with 16-token kernels: window layers take 16, full layers scale 8 -> 16.
    Block 24: window layers take 16; 24 is not a multiple of 16, so their pages are padded."""
    model = ModelSpec("m", (attn(0, "sliding_window", sliding_window=64), attn(1)))
    small = plan_kv_cache(model, GIB, PlanOptions(block_size=8))
    assert small.block_sizes == (16, 16)
    odd = plan_to_dict(plan_kv_cache(model, GIB, PlanOptions(block_size=24)))
    sliding, full = (g["spec"] for g in odd["groups"])
    assert (sliding["block_size"], sliding["page_size_padded"]) == (16, 24 * 4096)
    assert (full["block_size"], full["page_size_padded"]) == (24, None)
    cpu = plan_kv_cache(model, GIB, PlanOptions(block_size=16, kernel_block_size=32))
    assert cpu.block_sizes == (32, 32)


def test_one_type_with_different_pages_is_one_group_of_own_pages() -> None:
    model = ModelSpec("m", (attn(0, heads=8), attn(1, heads=2), attn(2, heads=8)))
    plan = plan_kv_cache(model, GIB)
    (group,) = plan.groups
    assert group.uniform_type and group.page_size_bytes == (8 + 2 + 8) * 16 * 512
    assert [(t.layers, t.offset) for t in plan.tensors] == [
        ((attention_layer_name(0), attention_layer_name(2)), 0),
        ((attention_layer_name(1),), 2 * plan.num_blocks * 65536)]


def test_hybrid_manager_off_promotes_windows_to_full() -> None:
    plan = plan_kv_cache(seed_case_2(), 8 * GIB, PlanOptions(disable_hybrid_kv_cache_manager=True))
    (group,) = plan_to_dict(plan)["groups"]
    assert group["spec"]["type"] == "full" and group["spec"]["sliding_window"] == 32
    assert plan.bytes_per_block == 30 * 65536
    with pytest.raises(PlanError, match="failed to promote"):
        plan_kv_cache(ModelSpec("m", (attn(0), mamba(1))), GIB,
                      PlanOptions(disable_hybrid_kv_cache_manager=True))
    two_windows = ModelSpec("m", (attn(0), attn(1, "sliding_window", sliding_window=8),
                                  attn(2, "sliding_window", sliding_window=16)))
    with pytest.raises(PlanError, match=r"same sliding window size \(got \[8, 16\]\)"):
        plan_kv_cache(two_windows, GIB, PlanOptions(disable_hybrid_kv_cache_manager=True))


def test_memory_for_one_full_length_request_is_checked_without_the_null_block() -> None:
    model = ModelSpec("m", (attn(0),))
    need = 128 * 65536  # 2048 tokens of one 4 KiB/token layer: 128 blocks of 64 KiB
    assert plan_kv_cache(model, need + 65536).num_blocks == 129
    with pytest.raises(PlanError) as refused:
        plan_kv_cache(model, need + 65535)
    assert str(refused.value) == (
        "memory: one request of max_model_len 2048 needs 8388608 bytes (8 MiB) of KV cache, "
        "more than the 8388607 bytes (8.00 MiB) left besides the null block; the longest that "
        "fits is 2032")
    with pytest.raises(PlanError, match="no memory left"):
        plan_kv_cache(model, 65536)
    override = plan_kv_cache(model, 1, PlanOptions(num_gpu_blocks_override=200))
    assert (override.num_blocks, override.tensors[0].size) == (200, 200 * 65536)


def test_layouts_place_blocks_and_layers() -> None:
    model = seed_case_2()
    block = plan_kv_cache(model, GIB, PlanOptions(kv_cache_layout="BLHNC"))
    t = block.tensors[0]
    assert (t.layer_stride, t.block_stride) == (65536, 10 * 65536)
    heads_first = plan_kv_cache(model, GIB, PlanOptions(kv_cache_layout="LHBNC"))
    n = heads_first.num_blocks
    t = heads_first.tensors[0]
    assert (t.layer_stride, t.block_stride) == (n * 65536, 16 * 512)
    # Block 24: the window page (16 tokens) is padded to 24 tokens' worth, and heads-first
    # layouts have no place for page padding between layers and blocks.
    window = ModelSpec("m", (attn(0), attn(1, "sliding_window", sliding_window=8)))
    with pytest.raises(PlanError) as refused:
        plan_kv_cache(window, GIB, PlanOptions(block_size=24, kv_cache_layout="LHBNC"))
    assert refused.value.upstream_class == "AssertionError"


def test_bad_layers_name_the_field() -> None:
    with pytest.raises(ValueError, match="^sliding_window: needed"):
        LayerSpec("x", "sliding_window", 1, 64)
    with pytest.raises(ValueError, match=r"^state_dtypes: one per state shape \(1\), got 0"):
        LayerSpec("x", "mamba", state_shapes=((4,),))
    with pytest.raises(ValueError, match="^layers: a model needs at least one layer"):
        ModelSpec("x", ())


def test_cross_attention_layers_group_apart_and_hold_a_steps_encoder_output() -> None:
    """A Whisper-style decoder: each layer a self-attention and a cross-attention. They group
    by type; a request's cross-attention blocks cover what the encoder takes in a step (the
    engine sets it to the step's token budget), whatever `max_model_len` is."""
    from impl.plan.layers import cross_attention_layer_name

    layers = []
    for i in range(4):
        layers.append(attn(2 * i))
        layers.append(LayerSpec(cross_attention_layer_name(2 * i + 1), "cross_attention", 8, 128))
    model = ModelSpec("whisper-like", tuple(layers))
    options = PlanOptions(max_model_len=448, max_num_batched_tokens=1000)
    plan = plan_kv_cache(model, GIB, options)
    kinds = [group["spec"]["type"] for group in plan_to_dict(plan)["groups"]]
    assert kinds == ["full", "cross_attention"]
    page = 16 * 8 * 128 * 2 * 2  # 16 tokens of K and V, 8 heads of 128, bfloat16
    assert plan.bytes_per_block == 4 * page
    # 28 blocks of the prompt's 448 tokens, 63 of the encoder's 1000 (the longest that fits
    # ignores the cross-attention share, which does not grow with the request).
    with pytest.raises(PlanError, match="needs 23855104 bytes .* the longest that fits is 432"):
        plan_kv_cache(model, (28 + 63) * 4 * page, options)
    assert plan_kv_cache(model, (28 + 63 + 1) * 4 * page, options).num_blocks == 92
    # With the hybrid manager off only windows and chunks are promoted to full allocation:
    # cross-attention stays its own type, so the model is refused (beside a window too).
    window = attn(8, "sliding_window", sliding_window=64)
    windowed = ModelSpec("whisper-windowed", (*layers, window))
    for refused in (model, windowed):
        with pytest.raises(PlanError, match="failed to promote"):
            plan_kv_cache(refused, GIB, PlanOptions(disable_hybrid_kv_cache_manager=True))
