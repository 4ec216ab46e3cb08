"""`MultiConnectorScheduler`: several KV connectors behind one, as upstream's MultiConnector.

A P/D deployment with a CPU tier runs the NIXL connector and the OffloadingConnector together.
The scheduler sees one connector; this one asks its connectors in order and splits the work:

* **Claims.** Every connector is asked how many tokens past the local hit it supplies. The
  first that claims any owns the request's load (its claim is the answer); a connector still
  looking (None) makes the whole answer None at once, and the connectors after it are not
  asked this step.
* **Allocation.** The owner hears of the allocation with the claimed tokens; every other
  connector hears of the same blocks with none, so a NIXL decode request whose tokens the CPU
  tier claimed is told it has nothing to pull (and clears its flag), and the CPU tier still
  offers a pulled request's blocks for storing.
* **Each step.** The metadata is every connector's, in order (`MultiMetadata`); the worker's
  report goes to every connector.
* **Finishing.** Every connector sees the finished request; its blocks outlive it if any
  connector says so, and the parameters it hands a P/D peer are the one connector's that
  gives any. A request held by more than one connector would need a report from each: the
  count beyond the first travels to the worker as `extra_async_saves` (NIXL with the
  OffloadingConnector never holds twice: the CPU tier never delays a free).
* A reset of the connectors' caches reaches every connector, refused if any refuses.

The owner of a request is remembered until it finishes, so a request that claims nothing on a
later admission (after a preemption) still reports its allocation to its first owner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.connector.multi_metadata import MultiMetadata
from impl.connector.types import FinishedTransfer, KVConnectorOutput
from impl.core.prefix_stats import CacheHitSource, single_source

if TYPE_CHECKING:
    from impl.connector.protocol import SchedulerConnector
    from impl.core.events import KVCacheEvent
    from impl.core.kv_cache_manager import KVCacheBlocks
    from impl.sched.output import SchedulerOutput
    from impl.sched.request import Request


class MultiConnectorScheduler:
    def __init__(self, connectors: list[SchedulerConnector]) -> None:
        self.connectors = connectors
        self.group_block_sizes = connectors[0].group_block_sizes
        self.completes_lagging_groups = all(c.completes_lagging_groups for c in connectors)
        self._owner: dict[str, int] = {}  # request id -> the connector loading it
        self._extra_saves: dict[str, int] = {}

    def on_new_request(self, request: Request) -> None:
        for connector in self.connectors:
            connector.on_new_request(request)

    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        claim: tuple[int | None, bool] = (0, False)
        for index, connector in enumerate(self.connectors):
            tokens, load_async = connector.get_num_new_matched_tokens(request,
                                                                      num_computed_tokens)
            if tokens is None:
                return None, False
            if claim[0] == 0 and tokens > 0:
                self._owner[request.request_id] = index
                claim = (tokens, load_async)
        return claim

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
        owner = self._owner.get(request.request_id)
        for index, connector in enumerate(self.connectors):
            connector.update_state_after_alloc(
                request, blocks, num_external_tokens if index == owner else 0)

    def get_external_cache_hit_sources(self, request: Request,
                                       num_external_tokens: int) -> dict[CacheHitSource, int]:
        """The owner's split (a request nobody loads: all unspecified)."""
        owner = self._owner.get(request.request_id)
        if owner is None:
            return single_source(CacheHitSource.EXTERNAL_UNSPECIFIED, num_external_tokens)
        return self.connectors[owner].get_external_cache_hit_sources(request,
                                                                     num_external_tokens)

    def build_connector_meta(self, output: SchedulerOutput) -> MultiMetadata:
        meta = MultiMetadata(tuple(c.build_connector_meta(output) for c in self.connectors),
                             self._extra_saves)
        self._extra_saves = {}
        return meta

    def update_connector_output(self, output: KVConnectorOutput) -> None:
        for connector in self.connectors:
            connector.update_connector_output(output)

    def request_finished(self, request: Request, block_ids: tuple[list[int], ...]
                         ) -> tuple[bool, FinishedTransfer | None]:
        holders = 0
        handed: FinishedTransfer | None = None
        for connector in self.connectors:
            delay, params = connector.request_finished(request, block_ids)
            holders += delay
            if params is not None:
                if handed is not None:
                    raise RuntimeError(f"request {request.request_id}: two connectors hand "
                                       "a peer parameters")
                handed = params
        if holders > 1:
            self._extra_saves[request.request_id] = holders - 1
        self._owner.pop(request.request_id, None)
        return holders > 0, handed

    def has_pending_stores(self) -> bool:
        return any(c.has_pending_stores() for c in self.connectors)

    def gpu_pins(self) -> dict[int, int]:
        pins: dict[int, int] = {}
        for connector in self.connectors:
            for block_id, count in connector.gpu_pins().items():
                pins[block_id] = pins.get(block_id, 0) + count
        return pins

    def cpu_counts(self) -> tuple[int, int, int] | None:
        return next((counts for c in self.connectors
                     if (counts := c.cpu_counts()) is not None), None)

    def loading_finished(self) -> set[str]:
        return set().union(*(c.loading_finished() for c in self.connectors))

    def take_events(self) -> list[KVCacheEvent]:
        """Every connector's events, in the connectors' order."""
        return [event for c in self.connectors for event in c.take_events()]

    def reset_cache(self) -> bool:
        """Every connector resets (none is skipped); refused if any refuses."""
        results = [c.reset_cache() for c in self.connectors]
        return all(result is not False for result in results)

    def check_integrity(self) -> None:
        for connector in self.connectors:
            connector.check_integrity()
