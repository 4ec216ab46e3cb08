"""Scheduling a request's multimodal items: the encoder must run before the decoder's chunk
reaches their placeholders.

For each request the scheduler gives a chunk, the items whose placeholders the chunk overlaps
need their embeddings. An item already in the encoder cache (this request's earlier step, or
another request showing the same identifier) costs nothing; any other is encoded this step if
the step's encoder budget and the cache have room for all its embeddings (an item is encoded
whole: the encoder's attention is bidirectional). When one does not fit, the chunk is cut to
end just before that item's placeholders, so the decoder never reads an embedding that is not
there; a chunk starting inside such an item (a prefix hit reached into it) gets no tokens.

With `disable_chunked_mm_input` a chunk may not end inside an item either: it stops before the
item instead. Two requests may not present one identifier with different embedding counts (a
reused client id); such a request is finished with an error at the next output.

An EAGLE drafter reads one token past the chunk (`SchedulerConfig.num_prefill_lookahead`):
items are chosen for the chunk plus that token, and a chunk stopped before an item stops that
token earlier too. 0.32 also keeps that margin when a chunk is cut for budget or room and when
references are dropped; 0.33 does neither (`Behaviour.encoder_budget_cut_without_lookahead`).

An encoder-decoder model (Whisper, `encoder_decoder_cache`) encodes its request's input on the
first step, whatever the chunk covers, and never again once the request has computed a token;
the step's encoder outputs size the request's cross-attention blocks (`encoder_tokens`). Its
input counts encoder tokens, not prompt tokens, so `disable_chunked_mm_input` (which upstream
sets for these models) never cuts its chunk.

Decisions are taken before the KV allocation, and their side effects on the cache (references
taken, entries evicted) stay even when the allocation then fails, as upstream's do; budget and
room are only consumed once the request is actually scheduled (`commit_encoder_inputs`).

"""

from __future__ import annotations

from mypy_extensions import trait

from impl.core.multimodal import features_in_window
from impl.sched.request import Request
from impl.sched.state import SchedulerState
from impl.sched.step_plan import EncoderChoice, StepPlan


