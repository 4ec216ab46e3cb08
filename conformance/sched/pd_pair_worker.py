"""`PairWorker`: the KV transfers between the two instances of a P/D pair, played
deterministically (`workloads.pd_pair`).

The single-instance `PDWorker` models the peer; here both instances run and the worker couples
them. Within a step the prefill instance runs first, then the decode instance:

* a decode-side pull ordered in step s (awaiting) lands in the output of step s +
  `load_latency_steps`, or fails as a whole (`load_fails`: finished and failed, its local
  blocks invalid where every group is full attention to NIXL, else by request alone), or
  never reports (`pull_lost`);
* push mode: the prefill side's write starts once both its blocks were handed out
  (`pushes`) and the decode side registered its own (`registrations`), at the later of the two
  steps, and then lands, fails or is lost as a pull does;
* the prefill instance hears that a held request's transfer ended (landed or failed), or that
  the decode side will not read it (an empty order: the request finished first; or the router
  dropped it), `send_latency_steps` later (at least one step: it has already run this step)
  and frees the blocks (`finished_sending`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from conformance.sched.pd_worker import PDWorker
from conformance.systems.transfer_records import BlockIds, ConnectorReport, RemoteTransfers
from workloads.model import Workload


@dataclass(frozen=True, slots=True)
class _Transfer:
    req_id: str
    due_step: int
    blocks: tuple[int, ...]  # the decode side's local blocks of the first group


class PairWorker:
    def __init__(self, workload: Workload) -> None:
        connector = workload.config.kv_connector
        assert connector is not None and connector.type == "nixl"
        self.load_latency = connector.load_latency_steps
        self.notify_latency = max(1, connector.send_latency_steps)
        transfers = [(r.request_id, r.kv_transfer) for r in workload.requests
                     if r.kv_transfer is not None]
        self._failing = frozenset(rid for rid, t in transfers if t.load_fails)
        self._lost = frozenset(rid for rid, t in transfers if t.pull_lost)
        # As the single-instance worker (`PDWorker`): a failed transfer's blocks are reported
        # invalid only where every group is full attention to NIXL; else by request alone.
        self._block_level_failures = all(g.type in ("full", "reference_window")
                                         for g in workload.config.kv_cache_groups)
        self._in_flight: list[_Transfer] = []
        self._registered: dict[str, tuple[int, BlockIds]] = {}  # push: decode side's blocks
        self._pushed: dict[str, int] = {}  # push: steps the prefill side handed its blocks out
        self._released: list[tuple[int, str]] = []  # (step the prefill side hears, request)
        self.prefill = _Face(workload, self.run_prefill)
        self.decode = _Face(workload, self.run_decode)

    # -- the prefill instance ---------------------------------------------------------------
    def run_prefill(self, step: int, orders: RemoteTransfers) -> ConnectorReport:
        for rid, _blocks in orders.pushes:
            self._pushed[rid] = step
            self._start_write(rid, step)
        heard = sorted(rid for due, rid in self._released if due <= step)
        self._released = [(due, rid) for due, rid in self._released if due > step]
        return ConnectorReport(finished_sends=tuple(heard))

    # -- the decode instance ----------------------------------------------------------------
    def run_decode(self, step: int, orders: RemoteTransfers) -> ConnectorReport:
        registered = {rid for rid, _ in orders.registrations}
        for rid, blocks in orders.registrations:
            self._registered[rid] = (step, blocks)
            self._start_write(rid, step)
        for pull in orders.pulls:
            if pull.awaiting:
                self._start(pull.req_id, step, pull.local_block_ids)
            elif pull.req_id not in registered:
                self.release(pull.req_id, step)  # finished first: nothing will be read
        done = [t for t in self._in_flight if t.due_step <= step]
        self._in_flight = [t for t in self._in_flight if t.due_step > step]
        for transfer in done:
            self.release(transfer.req_id, step)
        failed = [t for t in done if t.req_id in self._failing]
        return ConnectorReport(
            finished_loads=tuple(sorted(t.req_id for t in done)),
            invalid_block_ids=tuple(sorted({b for t in failed for b in t.blocks}))
            if self._block_level_failures else (),
            failed_loads=tuple(sorted(t.req_id for t in failed)))

    # -- shared -----------------------------------------------------------------------------
    def release(self, req_id: str, step: int) -> None:
        """The prefill side may free `req_id`'s held blocks: it hears so a little later."""
        self._released.append((step + self.notify_latency, req_id))

    def busy(self) -> bool:
        return bool(self._in_flight or self._released)

    def _start_write(self, req_id: str, step: int) -> None:
        """Push mode: the write starts once both sides are ready."""
        if req_id in self._pushed and req_id in self._registered:
            del self._pushed[req_id]
            self._start(req_id, step, self._registered.pop(req_id)[1])

    def _start(self, req_id: str, step: int, blocks: BlockIds) -> None:
        if req_id not in self._lost:
            self._in_flight.append(_Transfer(req_id, step + self.load_latency,
                                             blocks[0] if blocks else ()))


class _Face(PDWorker):
    """One instance's view of the pair's worker, as its driver expects a P/D worker."""

    def __init__(self, workload: Workload,
                 run: Callable[[int, RemoteTransfers], ConnectorReport]) -> None:
        super().__init__(workload)
        self._run = run

    def run(self, step: int, orders: RemoteTransfers) -> ConnectorReport:
        return self._run(step, orders)
