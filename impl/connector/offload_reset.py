"""The CPU tier's transfers as a whole: releasing them, and an operator's reset of the tier.

A reset (upstream's `reset_connector`, asked beside a prefix-cache reset, e.g. after new
weights make every cached block stale) cannot stop the worker's copies in flight: their
blocks stay pinned until the worker reports them. So the reset *abandons* them:

* a store event sent to the worker is abandoned: when it completes, its pins drop and its CPU
  copies are never indexed (no stored event, nothing findable); a finished request's store
  not sent yet is released at once;
* a load sent to the worker is abandoned: the request still gets its blocks (the copy is
  under way), and the load's pins drop when it completes, as they would have;
* every pending hit (a lookup not yet allocated) drops its pin, and every eager request's
  store state is forgotten: a request running through the reset stores nothing more (one
  admitted after it registers afresh); lazy mode's cursor starts again from the head.

The reset succeeds, emptying the CPU pool's prefix cache, only when nothing is abandoned
and no CPU block is in use; otherwise it reports failure (the operator asks again later).
"""

from __future__ import annotations

from collections.abc import Iterable

from impl.connector.offload_state import CPUHit, LoadState, Transfer, free_hit
from impl.connector.offload_stores import OffloadStores
from vtwin.errors import IntegrityError


class OffloadTransfers(OffloadStores):
    def __init__(self) -> None:
        super().__init__()
        self.reqs_to_load: dict[str, LoadState] = {}
        self.load_event_to_reqs: dict[int, list[str]] = {}
        self.pending_hits: dict[str, CPUHit] = {}
        self.abandoned_stores: dict[int, Transfer] = {}  # store event -> its transfer
        self.abandoned_loads: dict[str, LoadState] = {}  # request id -> its load

    def reset_cache(self) -> bool:
        """Abandon the transfers in flight (module docstring); True if the CPU pool's prefix
        cache could be emptied now."""
        cpu = self.cpu_block_pool
        for hit in self.pending_hits.values():
            free_hit(cpu, hit)
        self.pending_hits.clear()
        self.abandoned_stores.update(self.store_event_to_blocks)
        for queued in self.pending_finished_stores:
            self.release(queued)
        self.pending_finished_stores.clear()
        self.store_event_to_blocks.clear()
        self.in_flight_store_gpu_blocks.clear()
        for req_id, load in list(self.reqs_to_load.items()):
            if load.load_event is None:  # never sent: no copy can be running
                self.cleanup_load(req_id)
            else:
                del self.reqs_to_load[req_id]
                self.abandoned_loads[req_id] = load
        self.reqs_to_store.clear()
        self.store_event_to_reqs.clear()
        self.cursor = None
        if self.abandoned_stores or self.abandoned_loads:
            return False
        return cpu.reset_prefix_cache()

    def process_store_event(self, event: int) -> None:
        """An abandoned store's completion only drops its pins; any other goes on as usual."""
        abandoned = self.abandoned_stores.pop(event, None)
        if abandoned is not None:
            self.release(abandoned)
            return
        super().process_store_event(event)

    def cleanup_load(self, req_id: str) -> None:
        """Forget `req_id`'s load (kept or abandoned) and drop its pins."""
        state = self.reqs_to_load.pop(req_id, None)
        if state is None:
            state = self.abandoned_loads.pop(req_id, None)
        if state is None:
            return
        if state.load_event is not None:
            reqs = self.load_event_to_reqs.get(state.load_event)
            if reqs is not None:
                if req_id in reqs:
                    reqs.remove(req_id)
                if not reqs:
                    del self.load_event_to_reqs[state.load_event]
        self.release(state.transfer)

    def release(self, transfer: Transfer) -> None:
        """Drop a transfer's pins on both tiers, CPU first, in transfer order."""
        cpu, gpu = self.cpu_block_pool, self.gpu_pool
        cpu.free_blocks([cpu.blocks[i] for i in transfer.cpu_block_ids])
        gpu.free_blocks([gpu.blocks[i] for i in transfer.gpu_block_ids])

    def loading_finished(self) -> set[str]:
        """Finished requests whose load is still in flight (an abandoned one included)."""
        return ({rid for rid, state in self.reqs_to_load.items() if state.finished}
                | {rid for rid, state in self.abandoned_loads.items()
                   if state.request.is_finished()})

    def has_pending_stores(self) -> bool:
        return bool(self.pending_finished_stores or self.store_event_to_blocks
                    or self.abandoned_stores)

    def transfers(self) -> Iterable[Transfer]:
        """Every transfer holding pins: loads (abandoned too), stores sent and queued."""
        yield from (state.transfer for state in self.reqs_to_load.values())
        yield from (state.transfer for state in self.abandoned_loads.values())
        yield from self.store_event_to_blocks.values()
        yield from self.abandoned_stores.values()
        yield from self.pending_finished_stores

    def check_load_integrity(self) -> None:
        """Every sent load is listed under its event and vice versa (abandoned ones too), and
        no request's load is both kept and abandoned."""
        both = self.reqs_to_load.keys() & self.abandoned_loads.keys()
        if both:
            raise IntegrityError(f"offload: loads both kept and abandoned: {sorted(both)}")
        loads = {**self.reqs_to_load, **self.abandoned_loads}
        for req_id, state in loads.items():
            if state.load_event is not None and req_id not in self.load_event_to_reqs.get(
                    state.load_event, ()):
                raise IntegrityError(f"offload: load of {req_id} missing from event "
                                     f"{state.load_event}")
        for event, reqs in self.load_event_to_reqs.items():
            for req_id in reqs:
                if req_id not in loads:
                    raise IntegrityError(f"offload: load event {event} lists {req_id}, "
                                         "which has no load")
        if self.abandoned_stores.keys() & self.store_event_to_blocks.keys():
            raise IntegrityError("offload: a store event both in flight and abandoned")
