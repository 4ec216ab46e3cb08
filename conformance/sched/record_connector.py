"""The KV connector's part of a `StepRecord` in JSON: the step's transfers, external hits,
the worker's report and the CPU tier's block counts. Left out entirely for a run without a
connector, so records, traces and golden files of connector-less runs keep their bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conformance.sched.system import BlockCounts, ConnectorReport, Transfers

if TYPE_CHECKING:
    from conformance.sched.record import StepRecord


def connector_json(record: StepRecord) -> dict[str, Any]:
    out: dict[str, Any] = {}
    t = record.transfers
    if t is not None:
        out["transfers"] = {
            "load_event": t.load_event, "load_blocks": [list(p) for p in t.load_blocks],
            "store_event": t.store_event, "store_blocks": [list(p) for p in t.store_blocks],
            "load_event_to_reqs": {str(e): list(r) for e, r in t.load_event_to_reqs},
            "need_flush": t.need_flush,
        }
    if record.external_hits:
        out["external_hits"] = dict(record.external_hits)
    r = record.connector_report
    if r is not None:
        out["connector_report"] = {"finished_loads": list(r.finished_loads),
                                   "finished_stores": list(r.finished_stores),
                                   "invalid_block_ids": list(r.invalid_block_ids)}
    c = record.cpu_blocks
    if c is not None:
        out["cpu_blocks"] = {"active": c.active, "cached": c.cached, "empty": c.empty}
    return out


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
    if data.get("external_hits"):
        out["external_hits"] = tuple(data["external_hits"].items())
    r = data.get("connector_report")
    if r is not None:
        out["connector_report"] = ConnectorReport(tuple(r["finished_loads"]),
                                                  tuple(r["finished_stores"]),
                                                  tuple(r["invalid_block_ids"]))
    if data.get("cpu_blocks") is not None:
        out["cpu_blocks"] = BlockCounts(**data["cpu_blocks"])
    return out
