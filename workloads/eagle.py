"""EAGLE drafting (`spec_method: "eagle"`, or its family's "mtp"): what a workload may ask for.

An EAGLE head drafts from the target model's hidden states and writes the KV of the token after
each chunk into the chunk's last block, so prefix-cache hits give up their last block; its
lookahead slots are one per draft token, and it reads one prompt token past each chunk (which
moves encoder scheduling for multimodal inputs). Modelled beside full attention, sliding
windows, reference windows and mamba (whose prompt chunks stop a block lower, where the state
a hit needs ends), with or without a KV connector (whose hits give up their last block too).
A model's own MTP modules (`"mtp"`) draft the same way; a chain of them (`mtp_modules` > 1)
reads `num_spec_tokens` prompt tokens past each chunk instead of one."""

from __future__ import annotations

from collections.abc import Callable

from workloads.errors import WorkloadError
from workloads.schema import EngineConfigModel


def eagle_lookahead(model: EngineConfigModel, fail: Callable[[str, str], WorkloadError]) -> int:
    """The config's lookahead slots: `num_lookahead_tokens`, or under EAGLE `num_spec_tokens`
    (which an explicit `num_lookahead_tokens` must equal); refuses what EAGLE is not modelled
    with, naming the field."""
    method = model.spec_method
    if model.mtp_modules != 1 and method != "mtp":
        raise fail("mtp_modules", f"counts the drafter's MTP modules: only with spec_method "
                   f"'mtp' (got {method!r})")
    if method not in ("eagle", "mtp"):
        return model.num_lookahead_tokens
    k = model.num_spec_tokens
    if k == 0:
        raise fail("spec_method", f"{method!r} needs num_spec_tokens > 0 (the drafts it "
                   "proposes)")
    if model.num_lookahead_tokens not in (0, k):
        raise fail("num_lookahead_tokens", f"must be {k} (num_spec_tokens) or left out under "
                   f"spec_method {method!r}: the head writes one slot ahead per draft token")
    for index, group in enumerate(model.kv_cache_groups):
        if group.type == "chunked_local":
            raise fail(f"kv_cache_groups[{index}]", "a 'chunked_local' group with spec_method "
                       f"{method!r} is not modelled (upstream refuses it at the first lookup)")
    return k
