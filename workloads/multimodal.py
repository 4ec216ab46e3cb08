"""Multimodal inputs in a workload: placeholder ranges in a prompt and the encoder's limits.

A multimodal request (an image, an audio clip) shows its item to the model as a run of
placeholder tokens in the prompt; the encoder turns the item into embeddings that replace them.
The scheduler has to run the encoder before the decoder reaches the placeholders, under an
encoder compute budget per step, into an encoder cache shared by every request that shows the
same item (the `identifier`, a content hash in vLLM). The identifier also enters the block
hashes of the blocks the placeholders fill, so two requests with equal tokens but different
images never share KV, and two showing the same image at the same place do.

Here only what the scheduler sees is modelled: where each item's placeholders sit (`offset`,
`length`), which of them receive an embedding (`is_embed`; None: all of them, as for most
image processors; break tokens inside an image are False) and the identifier. The checks that
relate items to their prompt and to the engine config live in `check_items`, which the loader
calls with the line to blame.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from workloads.errors import WorkloadError

Modality = Literal["image", "audio", "video"]


@dataclass(frozen=True, slots=True)
class MultimodalItem:
    """One multimodal input: placeholder tokens `offset .. offset + length` of the prompt,
    filled from the encoder's output for `identifier`."""

    identifier: str
    offset: int
    length: int
    is_embed: tuple[bool, ...] | None = None
    modality: Modality = "image"

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def num_embeds(self) -> int:
        """Embeddings the encoder produces for it (what its budget and cache count)."""
        return self.length if self.is_embed is None else sum(self.is_embed)

    def to_dict(self) -> dict[str, Any]:
        return {"identifier": self.identifier, "offset": self.offset, "length": self.length,
                **({"is_embed": list(self.is_embed)} if self.is_embed is not None else {}),
                **({"modality": self.modality} if self.modality != "image" else {})}


@dataclass(frozen=True, slots=True)
class MultimodalConfig:
    """The encoder's limits. `max_num_encoder_input_tokens`: embeddings the encoder may compute
    in one step (vLLM's encoder compute budget); `encoder_cache_size`: embeddings the encoder
    cache holds; `disable_chunked_mm_input`: a step never covers part of an item's
    placeholders (the chunk stops before the item instead). `max_tokens_per_item`: the
    model's largest item, which vLLM reads from the model's multimodal registry; the engine
    raises the budget and the cache to it (`effective_budget`, `effective_cache_size`), and
    refuses to start when chunks may not split items and it exceeds a step's token budget
    (None: the budget and cache are the engine's as given; 0: every modality disabled, no
    encoder at all)."""

    max_num_encoder_input_tokens: int = 2048
    encoder_cache_size: int = 2048
    disable_chunked_mm_input: bool = False
    max_tokens_per_item: int | None = None

    @property
    def modalities_disabled(self) -> bool:
        """`max_tokens_per_item` 0: every modality is disabled (vLLM's `limit_mm_per_prompt`
        of 0 each): the engine starts no encoder and serves text only."""
        return self.max_tokens_per_item == 0

    @property
    def effective_budget(self) -> int:
        """The encoder's per-step budget the engine runs with (raised to the largest item)."""
        if self.modalities_disabled:
            return 0
        return max(self.max_num_encoder_input_tokens, self.max_tokens_per_item or 0)

    @property
    def effective_cache_size(self) -> int:
        """The encoder cache's size the engine runs with (raised to the largest item)."""
        if self.modalities_disabled:
            return 0
        return max(self.encoder_cache_size, self.max_tokens_per_item or 0)

    def to_dict(self) -> dict[str, Any]:
        return {"max_num_encoder_input_tokens": self.max_num_encoder_input_tokens,
                "encoder_cache_size": self.encoder_cache_size,
                "disable_chunked_mm_input": self.disable_chunked_mm_input,
                **({"max_tokens_per_item": self.max_tokens_per_item}
                   if self.max_tokens_per_item is not None else {})}


def check_item_size(item: MultimodalItem, where: str, config: MultimodalConfig,
                    fail: Callable[[str, str], WorkloadError]) -> None:
    """An item no larger than the model's largest and than the encoder's budget and cache
    (past those the encoder could never run it: vLLM's input processor refuses it)."""
    largest = config.max_tokens_per_item
    if largest == 0:
        raise fail(where, "config.multimodal.max_tokens_per_item is 0: every modality is "
                   "disabled, the model takes no multimodal items")
    if largest is not None and item.length > largest:
        raise fail(where, f"{item.length} tokens exceed config.multimodal.max_tokens_per_item "
                   f"{largest} (the model's largest item)")
    limit = min(config.effective_budget, config.effective_cache_size)
    if item.num_embeds > limit:
        raise fail(where, f"{item.num_embeds} embeddings exceed config.multimodal's "
                   f"budget/cache of {limit}: the encoder could never run it")


def check_items(items: Sequence[MultimodalItem], prompt_len: int,
                config: MultimodalConfig | None,
                fail: Callable[[str, str], WorkloadError]) -> None:
    """Raise `fail(field, problem)` for the first item that upstream could not have produced:
    items out of order or overlapping, past the prompt's end, a mask of the wrong length or
    without any embedding, or more embeddings than the encoder's budget or cache can ever take
    (the request would wait forever; vLLM's input processor refuses it)."""
    if not items:
        return
    if config is None:
        raise fail("mm_items", "needs config.multimodal (the encoder's budget and cache size)")
    previous_end = 0
    for index, item in enumerate(items):
        where = f"mm_items[{index}]"
        if item.offset < previous_end:
            raise fail(f"{where}.offset", f"{item.offset} overlaps the item before it (ends at "
                       f"{previous_end}); items must be sorted by offset and not overlap")
        if item.end > prompt_len:
            raise fail(f"{where}.length", f"placeholders {item.offset}..{item.end} run past "
                       f"the prompt's {prompt_len} tokens")
        if item.is_embed is not None:
            if len(item.is_embed) != item.length:
                raise fail(f"{where}.is_embed", f"has {len(item.is_embed)} entries, not "
                           f"length {item.length}")
            if not any(item.is_embed):
                raise fail(f"{where}.is_embed", "marks no placeholder as an embedding")
        check_item_size(item, where, config, fail)
        previous_end = item.end
