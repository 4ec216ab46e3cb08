"""The OffloadingConnector's transfer jobs: what the scheduler side hands the worker each step
and what it remembers about each job until every worker has reported it done.

A job moves whole chunks between the GPU and the CPU tier for one request. Its GPU side lists
block ids group after group (`group_sizes` of them per group, starting at `block_indices` in
that group's block table); its CPU side lists the chunk slots the manager chose. Loads and
stores draw their ids from one counter, so a job id alone says which job the worker finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from impl.connector.offloading.keys import OffloadKey


@dataclass(frozen=True, slots=True)
class GPUBlocks:
    """The GPU side of a transfer: block ids of every group in turn, how many belong to each
    group, and where each group's run starts in its block table."""

    block_ids: tuple[int, ...]
    group_sizes: tuple[int, ...]
    block_indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TransferJob:
    """One load (CPU slots -> GPU blocks) or store (GPU blocks -> CPU slots) of a request.
    `sync`: a load the worker finishes before the step runs (`sync_loads`)."""

    req_id: str
    gpu: GPUBlocks
    cpu_slots: tuple[int, ...]
    sync: bool = False


@dataclass(slots=True)
class JobStatus:
    """A job in flight. `keys` is a set, built from the manager's answer in its order, because
    the manager completes the keys in the set's iteration order (which, for byte strings, the
    process's hash seed decides; both sides of a lockstep run share it). `deferred_fence`:
    the GPU blocks of full-attention groups a store reads, watched for reuse only once its
    request has finished (until then the request's own references keep them); `fence`: those
    of windowed groups, watched from the start (a window frees its blocks while the request
    runs). `is_sync_load`: a load finished within its step, which stores may sit beside."""

    req_id: str
    pending_workers: int
    keys: set[OffloadKey]
    is_store: bool
    is_sync_load: bool = False
    deferred_fence: tuple[int, ...] = ()
    fence: tuple[int, ...] = ()


@dataclass(slots=True)
class OffloadingMetadata:
    """One step's jobs for the worker: loads and stores by job id (in the order they were
    made), and the jobs the worker must finish before the step runs (`jobs_to_flush`: a store
    whose request was preempted, or whose finished request's GPU blocks were handed out
    again this step)."""

    load_jobs: dict[int, TransferJob] = field(default_factory=dict)
    store_jobs: dict[int, TransferJob] = field(default_factory=dict)
    jobs_to_flush: set[int] = field(default_factory=set)
