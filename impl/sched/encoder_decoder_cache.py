"""`EncoderDecoderCacheManager`: the encoder's room in an encoder-decoder model (Whisper).

An encoder-decoder model runs the encoder once per request, on its first step, and keeps the
output only as the cross-attention KV (`impl.core.cross_attention`); nothing is shared between
requests, so there is no cache to look items up in. What remains is room: the encoder's
outputs of a step must fit `cache_size` embeddings, counted in `num_free_slots`.

The accounting is upstream's, kept exactly because admission reads it: room is taken when an
input is encoded and given back every time the input is *freed*, and an encoder-decoder
request frees its input after every step once it has computed a token, again when it is
preempted or finished, and when an admission fails after its input was chosen. So
`num_free_slots` only grows past the first decode step (it can exceed `cache_size`); the
encoder's compute budget per step is then what bounds admission. Pinned as an upstream quirk
in `conformance/upstream_bugs/` so the day upstream changes it shows.

The worker frees an encoded input's tensors one step late: an identifier encoded in a step is
reported at the next step's output (`allocated`, then `to_free`), once.
"""

from __future__ import annotations

from collections.abc import Mapping

from impl.core.specs import CrossAttentionSpec, KVCacheConfig
from impl.sched.config import SchedulerConfig
from impl.sched.encoder_cache import EncoderCacheManager
from impl.sched.request import Request
from vtwin.errors import IntegrityError


def is_encoder_decoder(kv_cache_config: KVCacheConfig) -> bool:
    """A model with cross-attention layers is an encoder-decoder model."""
    return any(isinstance(group.kv_cache_spec, CrossAttentionSpec)
               for group in kv_cache_config.kv_cache_groups)


def check_encoder_decoder(config: SchedulerConfig, kv_cache_config: KVCacheConfig) -> None:
    """An encoder-decoder model as far as upstream and the twin run it, refused otherwise with
    one line: prefix caching, chunked prefill and the long-prefill threshold off (upstream's
    engine turns them off for these models; cross-attention has no prefix cache), no KV
    connector (upstream refuses one), no speculative decoding (not modelled), an encoder
    budget and cache to run the encoder with."""
    if not is_encoder_decoder(kv_cache_config):
        return
    for field_name, value, why in (
            ("enable_prefix_caching", config.enable_prefix_caching,
             "cross-attention has no prefix cache; upstream turns it off for these models"),
            ("kv_connector", config.kv_connector is not None,
             "upstream supports no KV connector for encoder-decoder models"),
            ("num_spec_tokens", config.num_spec_tokens > 0,
             "speculative decoding of encoder-decoder models is not modelled"),
            ("enable_chunked_prefill", config.enable_chunked_prefill,
             "upstream turns chunked prefill off for these models"),
            ("long_prefill_token_threshold", config.long_prefill_token_threshold > 0,
             "upstream turns it off for these models")):
        if value:
            raise ValueError(f"{field_name}: must be off for an encoder-decoder model "
                             f"(a cross-attention group): {why}")
    if config.encoder_cache_size <= 0 or config.max_num_encoder_input_tokens <= 0:
        raise ValueError("encoder_cache_size: an encoder-decoder model needs an encoder budget "
                         "and cache (max_num_encoder_input_tokens, encoder_cache_size > 0)")


class EncoderDecoderCacheManager(EncoderCacheManager):
    def __init__(self, cache_size: int) -> None:
        super().__init__(cache_size)
        # identifiers encoded since the last report, and those to report at the next one
        self.allocated: list[str] = []
        self.to_free: list[str] = []

    def reset(self) -> None:
        super().reset()
        self.allocated.clear()
        self.to_free.clear()

    def cached_num_embeds(self, identifier: str) -> int | None:
        """Nothing is kept for lookups."""
        return None

    def check_and_update_cache(self, request: Request, input_id: int) -> bool:
        return False

    def can_allocate(self, request: Request, input_id: int, compute_budget: int,
                     num_embeds_scheduled: int) -> bool:
        """Whether the input fits the step's encoder budget and, with the embeddings already
        chosen this step, the free room (nothing to evict)."""
        needed = request.get_num_encoder_embeds(input_id)
        if needed > compute_budget:
            return False
        return needed + num_embeds_scheduled <= self.num_free_slots

    def allocate(self, request: Request, input_id: int) -> None:
        self.num_free_slots -= request.get_num_encoder_embeds(input_id)
        self.allocated.append(request.mm_features[input_id].identifier)

    def cached_input_ids(self, request: Request) -> set[int]:
        """Every input of the request, whether it was encoded or not."""
        return set(range(len(request.mm_features)))

    def free_encoder_input(self, request: Request, input_id: int) -> None:
        """Give the input's room back (each call does, see the module's docstring)."""
        self.num_free_slots += request.get_num_encoder_embeds(input_id)

    def free(self, request: Request) -> None:
        for input_id in range(len(request.mm_features)):
            self.free_encoder_input(request, input_id)

    def get_freed_mm_hashes(self) -> list[str]:
        """Inputs encoded at the step before last, for the worker to drop."""
        freed = self.to_free
        self.to_free = self.allocated
        self.allocated = []
        return freed

    def check_integrity(self, requests: Mapping[str, Request]) -> None:
        """Room is never negative, and no identifier is reported before it was encoded."""
        if self.num_free_slots < 0:
            raise IntegrityError(f"encoder cache: {self.num_free_slots} free slots")
        if self.cached or self.freeable or self.request_inputs:
            raise IntegrityError("encoder cache: an encoder-decoder cache keeps entries")
