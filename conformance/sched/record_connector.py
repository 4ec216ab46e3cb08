"""The KV connector's part of a `StepRecord` in JSON: the step's transfers, external hits,
the worker's report and the CPU tier's block counts, and what a finished P/D prefill hands
on in its output. Left out entirely for a run without a connector, so records, traces and
golden files of connector-less runs keep their bytes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conformance.systems.protocol import BlockCounts, HandedOn, SpecMetrics, TokenOutput
from conformance.systems.transfer_records import (
    ConnectorReport,
    JobTransfers,
    MultiTransfers,
    OffloadJob,
    PullOrder,
    RemoteTransfers,
    Transfers,
)


def output_json(o: TokenOutput) -> dict[str, Any]:
    """One request's output in a record (`handed_on` only when there is one)."""
    out: dict[str, Any] = {"new_token_ids": list(o.new_token_ids),
                           "finish_reason": o.finish_reason, "stop_reason": o.stop_reason}
    m = o.spec_metrics
    if m is not None:
        out["spec_metrics"] = {"histogram": list(m.histogram),
                               "num_draft_tokens": m.num_draft_tokens,
                               **({"per_step_accepted": list(m.per_step_accepted),
                                   "per_step_drafted": list(m.per_step_drafted)}
                                  if m.per_step_accepted else {})}
    h = o.handed_on
    if h is not None:
        out["handed_on"] = {"remote_block_ids": [list(g) for g in h.remote_block_ids],
                            "remote_num_tokens": h.remote_num_tokens,
                            "remote_prefill_cached_tokens": h.remote_prefill_cached_tokens,
                            **({"readback": True} if h.readback else {})}
    return out


def output_of(req_id: str, data: dict[str, Any]) -> TokenOutput:
    h = data.get("handed_on")
    m = data.get("spec_metrics")
    return TokenOutput(req_id, tuple(data["new_token_ids"]), data["finish_reason"],
                       data["stop_reason"], None if h is None else HandedOn(
                           tuple(tuple(g) for g in h["remote_block_ids"]),
                           h["remote_num_tokens"], h["remote_prefill_cached_tokens"],
                           bool(h.get("readback"))),
                       None if m is None else SpecMetrics(
                           tuple(m["histogram"]), m["num_draft_tokens"],
                           tuple(m.get("per_step_accepted", ())),
                           tuple(m.get("per_step_drafted", ()))))


def connector_json(t: Transfers | JobTransfers | RemoteTransfers | MultiTransfers | None,
                   external_hits: Iterable[tuple[str, int]],
                   r: ConnectorReport | None, c: BlockCounts | None) -> dict[str, Any]:
    """A `StepRecord`'s connector fields (transfers, external hits, the worker's report, the
    CPU tier's counts) in JSON; the record passes them in, so this module never needs it."""
    out: dict[str, Any] = {}
    if isinstance(t, MultiTransfers):  # both parts' keys
        return {**connector_json(t.remote, (), None, None), **connector_json(t.jobs, (), None,
                                                                             None),
                **connector_json(None, external_hits, r, c)}
    if isinstance(t, RemoteTransfers):
        out["remote"] = {"pulls": [{"req_id": p.req_id,
                                    "local_block_ids": [list(g) for g in p.local_block_ids],
                                    "num_cached_blocks": list(p.num_cached_blocks),
                                    "awaiting": p.awaiting} for p in t.pulls],
                         "reads_awaited": list(t.reads_awaited),
                         "in_batch": list(t.in_batch), "not_processed": list(t.not_processed),
                         **({"registrations": {rid: [list(g) for g in blocks]
                                               for rid, blocks in t.registrations}}
                            if t.registrations else {}),
                         **({"pushes": {rid: [list(g) for g in blocks]
                                        for rid, blocks in t.pushes}} if t.pushes else {})}
    elif isinstance(t, JobTransfers):
        out["jobs"] = {"load_jobs": [_job_json(j) for j in t.load_jobs],
                       "store_jobs": [_job_json(j) for j in t.store_jobs],
                       "jobs_to_flush": list(t.jobs_to_flush)}
    elif t is not None:
        out["transfers"] = {
            "load_event": t.load_event, "load_blocks": [list(p) for p in t.load_blocks],
            "store_event": t.store_event, "store_blocks": [list(p) for p in t.store_blocks],
            "load_event_to_reqs": {str(e): list(r) for e, r in t.load_event_to_reqs},
            "need_flush": t.need_flush,
        }
    if external_hits:
        out["external_hits"] = dict(external_hits)
    if r is not None:
        out["connector_report"] = {"finished_loads": list(r.finished_loads),
                                   "finished_stores": list(r.finished_stores),
                                   "invalid_block_ids": list(r.invalid_block_ids),
                                   **({"completed_jobs": list(r.completed_jobs)}
                                      if r.completed_jobs else {}),
                                   **({"finished_sends": list(r.finished_sends)}
                                      if r.finished_sends else {}),
                                   **({"failed_loads": list(r.failed_loads)}
                                      if r.failed_loads else {})}
    if c is not None:
        out["cpu_blocks"] = {"active": c.active, "cached": c.cached, "empty": c.empty}
    return out


