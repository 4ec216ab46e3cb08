"""`Request`: one generation request as the scheduler and KV-cache manager see it."""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from impl.connector.types import OffloadLimits, RemoteTransfer
from impl.core.block import BlockHash
from impl.core.multimodal import MultiModalFeature
from impl.core.request_hasher import RequestBlockHasher
from impl.sched.grammar import Grammar
from impl.sched.spec_stats import RequestSpecMetrics


class RequestStatus(enum.IntEnum):
    """Ordered like upstream: every status after PREEMPTED is a finished one."""

    WAITING = enum.auto()
    WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR = enum.auto()  # its grammar still compiling
    WAITING_FOR_REMOTE_KVS = enum.auto()
    WAITING_FOR_STREAMING_REQ = enum.auto()  # a session between its input parts
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()
    # A KV load failed under load_failure_policy 'fail', or the request's grammar did not
    # compile.
    FINISHED_ERROR = enum.auto()
    # Its output ended in a repeated pattern (`impl.sched.repetition`).
    FINISHED_REPETITION = enum.auto()

    @staticmethod
    def is_finished(status: RequestStatus) -> bool:
        return status > RequestStatus.PREEMPTED


FINISH_REASONS: dict[RequestStatus, str] = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH_CAPPED: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_IGNORED: "length",
    RequestStatus.FINISHED_ERROR: "error",
    RequestStatus.FINISHED_REPETITION: "repetition",
}


@dataclass(frozen=True, slots=True)
class StreamingUpdate:
    """A session's next input part: its tokens, the turn's output limit, when it arrived."""

    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    arrival_time: float


