"""`NixlPushConnectorScheduler`: the NIXL P/D connector's scheduler side in push mode.

Pull mode (`impl.connector.nixl`) has the decode side read the prefill side's blocks. In push
mode the prefill side writes them instead, so the two sides meet in the middle:

* **Decode side.** Admission claims the prompt past the local hit exactly as in pull mode,
  but nothing is pulled: once the request has blocks for tokens it does not hold, it
  *registers* them (the blocks per group that hold no cached KV), and the next step's
  metadata hands the registration to the worker, which announces it to the prefill peer.
  The request waits (WAITING_FOR_REMOTE_KVS) until the peer's write is reported as a finished
  receive. Its transfer order still lists the local blocks, but with no cached-block counts
  and `awaiting` False, because the worker waits for the write, not for a read of its own.
  A request whose local hit covers every claimed token registers nothing and keeps its
  `do_remote_prefill` flag (a later admission may still claim tokens, if its cached blocks
  were evicted meanwhile); a request that finishes before it registered sends an empty order,
  so the worker can tell the peer to drop the prompt's blocks.
* **Prefill side.** As in pull mode, a request that finishes normally with blocks keeps them
  until the peer reports them sent; push mode also hands the worker the finished blocks
  (`push_finished_blocks`), which it writes into the decode side's registered blocks.
* The engine keeps stepping while finished blocks wait for their write or registrations wait
  for the next step (`has_pending_stores`).

Upstream also arms a wall-clock deadline per registration and drops the registration when it
passes; wall time is not modelled (the harness's peer always answers or never does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.connector.nixl import NixlConnectorScheduler, unhashed_blocks
from impl.connector.nixl_metadata import NixlMetadata, PullOrder
from impl.connector.types import FinishedTransfer, KVConnectorOutput
from vtwin.errors import IntegrityError

if TYPE_CHECKING:
    from impl.core.kv_cache_manager import KVCacheBlocks
    from impl.core.specs import KVCacheConfig
    from impl.sched.output import SchedulerOutput
    from impl.sched.request import Request

BlockIds = tuple[list[int], ...]


class NixlPushConnectorScheduler(NixlConnectorScheduler):
    def __init__(self, kv_cache_config: KVCacheConfig, *,
                 num_reprefillable_tokens: int = 0) -> None:
        super().__init__(kv_cache_config, num_reprefillable_tokens=num_reprefillable_tokens)
        self._registrations: dict[str, BlockIds] = {}  # to hand the worker next step
        self._written: dict[str, BlockIds] = {}  # finished prefills' blocks awaiting the write
        self._new_writes: dict[str, BlockIds] = {}  # ... not yet handed to the worker

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
        transfer = request.kv_transfer
        if transfer is None:
            return
        if transfer.do_remote_decode:
            self._meta.reqs_in_batch.add(request.request_id)
            return
        if not transfer.do_remote_prefill or num_external_tokens <= 0:
            return  # nothing to receive: the flag stays for a later admission or the finish
        local = self.exchange.clip(unhashed_blocks(blocks))
        self._registrations[request.request_id] = local
        self._order_pull(request, PullOrder(local, (), False), waits=True)

    def request_finished(self, request: Request, block_ids: tuple[list[int], ...]
                         ) -> tuple[bool, FinishedTransfer | None]:
        delay, handed = super().request_finished(request, block_ids)
        if delay:
            blocks = tuple(list(ids) for ids in self.exchange.clip(block_ids))
            self._written[request.request_id] = blocks
            self._new_writes[request.request_id] = blocks
        return delay, handed

    def build_connector_meta(self, output: SchedulerOutput) -> NixlMetadata:
        meta = super().build_connector_meta(output)
        meta.push_registrations, self._registrations = self._registrations, {}
        meta.push_finished_blocks, self._new_writes = self._new_writes, {}
        return meta

    def update_connector_output(self, output: KVConnectorOutput) -> None:
        super().update_connector_output(output)
        for rid in output.finished_sending:
            self._written.pop(rid, None)

    def has_pending_stores(self) -> bool:
        return bool(self._written or self._registrations)

    def check_integrity(self) -> None:
        super().check_integrity()
        unannounced = set(self._written) - self._awaiting_read
        if unannounced:
            raise IntegrityError(f"nixl push: {sorted(unannounced)} hold blocks for a write "
                                 "but no read is awaited")
        if not set(self._new_writes) <= set(self._written):
            raise IntegrityError("nixl push: blocks handed to the worker that no finished "
                                 "prefill holds")
