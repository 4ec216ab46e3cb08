"""`Activity`: how much of the interesting machinery one run exercised.

A generated workload that never preempts, evicts or pads tells us little; Hypothesis is steered
toward the ones that do (`hypothesis.target` on these counts), and reports can say what a
passing run actually covered."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.sched.record import StepRecord

PLACEHOLDER_DRAFT = -1
"""The draft id upstream (and the twin) schedule for padding and async placeholder drafts."""


@dataclass(frozen=True, slots=True)
class Activity:
    preemptions: int
    evictions: int
    padded_requests: int
    prefix_hit_tokens: int
    resumed: int
    aborted: int
    # A KV connector's work: load and store events issued, tokens taken from the CPU tier.
    loads: int = 0
    stores: int = 0
    external_hit_tokens: int = 0
    # A multimodal model's encoder: items encoded, encoder-cache entries evicted.
    encoded_items: int = 0
    encoder_evictions: int = 0
    # Structured output: grammar bitmask rows (masked decodes), requests ended by an error.
    masked_rows: int = 0
    errors: int = 0
    # Sub-block hits: copy-on-write pairs the steps carried.
    block_copies: int = 0
    # The OffloadingConnector's loads finished within their step (0.33's sync-load budget).
    sync_loads: int = 0
    # Requests finished because their output repeated (`repetition_detection`).
    repetitions: int = 0

    @staticmethod
    def of(records: list[StepRecord]) -> Activity:
        preemptions = evictions = padded = hits = resumed = aborted = 0
        loads = stores = external = encoded = encoder_evictions = masked = errors = 0
        copies = sync = repetitions = 0
        for record in records:
            copies += len(record.block_copies)
            masked += len(record.grammar_rows)
            errors += sum(1 for o in record.outputs if o.finish_reason == "error")
            repetitions += sum(1 for o in record.outputs if o.finish_reason == "repetition")
            encoded += sum(len(inputs) for _, inputs in record.encoder_inputs)
            encoder_evictions += len(record.freed_encoder_ids)
            transfers = record.transfers
            if transfers is not None:
                loads += transfers.num_loads
                stores += transfers.num_stores
                sync += transfers.num_sync_loads
            external += sum(tokens for _, tokens in record.external_hits)
            preemptions += len(record.preempted)
            resumed += len(record.scheduled_resumed)
            aborted += len(record.aborted)
            evictions += sum(1 for event in record.events if event.kind == "removed")
            padded += sum(1 for _, drafts in record.spec_tokens
                          if drafts and all(d == PLACEHOLDER_DRAFT for d in drafts))
            if record.prefix_cache is not None:
                hits += record.prefix_cache.hits
        return Activity(preemptions, evictions, padded, hits, resumed, aborted, loads, stores,
                        external, encoded, encoder_evictions, masked, errors, copies, sync,
                        repetitions)

    def to_json(self) -> dict[str, int]:
        return {"preemptions": self.preemptions, "evictions": self.evictions,
                "padded_requests": self.padded_requests,
                "prefix_hit_tokens": self.prefix_hit_tokens, "resumed": self.resumed,
                "aborted": self.aborted,
                **({"loads": self.loads, "stores": self.stores,
                    "external_hit_tokens": self.external_hit_tokens}
                   if self.loads or self.stores else {}),
                **({"encoded_items": self.encoded_items,
                    "encoder_evictions": self.encoder_evictions}
                   if self.encoded_items else {}),
                **({"masked_rows": self.masked_rows} if self.masked_rows else {}),
                **({"errors": self.errors} if self.errors else {}),
                **({"block_copies": self.block_copies} if self.block_copies else {}),
                **({"sync_loads": self.sync_loads} if self.sync_loads else {}),
                **({"repetitions": self.repetitions} if self.repetitions else {})}