@trait
class EncoderInputs(SchedulerState):
    def _try_schedule_encoder_inputs(self, request: Request, num_computed: int, num_new: int,
                                     budget: int) -> EncoderChoice:
        """Which of the request's items to encode for a chunk of `num_new` tokens from
        `num_computed`, and how far the chunk may go (see the module's docstring)."""
        if num_new == 0 or not request.mm_features:
            return [], num_new, budget, []
        if self.is_encoder_decoder and num_computed > 0:
            return [], num_new, budget, []  # the encoder ran on the request's first step
        features = request.mm_features
        cache = self.encoder_cache
        to_encode: list[int] = []
        shared: list[int] = []
        chosen: dict[str, int] = {}  # identifier -> embeddings, encoded this step
        num_chosen = 0
        shift = self.scheduler_config.num_prefill_lookahead
        window_end = num_computed + num_new + shift
        lo, hi = features_in_window(features, num_computed, window_end)
        for index in range(lo, hi):
            feature = features[index]
            start = feature.offset
            if (self.scheduler_config.disable_chunked_mm_input and not self.is_encoder_decoder
                    and self._before_item(num_computed, start)
                    and num_computed + num_new < feature.end):
                num_new = max(0, start - (num_computed + shift))  # stop before the item
                break
            identifier = feature.identifier
            embeds = feature.num_embeds
            if identifier in chosen:
                if self._reject_mismatch(request, chosen[identifier], embeds):
                    return [], 0, budget, []
                shared.append(index)
                continue
            stored = cache.cached_num_embeds(identifier)
            if stored is not None and self._reject_mismatch(request, stored, embeds):
                return [], 0, budget, []
            if cache.check_and_update_cache(request, index):
                continue  # encoded before, still cached
            if not cache.can_allocate(request, index, budget, num_chosen):
                # No budget or room: compute up to the item, or nothing when the chunk
                # starts inside it.
                num_new = self._cut_before_item(num_computed, num_new, start, shift)
                break
            first, last = feature.embeds_in_range(max(0, num_computed - start),
                                                  min(feature.length, window_end - start))
            if first == last:
                continue  # the chunk covers only placeholders without embeddings
            num_chosen += embeds
            budget -= embeds
            chosen[identifier] = embeds
            to_encode.append(index)
        return to_encode, num_new, budget, shared

    def _cut_before_item(self, num_computed: int, num_new: int, start: int, shift: int) -> int:
        """A chunk cut for an item the encoder cannot take: it ends before the item (0.32:
        with the drafter's look-ahead too; 0.33: never longer than it was), or is empty when
        it starts inside the item."""
        if self.behaviour.encoder_budget_cut_without_lookahead:
            return min(num_new, start - num_computed) if num_computed < start else 0
        return start - (num_computed + shift) if num_computed + shift < start else 0

    def _before_item(self, num_computed: int, start: int) -> bool:
        """Whether a chunk from `num_computed` counts as reaching an item at `start` from
        before it (0.33 counts a chunk starting exactly at the item too)."""
        if self.behaviour.unchunked_item_start_counts_as_before:
            return num_computed <= start
        return num_computed < start

    def _reject_mismatch(self, request: Request, held: int, wanted: int) -> bool:
        if held == wanted:
            return False
        self.encoder_cache_mismatch_reqs.add(request.request_id)
        return True

    def choose_encoder_inputs(self, plan: StepPlan, request: Request, num_computed: int,
                              num_new: int) -> int:
        """How many of `num_new` tokens the request's chunk keeps once its items are chosen
        (`_try_schedule_encoder_inputs`); the choice waits on the plan until the request is
        actually scheduled (`commit_encoder_inputs`), after its KV allocation."""
        choice = self._try_schedule_encoder_inputs(request, num_computed, num_new,
                                                   plan.encoder_budget)
        plan.pending_encoder = choice
        return choice[1]

    def commit_encoder_inputs(self, plan: StepPlan, request: Request) -> None:
        """The request was scheduled: its chosen items are encoded this step, take their room
        in the cache and spend the step's budget; items it shares with one chosen earlier in
        the same chunk take a reference."""
        to_encode, _, budget, shared = plan.pending_encoder
        if not to_encode:
            return
        plan.encoder_inputs[request.request_id] = to_encode
        plan.encoder_budget = budget
        cache = self.encoder_cache
        for index in to_encode:
            cache.allocate(request, index)
        for index in shared:
            cache.check_and_update_cache(request, index)

    def encoder_tokens(self, plan: StepPlan, request: Request) -> int:
        """Encoder outputs `request` (being placed) writes this step: what an encoder-decoder
        model's cross-attention groups need slots for (0 for any other model)."""
        features = request.mm_features
        if not self.is_encoder_decoder or not features:
            return 0  # (the plan's pending choice belongs to the last request with items)
        return sum(features[i].num_embeds for i in plan.pending_encoder[0])

    def _encoder_input_stats(self, encoder_inputs: dict[str, list[int]]) -> tuple[int, int]:
        """(encoder inputs, their embeddings) a step schedules, for the per-iteration log."""
        requests = self.requests
        features = [requests[rid].mm_features[i] for rid, ids in encoder_inputs.items()
                    for i in ids]
        return len(features), sum(f.num_embeds for f in features)

    def _free_encoder_inputs(self, request: Request) -> None:
        """After a step ran: drop references to items whose placeholders the decoder has
        passed (their embeddings now live in the KV cache)."""
        cache = self.encoder_cache
        held = cache.cached_input_ids(request)
        if not held:
            return
        if self.is_encoder_decoder:
            if request.num_computed_tokens > 0:  # the cross-attention KV holds the output
                for index in list(held):
                    cache.free_encoder_input(request, index)
            return
        done = request.num_computed_tokens - request.num_output_placeholders
        if not self.behaviour.encoder_budget_cut_without_lookahead:
            done -= self.scheduler_config.num_prefill_lookahead  # 0.32: the drafter's too
        features = request.mm_features
        for index in list(held):
            if features[index].end <= done:
                cache.free_encoder_input(request, index)