def _job_transfers(jobs: dict[str, Any]) -> JobTransfers:
    return JobTransfers(tuple(_job_of(j) for j in jobs["load_jobs"]),
                        tuple(_job_of(j) for j in jobs["store_jobs"]),
                        tuple(jobs["jobs_to_flush"]))


def connector_fields(data: dict[str, Any]) -> dict[str, Any]:
    """`StepRecord` keyword arguments from `connector_json`'s keys (absent: the defaults)."""
    out: dict[str, Any] = {}
    t = data.get("transfers")
    if t is not None:
        out["transfers"] = Transfers(
            t["load_event"], tuple((g, c) for g, c in t["load_blocks"]), t["store_event"],
            tuple((g, c) for g, c in t["store_blocks"]),
            tuple((int(e), tuple(r)) for e, r in t["load_event_to_reqs"].items()),
            t["need_flush"])
    jobs = data.get("jobs")
    if jobs is not None:
        out["transfers"] = _job_transfers(jobs)
    remote = data.get("remote")
    if remote is not None:
        out["transfers"] = RemoteTransfers(
            tuple(PullOrder(p["req_id"], tuple(tuple(g) for g in p["local_block_ids"]),
                            tuple(p["num_cached_blocks"]), p["awaiting"])
                  for p in remote["pulls"]),
            tuple(remote["reads_awaited"]), tuple(remote["in_batch"]),
            tuple(remote["not_processed"]),
            tuple((rid, tuple(tuple(g) for g in blocks))
                  for rid, blocks in remote.get("registrations", {}).items()),
            tuple((rid, tuple(tuple(g) for g in blocks))
                  for rid, blocks in remote.get("pushes", {}).items()))
    if jobs is not None and remote is not None:  # a MultiConnector's step
        out["transfers"] = MultiTransfers(out["transfers"], _job_transfers(jobs))
    if data.get("external_hits"):
        out["external_hits"] = tuple(data["external_hits"].items())
    r = data.get("connector_report")
    if r is not None:
        out["connector_report"] = ConnectorReport(tuple(r["finished_loads"]),
                                                  tuple(r["finished_stores"]),
                                                  tuple(r["invalid_block_ids"]),
                                                  tuple(r.get("completed_jobs", ())),
                                                  tuple(r.get("finished_sends", ())),
                                                  tuple(r.get("failed_loads", ())))
    if data.get("cpu_blocks") is not None:
        out["cpu_blocks"] = BlockCounts(**data["cpu_blocks"])
    return out


def _job_json(job: OffloadJob) -> dict[str, Any]:
    return {"job_id": job.job_id, "req_id": job.req_id, "gpu_blocks": list(job.gpu_blocks),
            "group_sizes": list(job.group_sizes), "block_indices": list(job.block_indices),
            "cpu_slots": list(job.cpu_slots), **({"sync": True} if job.sync else {})}


def _job_of(data: dict[str, Any]) -> OffloadJob:
    return OffloadJob(data["job_id"], data["req_id"], tuple(data["gpu_blocks"]),
                      tuple(data["group_sizes"]), tuple(data["block_indices"]),
                      tuple(data["cpu_slots"]), sync=bool(data.get("sync", False)))
