"""What a KV connector hands its worker each step and what the worker reports, made canonical
(the records `Scheduled` and `RunnerOutput` carry; `conformance.systems.connector` builds them
from the twin's and upstream's metadata): SimpleCPUOffload's events (`Transfers`), the
OffloadingConnector's jobs (`JobTransfers`), the NIXL P/D connector's orders
(`RemoteTransfers`), a MultiConnector's two (`MultiTransfers`), and the worker's report
(`ConnectorReport`)."""

from __future__ import annotations

from dataclasses import dataclass

BlockIds = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class Transfers:
    """What a KV connector asks the worker to move in one step (seed 003): at most one load
    and one store event (-1: none), each as (GPU block, CPU block) pairs in transfer order;
    every load event still in flight with its requests (the worker reports loads by request);
    `need_flush`: a preemption this step, so everything in flight must finish first."""

    load_event: int
    load_blocks: tuple[tuple[int, int], ...]
    store_event: int
    store_blocks: tuple[tuple[int, int], ...]
    load_event_to_reqs: tuple[tuple[int, tuple[str, ...]], ...]
    need_flush: bool


    @property
    def num_loads(self) -> int:
        return int(self.load_event >= 0)

    @property
    def num_stores(self) -> int:
        return int(self.store_event >= 0)

    @property
    def num_loaded_blocks(self) -> int:
        return len(self.load_blocks)

    @property
    def num_stored_blocks(self) -> int:
        return len(self.store_blocks)

    num_sync_loads = 0  # (the CPU tier loads between steps only)


@dataclass(frozen=True, slots=True)
class OffloadJob:
    """One OffloadingConnector transfer job: its id, request, GPU blocks (group after group,
    `group_sizes` per group, starting at `block_indices` in each group's table) and CPU chunk
    slots (a load's sources, a store's destinations). `sync`: a load the worker finishes before
    the step runs (its request runs in that step: 0.33's `sync_load_budget_bytes`)."""

    job_id: int
    req_id: str
    gpu_blocks: tuple[int, ...]
    group_sizes: tuple[int, ...]
    block_indices: tuple[int, ...]
    cpu_slots: tuple[int, ...]
    sync: bool = False


@dataclass(frozen=True, slots=True)
class JobTransfers:
    """What the OffloadingConnector asks the worker to do in one step: load and store jobs in
    the order they were made, and the jobs to finish before the step runs (sorted)."""

    load_jobs: tuple[OffloadJob, ...]
    store_jobs: tuple[OffloadJob, ...]
    jobs_to_flush: tuple[int, ...]

    @property
    def num_loads(self) -> int:
        return len(self.load_jobs)

    @property
    def num_stores(self) -> int:
        return len(self.store_jobs)

    @property
    def num_loaded_blocks(self) -> int:
        return sum(len(job.gpu_blocks) for job in self.load_jobs)

    @property
    def num_stored_blocks(self) -> int:
        return sum(len(job.gpu_blocks) for job in self.store_jobs)

    @property
    def num_sync_loads(self) -> int:
        return sum(1 for job in self.load_jobs if job.sync)


@dataclass(frozen=True, slots=True)
class PullOrder:
    """One request's pull in a P/D connector's step (`impl.connector.nixl`): the local blocks
    to fill per group, the blocks per group its local hit covers, and whether it waits for
    the pull (False: only the peer's blocks to release)."""

    req_id: str
    local_block_ids: BlockIds
    num_cached_blocks: tuple[int, ...]
    awaiting: bool


@dataclass(frozen=True, slots=True)
class RemoteTransfers:
    """What a P/D connector asks its worker in one step: pulls (by request id), finished
    prefills whose blocks now wait for the peer's read (in the order they finished), and the
    prefill-side requests admitted this step or ended without a read (sorted). Push mode
    adds the decode-side registrations handed out this step and the finished prefills'
    blocks handed to the worker to write (each by request id, in the connector's order)."""

    pulls: tuple[PullOrder, ...]
    reads_awaited: tuple[str, ...]
    in_batch: tuple[str, ...]
    not_processed: tuple[str, ...]
    registrations: tuple[tuple[str, BlockIds], ...] = ()
    pushes: tuple[tuple[str, BlockIds], ...] = ()

    # As the other connectors' records count their work: pulls (push mode: registrations)
    # are loads, awaited reads are stores (of blocks the record does not list).
    @property
    def num_loads(self) -> int:
        return sum(1 for p in self.pulls if p.awaiting) + len(self.registrations)

    @property
    def num_stores(self) -> int:
        return len(self.reads_awaited)

    @property
    def num_loaded_blocks(self) -> int:
        return sum(len(g) for p in self.pulls for g in p.local_block_ids)

    @property
    def num_stored_blocks(self) -> int:
        return 0

    num_sync_loads = 0  # (a pull always lands between steps)


@dataclass(frozen=True, slots=True)
class MultiTransfers:
    """A MultiConnector's step: the P/D connector's orders and the OffloadingConnector's
    jobs, counted together."""

    remote: RemoteTransfers
    jobs: JobTransfers

    @property
    def num_loads(self) -> int:
        return self.remote.num_loads + self.jobs.num_loads

    @property
    def num_stores(self) -> int:
        return self.remote.num_stores + self.jobs.num_stores

    @property
    def num_loaded_blocks(self) -> int:
        return self.remote.num_loaded_blocks + self.jobs.num_loaded_blocks

    @property
    def num_stored_blocks(self) -> int:
        return self.remote.num_stored_blocks + self.jobs.num_stored_blocks

    @property
    def num_sync_loads(self) -> int:
        return self.jobs.num_sync_loads


@dataclass(frozen=True, slots=True)
class ConnectorReport:
    """The worker's connector report for one step: requests whose loads finished (sorted),
    store events finished (in completion order), GPU blocks whose load failed (sorted), the
    OffloadingConnector's jobs finished (in completion order), and a P/D connector's finished
    reads and wholly failed pulls (sorted)."""

    finished_loads: tuple[str, ...] = ()
    finished_stores: tuple[int, ...] = ()
    invalid_block_ids: tuple[int, ...] = ()
    completed_jobs: tuple[int, ...] = ()
    finished_sends: tuple[str, ...] = ()
    failed_loads: tuple[str, ...] = ()
