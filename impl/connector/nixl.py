"""`NixlConnectorScheduler`: the scheduler side of a prefill/decode (P/D) connector, pull mode
(push mode: `impl.connector.nixl_push`).

One engine instance of a P/D pair (a `kv_both` instance may play either part per request):

* **Decode side** (`RemoteTransfer.do_remote_prefill`). The prompt was computed by the prefill
  peer. At admission the connector claims every prompt token past the local prefix hit as an
  asynchronous external load; the request gets blocks for them and waits
  (WAITING_FOR_REMOTE_KVS). The next step's metadata orders the pull into the blocks that hold
  no cached KV (`PullOrder`); a pull is ordered once per request (the flag is cleared), so a
  preempted request recomputes instead of pulling again. A request that finishes before its
  pull was ordered still gets an empty order: the worker uses it to tell the peer to free its
  blocks.
* **Prefill side** (`RemoteTransfer.do_remote_decode`). The request computes here; when it
  finishes normally (stop or length) with blocks, its blocks outlive it until the worker
  reports that the decode peer read them (`finished_sending`), and its output carries what the
  decode side needs (`FinishedTransfer`: the blocks to read, the tokens they hold). A request
  that ends otherwise (abort, error) frees its blocks at once and is listed as not processed.

Hybrid models: every block list exchanged with the peer (the blocks a pull fills, the blocks
a finished prefill hands on, push mode's registrations and writes) keeps, of a sliding-window
group, only the window's tail (`ExchangeClip`): the KV cache allocates a window's group for
the whole sequence and frees what falls out of the window only later. Chunked-local and
reference-window groups exchange every block; mamba groups are not modelled.

The connector keeps no per-step state past `build_connector_meta` except what the integrity
check needs to know: the pulls in flight and the finished requests whose blocks wait for their
read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.connector.nixl_metadata import NixlMetadata, PullOrder
from impl.connector.types import FinishedTransfer, KVConnectorOutput
from impl.core.prefix_stats import CacheHitSource, single_source
from impl.core.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    MambaSpec,
    SlidingWindowSpec,
)
from vtwin.errors import IntegrityError

if TYPE_CHECKING:
    from impl.core.events import KVCacheEvent
    from impl.core.kv_cache_manager import KVCacheBlocks
    from impl.sched.output import SchedulerOutput
    from impl.sched.request import Request

NORMAL_FINISHES = frozenset({"FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED"})
"""The finishes (status names) after which a prefill's KV is worth reading: any other
(abort, error, ignored) frees at once."""


class ExchangeClip:
    """Which blocks of each group a P/D exchange carries: a sliding window's last
    cdiv(window, block) + 1 blocks (the window rarely starts on a block boundary), every block
    of the others. Only when some group is not full attention; otherwise lists pass whole."""

    def __init__(self, kv_cache_config: KVCacheConfig) -> None:
        specs = [g.kv_cache_spec for g in kv_cache_config.kv_cache_groups]
        for index, spec in enumerate(specs):
            supported = (isinstance(spec, FullAttentionSpec | ChunkedLocalAttentionSpec
                                    | MambaSpec)
                         or (isinstance(spec, SlidingWindowSpec) and not spec.bounded_replay))
            if not supported:
                raise ValueError(f"kv_connector: the 'nixl' connector with a {spec.type_id} "
                                 f"group (group {index}) is not modelled")
        self.hybrid = any(not isinstance(spec, FullAttentionSpec) for spec in specs)
        self.window_blocks = [-(-spec.sliding_window // spec.block_size) + 1
                              if isinstance(spec, SlidingWindowSpec) else 0 for spec in specs]
        # A mamba group's trailing draft-state blocks (None: not a mamba group).
        self.speculative_blocks = [spec.num_speculative_blocks if isinstance(spec, MambaSpec)
                                   else None for spec in specs]

    def clip(self, block_ids: tuple[list[int], ...]) -> tuple[list[int], ...]:
        if not self.hybrid or not block_ids:
            return block_ids
        return tuple(self._clip_group(ids, keep, drafts) for ids, keep, drafts in zip(
            block_ids, self.window_blocks, self.speculative_blocks, strict=True))

    @staticmethod
    def _clip_group(ids: list[int], keep: int, drafts: int | None) -> list[int]:
        """A window's tail; of a mamba group, the running state's block alone (the draft
        states after it and everything before it left out)."""
        if keep:
            return ids[-keep:]
        if drafts is None or not ids:
            return ids
        return ids[:len(ids) - min(drafts, len(ids) - 1)][-1:]


def unhashed_blocks(blocks: KVCacheBlocks) -> tuple[list[int], ...]:
    """Per group, the blocks holding no cached KV (a window's null padding left out)."""
    return tuple([b.block_id for b in group if b.block_hash is None and not b.is_null]
                 for group in blocks.blocks)


class NixlConnectorScheduler:
    completes_lagging_groups = True  # (`SchedulerConnector`)
    def __init__(self, kv_cache_config: KVCacheConfig, *, bidirectional: bool = False,
                 recompute_threshold: int = 64, num_reprefillable_tokens: int = 0) -> None:
        self.exchange = ExchangeClip(kv_cache_config)
        # Beside a mamba group the prefill side leaves the prompt's last token to the decode
        # side, which computes the state past it itself (`on_new_request`); a chain of MTP
        # modules leaves the tokens it may prefill again (all but one of its look-ahead), or
        # the prefill side's MTP KV would hold drafts the decode side never rebuilds.
        mamba = any(isinstance(g.kv_cache_spec, MambaSpec)
                    for g in kv_cache_config.kv_cache_groups)
        self.prompt_backoff = max(1 if mamba else 0, num_reprefillable_tokens)
        self.group_block_sizes = [g.kv_cache_spec.block_size
                                  for g in kv_cache_config.kv_cache_groups]
        self.bidirectional = bidirectional
        self.recompute_threshold = recompute_threshold
        self._meta = NixlMetadata()
        self._pulling: dict[str, Request] = {}  # pulls ordered and not yet reported
        self._stranded: dict[str, Request] = {}  # waiting for a pull never ordered
        self._awaiting_read: set[str] = set()  # finished prefills whose blocks wait for a read

    # -- admission --------------------------------------------------------------------------
    def on_new_request(self, request: Request) -> None:
        """A prefill beside a mamba group leaves its prompt's last token to the decode side
        and samples one token, once (not again when preempted), unless it reads no prefix
        cache (its decode side then computes the whole prompt). The peer's liveness
        (heartbeats) is not modelled."""
        transfer = request.kv_transfer
        backoff = self.prompt_backoff
        if (backoff and transfer is not None and transfer.do_remote_decode
                and not transfer.prompt_tail_left and request.num_prompt_tokens > backoff
                and not request.skip_reading_prefix_cache):
            request.leave_prompt_tail(backoff)
            transfer.prompt_tail_left = True

    def remote_prefill_tokens(self, request: Request) -> int:
        """The prompt tokens a decode side loads from its peer: beside a mamba group, all
        but the last one (its peer left that token out)."""
        num = request.num_prompt_tokens
        return num - self.prompt_backoff if num > self.prompt_backoff else num

    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        """A decode-side request still to pull claims its prompt past the local hit, loaded
        asynchronously. A prefill that reads back a decode side's tokens claims those past the
        local hit, unless fewer than the recompute threshold are missing (it then computes
        them); it claims them on every admission, as upstream does, though it pulls once.
        Every other request claims nothing."""
        transfer = request.kv_transfer
        if transfer is None:
            return 0, False
        if transfer.do_remote_prefill:
            count = self.remote_prefill_tokens(request) - num_computed_tokens
            if count > 0:
                return count, True
        if transfer.do_remote_decode and transfer.readback_tokens is not None:
            count = min(transfer.readback_tokens, request.num_prompt_tokens) - \
                num_computed_tokens
            if count > 0:
                if self.recompute_threshold > 0 and count < self.recompute_threshold:
                    return 0, False
                return count, True
        return 0, False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
        transfer = request.kv_transfer
        if transfer is None:
            return
        if transfer.do_remote_decode or (transfer.do_remote_prefill and self.bidirectional):
            self._meta.reqs_in_batch.add(request.request_id)
        wants_readback = (transfer.do_remote_decode and self.bidirectional
                          and transfer.readback_tokens is not None)
        readback = wants_readback and not transfer.readback_ordered
        if wants_readback and transfer.readback_ordered and num_external_tokens > 0:
            # Claimed again after its one pull (a failed one, recomputed): it waits for a
            # report that never comes, as upstream's does (`conformance/upstream_bugs/
            # pd-readback-claimed-again.jsonl`); aborted, it keeps its blocks for good.
            self._stranded[request.request_id] = request
        if not (transfer.do_remote_prefill or readback):
            return
        transfer.readback_ordered = readback or transfer.readback_ordered
        local = self.exchange.clip(unhashed_blocks(blocks)) if num_external_tokens > 0 else ()
        cached = tuple(sum(1 for b in group if b.block_hash is not None and not b.is_null)
                       for group in blocks.blocks)
        self._order_pull(request, PullOrder(local, cached, num_external_tokens > 0))

    def _order_pull(self, request: Request, order: PullOrder, *,
                    waits: bool | None = None) -> None:
        """Order the worker's transfer for a decode-side request, once per request. `waits`:
        whether the request waits for it (default: the order's `awaiting`; push mode's order
        says False while its request waits for the peer's write)."""
        assert request.kv_transfer is not None
        self._meta.reqs_to_recv[request.request_id] = order
        if order.awaiting if waits is None else waits:
            self._pulling[request.request_id] = request
        request.kv_transfer.do_remote_prefill = False  # one transfer per request

    # -- each step --------------------------------------------------------------------------
    def build_connector_meta(self, output: SchedulerOutput) -> NixlMetadata:
        meta, self._meta = self._meta, NixlMetadata()
        return meta

    def update_connector_output(self, output: KVConnectorOutput) -> None:
        """Forget the pulls and reads the worker reported done."""
        for rid in output.finished_recving:
            self._pulling.pop(rid, None)
        self._awaiting_read -= output.finished_sending

    # -- finishing --------------------------------------------------------------------------
    def request_finished(self, request: Request, block_ids: tuple[list[int], ...]
                         ) -> tuple[bool, FinishedTransfer | None]:
        """Whether the blocks must outlive the request, and what its output hands the peer."""
        transfer = request.kv_transfer
        if transfer is None:
            return False, None
        if transfer.do_remote_prefill:  # finished before its pull was ordered
            self._order_pull(request, PullOrder((), (), False))
            return False, None
        decode_side = not transfer.do_remote_decode
        if decode_side and not self.bidirectional:
            return False, None  # a decode-side request hands nothing on
        if request.status.name not in NORMAL_FINISHES:
            self._meta.reqs_not_processed.add(request.request_id)
            return False, None
        delay = any(block_ids)
        if delay:
            self._meta.reqs_to_send.append(request.request_id)
            self._awaiting_read.add(request.request_id)
        # Without blocks to read (no computed token) the tokens handed on are 0 as well; a
        # decode side keeps its blocks for the next turn's prefill (readback).
        return delay, FinishedTransfer(tuple(tuple(ids) for ids in self.exchange.clip(block_ids)),
                                       request.num_computed_tokens if delay else 0,
                                       readback=decode_side)

    # -- what the scheduler and its integrity check ask -------------------------------------
    def has_pending_stores(self) -> bool:
        return False  # reads keep the engine stepping through their held requests

    def gpu_pins(self) -> dict[int, int]:
        return {}  # held blocks stay with their (finished) request

    def cpu_counts(self) -> None:
        return None  # no CPU tier

    def loading_finished(self) -> set[str]:
        """Finished requests that keep their blocks: pulls still in flight, reads awaited,
        readbacks claimed again (never pulled)."""
        return {rid for rid, r in (*self._pulling.items(), *self._stranded.items())
                if r.is_finished()} | self._awaiting_read

    def get_external_cache_hit_sources(self, request: Request,
                                       num_external_tokens: int) -> dict[CacheHitSource, int]:
        return single_source(CacheHitSource.P2P, num_external_tokens)  # read from the peer

    def reset_cache(self) -> None:
        """Nothing to forget: the connector caches no KV of its own."""

    def take_events(self) -> list[KVCacheEvent]:
        return []  # no tier of its own

    def check_integrity(self) -> None:
        both = self._awaiting_read & set(self._pulling)
        if both:
            raise IntegrityError(f"nixl: {sorted(both)} both pulling and awaiting a read")
