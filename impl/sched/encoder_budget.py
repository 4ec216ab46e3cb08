"""The encoder's budget per step and its cache size, as an engine sizes them at start-up.

A multimodal model reports its largest item (its multimodal registry: an image at the highest
resolution, the longest audio). The engine raises the configured encoder budget and cache size
to that item, so the largest item can always be encoded and kept; and when chunks may not split
an item (`disable_chunked_mm_input`) it refuses to start if that item is longer than a step's
token budget, because such an item could never be scheduled. A model whose every modality
is disabled (no largest item: 0 here) gets no encoder at all, budget and cache 0.
"""

from __future__ import annotations

from impl.sched.config import SchedulerConfig


def compute_mm_encoder_budget(config: SchedulerConfig) -> tuple[int, int]:
    """(encoder budget per step, encoder cache size) the scheduler runs with; raises
    `ValueError` naming the setting when the largest item cannot be scheduled."""
    largest = config.mm_max_tokens_per_item
    if largest is None:
        return config.max_num_encoder_input_tokens, config.encoder_cache_size
    if largest == 0:  # every modality disabled: no encoder at all
        return 0, 0
    if config.disable_chunked_mm_input and largest > config.max_num_batched_tokens:
        raise ValueError(f"max_num_batched_tokens: {config.max_num_batched_tokens} is below the "
                         f"model's largest multimodal item ({largest} tokens) while "
                         "disable_chunked_mm_input is set: raise max_num_batched_tokens")
    return (max(config.max_num_encoder_input_tokens, largest),
            max(config.encoder_cache_size, largest))