class Request:
    __slots__ = (
        "request_id", "prompt_token_ids", "_token_ids", "output_token_ids", "num_prompt_tokens",
        "num_computed_tokens", "block_hashes", "max_tokens", "stop_token_ids",
        "eos_token_id", "ignore_eos", "priority", "arrival_time", "cache_salt", "lora_name",
        "lora_path", "status", "num_preemptions", "spec_token_ids", "num_output_placeholders",
        "skip_reading_prefix_cache", "stop_reason", "num_cached_tokens", "is_prefill_chunk",
        "replay_start",
        "num_inflight_tokens", "job_id", "is_last_step", "shared_prefix_boundary",
        "last_sched_seq", "mm_features", "resumable", "streaming_queue", "grammar", "pooling",
        "report_reused_blocks", "_hasher", "kv_transfer", "spec_metrics", "offload_limits",
        "min_tokens", "repetition_detection",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Iterable[int],
        *,
        max_tokens: int = 16,
        stop_token_ids: Iterable[int] = (),
        eos_token_id: int | None = None,
        ignore_eos: bool = False,
        priority: int = 0,
        arrival_time: float = 0.0,
        cache_salt: str | None = None,
        lora_name: str | None = None,
        lora_path: str | None = None,
        skip_reading_prefix_cache: bool = False,
        block_hasher: RequestBlockHasher | None = None,
        job_id: str | None = None,
        is_last_step: bool = True,
        mm_features: Sequence[MultiModalFeature] = (),
        resumable: bool = False,
        grammar: Grammar | None = None,
        pooling: bool = False,
        report_reused_blocks: bool = False,
        kv_transfer: RemoteTransfer | None = None,
        offload_limits: OffloadLimits | None = None,
        min_tokens: int = 0,
        repetition_detection: tuple[int, int, int] | None = None,
    ) -> None:
        self.request_id = request_id
        # Outputs before any stop but EOS, stop ids and the length caps is checked.
        self.min_tokens = min_tokens
        # (max pattern size, min pattern size, min count) of `impl.sched.repetition`.
        self.repetition_detection = repetition_detection
        # Its own caps on the OffloadingConnector's loads and stores (None: none).
        self.offload_limits = offload_limits
        # Its part in a prefill/decode pair (upstream's kv_transfer_params; None: none).
        self.kv_transfer = kv_transfer
        # Speculative-decoding metrics over its life (per_request_spec_decode_metrics).
        self.spec_metrics: RequestSpecMetrics | None = None
        # KV events in "full" report mode (upstream's `kv_cache_report_mode`, a sampling
        # extra): every prefix-cache lookup that hits announces the reused blocks as stored.
        self.report_reused_blocks = report_reused_blocks
        # A tuple: shared as is with the scheduler output's NewRequestData and never copied
        # again (a tuple given here is kept without a copy).
        self.prompt_token_ids = tuple(prompt_token_ids)
        # Prompt and outputs in one list, built only when read (`all_token_ids`).
        self._token_ids: list[int] | None = None
        self.output_token_ids: list[int] = []
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.num_computed_tokens = 0
        self.max_tokens = max_tokens
        self.stop_token_ids = tuple(stop_token_ids)
        self.eos_token_id = eos_token_id
        self.ignore_eos = ignore_eos
        self.priority = priority
        self.arrival_time = arrival_time
        self.cache_salt = cache_salt
        self.lora_name = lora_name
        self.lora_path = lora_path
        self.status = RequestStatus.WAITING
        self.num_preemptions = 0
        self.spec_token_ids: list[int] = []
        self.num_output_placeholders = 0
        self.skip_reading_prefix_cache = skip_reading_prefix_cache
        self.stop_reason: int | str | None = None  # a stop token, or "repetition_detected"
        self.num_cached_tokens = -1  # prefix-cache hit at first scheduling; -1 before
        # Bounded replay (`impl.sched.replay`): where the recomputed tail of the last prefix hit
        # starts; the request holds no replayed-group KV below it. 0 when nothing replays.
        self.replay_start = 0
        self.is_prefill_chunk = False
        # Tokens scheduled in steps whose output has not been applied (async scheduling): their
        # KV is being written, so blocks they attend to must not be freed yet.
        self.num_inflight_tokens = 0
        # The last step (by the scheduler's count) that scheduled it: with deferred frees its
        # blocks go back to the pool only after that step has been processed.
        self.last_sched_seq = 0
        # Agent jobs (the continuum policy): the turns of one job share `job_id`; a turn a tool
        # call follows has `is_last_step` False and may keep its KV blocks pinned.
        self.job_id = job_id
        self.is_last_step = is_last_step
        # Set by each prefix-cache lookup: where groups' hits disagree (a shared prefix one
        # sparse group has no state for yet; 0: none). Mamba 'align' ends a chunk there.
        self.shared_prefix_boundary = 0
        # Multimodal inputs, sorted by offset: placeholders the encoder fills (their
        # identifiers also key the block hashes, so they are set before hashing).
        self.mm_features: tuple[MultiModalFeature, ...] = tuple(mm_features)
        # A streaming-input session (`impl.sched.streaming`): a stop ends its turn, not the
        # request; parts that arrive during a turn wait here (None: the client closed it).
        self.resumable = resumable
        self.streaming_queue: deque[StreamingUpdate | None] | None = None
        # Structured output (`impl.sched.grammar`): the request waits for its grammar first.
        self.grammar = grammar
        # A pooling model's request: prefill only, finished by its pooled output (one "token"
        # of budget, never sampled).
        self.pooling = pooling
        if pooling:
            self.max_tokens = 1
        if grammar is not None:
            self.status = RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR
        self.block_hashes: list[BlockHash] = []
        self._hasher = block_hasher
        if block_hasher is not None:
            self.block_hashes.extend(block_hasher(self))

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt and outputs as one list, built at its first use and kept in step after that.

        Nothing on the scheduling path reads it (KV events do, when enabled): a request holds
        its prompt tuple and its outputs, the block hasher reads those (`tokens_from`) and a
        resumed request's output copies them (`copy_token_ids`). The conversation trace's 12k
        prompts hold 142M tokens: copying each into a list when it was first scheduled, then
        freeing the list when it finished, was ~19% of replaying the trace (compiled, 9.0 s ->
        7.3 s without), and queuing them as lists up front cost more than hashing them (the
        kernel clearing 1.1 GB of fresh pages)."""
        tokens = self._token_ids
        if tokens is None:
            tokens = list(self.prompt_token_ids)
            tokens.extend(self.output_token_ids)
            self._token_ids = tokens
        return tokens

    def copy_token_ids(self) -> list[int]:
        """A new list of prompt and outputs (what a resumed request's output carries), without
        keeping one on the request."""
        tokens = self._token_ids
        if tokens is not None:
            return list(tokens)
        copied = list(self.prompt_token_ids)
        copied.extend(self.output_token_ids)
        return copied

    def tokens_from(self, start: int) -> list[int] | tuple[int, ...]:
        """Tokens `start:` (prompt, then outputs) without building `all_token_ids`: the prompt
        tuple itself while there are no outputs and `start` is 0 (hashing a new prompt), else a
        copy of just that tail (one new block as a decode fills it)."""
        tokens = self._token_ids
        if tokens is not None:
            return tokens[start:] if start else tokens
        outputs = self.output_token_ids
        prompt = self.prompt_token_ids
        num_prompt = self.num_prompt_tokens
        if not outputs:
            return prompt[start:] if start else prompt
        if start >= num_prompt:
            return outputs[start - num_prompt:]
        tail = list(prompt[start:])
        tail.extend(outputs)
        return tail

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + len(self.output_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        return self.num_prompt_tokens + len(self.output_token_ids) + len(self.spec_token_ids)

    @property
    def use_structured_output(self) -> bool:
        return self.grammar is not None

    @property
    def has_encoder_inputs(self) -> bool:
        return bool(self.mm_features)

    def get_num_encoder_embeds(self, input_id: int) -> int:
        return self.mm_features[input_id].num_embeds

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    def is_finished(self) -> bool:
        return self.status > RequestStatus.PREEMPTED

    def get_finished_reason(self) -> str | None:
        return FINISH_REASONS.get(self.status)

    def append_output_token(self, token_id: int) -> None:
        """One sampled token: the hot path of every decode step."""
        outputs = self.output_token_ids
        outputs.append(token_id)
        tokens = self._token_ids
        if tokens is not None:
            tokens.append(token_id)
        hasher = self._hasher
        if hasher is not None and self.num_prompt_tokens + len(outputs) >= (
                len(self.block_hashes) + 1) * hasher.hash_block_size:
            self.block_hashes.extend(hasher(self))

    def append_output_token_ids(self, token_ids: int | Iterable[int]) -> None:
        new = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        self.output_token_ids.extend(new)
        tokens = self._token_ids
        if tokens is not None:
            tokens.extend(new)
        if self._hasher is not None:
            self.block_hashes.extend(self._hasher(self))

    def leave_prompt_tail(self, num_tokens: int) -> None:
        """A P/D prefill beside a mamba group: the prompt's last `num_tokens` are left to the
        decode side (which computes the state past them itself), and the request samples one
        token. Its block hashes stay as they were (a block holding a dropped token is never
        computed here)."""
        self.prompt_token_ids = self.prompt_token_ids[:-num_tokens]
        self.num_prompt_tokens -= num_tokens
        if self._token_ids is not None:
            del self._token_ids[self.num_prompt_tokens:self.num_prompt_tokens + num_tokens]
        self.max_tokens = 1

    def continue_session(self, keep_end: int, new_tokens: Sequence[int],
                         max_tokens: int) -> None:
        """The next input part of a streaming session: the outputs up to `keep_end` become
        prompt (a stop's last sampled token, never computed, is dropped), then the part's
        tokens follow; hashes of blocks past what is kept are recomputed."""
        tokens = self.all_token_ids
        kept = tokens[self.num_prompt_tokens:keep_end]
        del tokens[keep_end:]
        if self._hasher is not None:
            del self.block_hashes[keep_end // self._hasher.hash_block_size:]
        self.output_token_ids.clear()
        self.prompt_token_ids = self.prompt_token_ids + tuple(kept) + tuple(new_tokens)
        tokens.extend(new_tokens)
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.max_tokens = max_tokens
        if self._hasher is not None:
            self.block_hashes.extend(self._hasher(self))

    def __repr__(self) -> str:
        return (f"Request({self.request_id!r}, tokens={self.num_tokens}, "
                f"computed={self.num_computed_tokens}, status={self.status.name})")
