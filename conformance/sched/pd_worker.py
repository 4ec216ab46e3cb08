"""`PDWorker`: a P/D connector's worker side and its modelled peer, played deterministically.

Both systems of a lockstep run get the same worker, so a pull landing or a read finishing is a
fact of the workload, not of timing. The rules follow upstream's NIXL worker (pull mode):

* a pull the step orders with `awaiting` lands in the output of step s + `load_latency_steps`
  (0: the same step's output), in order; it is reported by request as finished receiving
  (an aborted request too: the scheduler then frees its blocks); a pull without `awaiting`
  only releases the peer's blocks and reports nothing;
* a request whose workload says `load_fails` has its whole pull fail: it is reported finished
  *and* failed, and, as upstream's worker does where every group is full attention, its local
  blocks are reported invalid too (a hybrid model's block ids are unique per group only, so
  there the failure is reported by request alone); one whose workload says `pull_lost` is
  never reported (the peer never answered);
* a finished prefill announced in step s (`reads_awaited`) is read by the modelled decode peer
  in the output of step s + `send_latency_steps` and reported as finished sending.

In push mode (upstream's NixlPushConnector, the same worker base) a decode-side request's
transfer starts when its registration is handed out, not with an awaited pull: the modelled
prefill peer writes its blocks, and the write lands, fails or is lost exactly as a pull
would; a finished prefill's blocks are written to the modelled decode peer, which has always
registered, `send_latency_steps` after they are announced.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from conformance.systems.transfer_records import ConnectorReport, RemoteTransfers
from workloads.model import Workload


@dataclass(frozen=True, slots=True)
class _InFlight:
    req_id: str
    due_step: int
    blocks: tuple[int, ...] = ()  # a pull's local blocks of the first group


class PDWorker:
    def __init__(self, workload: Workload) -> None:
        connector = workload.config.kv_connector
        assert connector is not None and connector.type == "nixl"
        self.load_latency = connector.load_latency_steps
        self.send_latency = connector.send_latency_steps
        self._failing = frozenset(r.request_id for r in workload.requests
                                  if r.kv_transfer is not None and r.kv_transfer.load_fails)
        self._lost = frozenset(r.request_id for r in workload.requests
                               if r.kv_transfer is not None and r.kv_transfer.pull_lost)
        self._block_level_failures = all(g.type in ("full", "reference_window")
                                         for g in workload.config.kv_cache_groups)
        self._pulls: deque[_InFlight] = deque()
        self._reads: deque[_InFlight] = deque()

    def run(self, step: int, orders: RemoteTransfers) -> ConnectorReport:
        """Start this step's pulls and reads, then report what has finished by its end."""
        awaited = [(p.req_id, p.local_block_ids) for p in orders.pulls if p.awaiting]
        for rid, blocks in awaited + list(orders.registrations):
            if rid not in self._lost:
                self._pulls.append(_InFlight(rid, step + self.load_latency,
                                             blocks[0] if blocks else ()))
        for rid in orders.reads_awaited:
            self._reads.append(_InFlight(rid, step + self.send_latency))
        pulled = _complete(self._pulls, step)
        failed = [p for p in pulled if p.req_id in self._failing]
        return ConnectorReport(
            finished_loads=tuple(sorted(p.req_id for p in pulled)),
            invalid_block_ids=tuple(sorted({b for p in failed for b in p.blocks}))
            if self._block_level_failures else (),
            finished_sends=tuple(sorted(r.req_id for r in _complete(self._reads, step))),
            failed_loads=tuple(sorted(p.req_id for p in failed)))

    def busy(self) -> bool:
        """Pulls or reads still in flight (the engine must keep stepping to hear of them)."""
        return bool(self._pulls or self._reads)


def _complete(queue: deque[_InFlight], step: int) -> list[_InFlight]:
    done: list[_InFlight] = []
    while queue and queue[0].due_step <= step:
        done.append(queue.popleft())
    return done
