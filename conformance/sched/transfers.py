"""`TransferWorker`: the worker side of a KV connector, played deterministically.

Both systems of a lockstep run get the same worker rules, so a transfer finishing is a fact of
the workload, not of timing. The rules follow upstream's SimpleCPUOffload worker:

* a load or store issued in step s completes in the output of step s + latency (0: the same
  step's output), and events of one kind complete in order (one copy stream each: event j never
  before event j - 1);
* a step whose transfers say `need_flush` (a request was preempted) completes everything in
  flight in that step's output: the worker synchronises before the preempted blocks are reused;
* a finished load is reported by request: the requests the *current* step lists for that event
  (the scheduler side drops an aborted request from the list, and then it is not reported);
* a planned failure (load event K, block index I) reports the GPU block at index I of event K's
  load list as invalid when event K completes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from conformance.systems.transfer_records import ConnectorReport, Transfers
from workloads.model import KVConnectorConfig


@dataclass(frozen=True, slots=True)
class _InFlight:
    event: int
    due_step: int
    gpu_blocks: tuple[int, ...]


class TransferWorker:
    def __init__(self, config: KVConnectorConfig) -> None:
        self.config = config
        self._loads: deque[_InFlight] = deque()
        self._stores: deque[_InFlight] = deque()
        self._failures: dict[int, list[int]] = {}
        for failure in config.load_failures:
            self._failures.setdefault(failure.load_event, []).append(failure.block_index)

    def run(self, step: int, transfers: Transfers) -> ConnectorReport:
        """Issue this step's transfers, then report what has finished by the step's end."""
        config = self.config
        if transfers.load_event >= 0:
            self._loads.append(_InFlight(transfers.load_event,
                                         step + config.load_latency_steps,
                                         tuple(gpu for gpu, _ in transfers.load_blocks)))
        if transfers.store_event >= 0:
            self._stores.append(_InFlight(transfers.store_event,
                                          step + config.store_latency_steps, ()))
        flush = transfers.need_flush
        loads = _complete(self._loads, step, flush)
        stores = _complete(self._stores, step, flush)
        reqs = dict(transfers.load_event_to_reqs)
        finished: set[str] = set()
        invalid: set[int] = set()
        for load in loads:
            finished.update(reqs.get(load.event, ()))
            for index in self._failures.get(load.event, ()):
                if index < len(load.gpu_blocks):
                    invalid.add(load.gpu_blocks[index])
        return ConnectorReport(tuple(sorted(finished)), tuple(s.event for s in stores),
                               tuple(sorted(invalid)))

    def busy(self) -> bool:
        """Transfers still in flight (the engine must keep stepping to hear of them)."""
        return bool(self._loads or self._stores)


def _complete(queue: deque[_InFlight], step: int, flush: bool) -> list[_InFlight]:
    done: list[_InFlight] = []
    while queue and (flush or queue[0].due_step <= step):
        done.append(queue.popleft())
    return done
