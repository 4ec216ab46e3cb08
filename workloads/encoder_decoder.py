"""Encoder-decoder models (Whisper): what a workload may ask for.

A `cross_attention` KV-cache group makes the model an encoder-decoder model: the decoder's
cross-attention layers read the encoder's output for the request's one input (its audio).
Such a request carries at most one multimodal item at offset 0 whose `length` is the encoder's
output tokens (an utterance's frames), not decoder prompt tokens, so it may be longer than the
prompt. The encoder runs on the request's first step; `config.multimodal` sizes its budget
and room.

What upstream refuses, turns off or the twin does not model is refused in one line naming the
field: prefix caching (cross-attention has no prefix cache; upstream turns it off for these
models), chunked prefill and a long-prefill threshold (upstream turns them off and sets
`disable_chunked_mm_input`: a prompt and its encoder input are scheduled whole),
a KV connector (upstream asserts), speculative decoding, two cross-attention groups (one
encoder), decoder groups other than full attention and sliding windows, embedding masks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from workloads.errors import WorkloadError
from workloads.multimodal import MultimodalConfig, MultimodalItem, check_item_size
from workloads.schema import EngineConfigModel

DECODER_GROUP_TYPES = ("full", "sliding_window")


def check_encoder_decoder_config(model: EngineConfigModel,
                                 fail: Callable[[str, str], WorkloadError]) -> None:
    """Refuse, naming the field, what an encoder-decoder model does not support."""
    types = [g.type for g in model.kv_cache_groups]
    if "cross_attention" not in types:
        return
    if types.count("cross_attention") > 1:
        raise fail("kv_cache_groups", "one cross_attention group at most (a model has one "
                   "encoder)")
    others = [t for t in types if t != "cross_attention"]
    if not others:
        raise fail("kv_cache_groups", "a cross_attention group needs the decoder's own group "
                   "(e.g. a full-attention group) beside it")
    for kind in others:
        if kind not in DECODER_GROUP_TYPES:
            raise fail("kv_cache_groups", f"a {kind!r} group beside cross_attention is not "
                       f"modelled (decoder groups: {', '.join(DECODER_GROUP_TYPES)})")
    for field, value, why in (
            ("enable_prefix_caching", model.enable_prefix_caching,
             "cross-attention has no prefix cache; upstream turns it off for encoder-decoder "
             "models"),
            ("kv_connector", model.kv_connector is not None,
             "upstream supports no KV connector for encoder-decoder models"),
            ("num_spec_tokens", model.num_spec_tokens > 0,
             "speculative decoding of encoder-decoder models is not modelled")):
        if value:
            raise fail(field, f"must be off with a cross_attention group: {why}")
    if model.multimodal is None:
        raise fail("multimodal", "a cross_attention group needs config.multimodal (the "
                   "encoder's budget and cache size)")
    if model.multimodal.max_tokens_per_item == 0:
        raise fail("multimodal.max_tokens_per_item", "0 disables the encoder an encoder-decoder "
                   "model needs")
    # What upstream's engine sets for these models whatever the user asked (SchedulerConfig):
    # a prompt is scheduled whole, and so is the encoder's input.
    why = "upstream turns it off for encoder-decoder models"
    if model.enable_chunked_prefill:
        raise fail("enable_chunked_prefill", f"must be false with a cross_attention group: {why}")
    if model.long_prefill_token_threshold or model.long_prefill_token_threshold_adaptive:
        raise fail("long_prefill_token_threshold", f"must be 0 with a cross_attention group: "
                   f"{why}")
    if not model.multimodal.disable_chunked_mm_input:
        raise fail("multimodal.disable_chunked_mm_input", "must be true with a cross_attention "
                   "group: upstream sets it for encoder-decoder models")


def check_encoder_items(items: Sequence[MultimodalItem], config: MultimodalConfig | None,
                        fail: Callable[[str, str], WorkloadError]) -> None:
    """An encoder-decoder request's input: one item at offset 0 that the encoder can take."""
    if not items:
        return
    assert config is not None  # check_encoder_decoder_config demands it
    if len(items) > 1:
        raise fail("mm_items", f"{len(items)} items: an encoder-decoder request has one encoder "
                   "input")
    item = items[0]
    if item.offset != 0:
        raise fail("mm_items[0].offset", f"{item.offset}: an encoder input sits at offset 0 "
                   "(its length counts encoder tokens, not prompt tokens)")
    if item.is_embed is not None:
        raise fail("mm_items[0].is_embed", "an encoder input has no placeholder mask")
    check_item_size(item, "mm_items[0]", config, fail)
