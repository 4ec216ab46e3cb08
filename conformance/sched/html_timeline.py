"""Who holds which block around a divergence: a block timeline per system.

With `--traces` the timeline is rebuilt from each side's trace (every step's changed block
tables, applied in order from step 0, with a request's table dropped when it finishes, is
aborted or preempted), so every live request's whole table is shown. Without traces only the
records the report carries are known (the divergent step and the few before it), so a table
appears from the step it last changed. The traces hold block counts and prefix-cache events but
not the free queue's order or the block ids behind cached hashes, so the free-queue head and the
cached set are shown as what is known: counts, and the hashes stored / removed per step.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

WINDOW = 4
"""Steps shown: the divergent one and the three before it (the records' context)."""


def _apply(tables: dict[str, Any], record: dict[str, Any]) -> None:
    for req, table in (record.get("block_tables") or {}).items():
        tables[req] = table
    gone = [*record.get("finished", []), *record.get("aborted", []),
            *record.get("preempted", [])]
    for req in gone:
        tables.pop(req, None)


def _column(record: dict[str, Any], before: dict[str, Any] | None, tables: dict[str, Any],
            events: list[dict[str, Any]]) -> dict[str, Any]:
    stored = sum(len(e.get("block_hashes", [])) for e in events if e["kind"] == "stored")
    removed = sum(len(e.get("block_hashes", [])) for e in events if e["kind"] == "removed")
    return {"step": record.get("step"), "tables": dict(tables),
            "changed": sorted(record.get("block_tables") or {}),
            "running": record.get("num_running"), "waiting": record.get("num_waiting"),
            "blocks": record.get("blocks"), "stored": stored, "removed": removed,
            "queue": None if before is None else {"running": before["running"],
                                                  "waiting": before["waiting"]}}


def from_trace(path: Path, step: int, window: int = WINDOW) -> list[dict[str, Any]]:
    """Columns for steps step-window+1 .. step of one side's trace (cumulative tables)."""
    tables: dict[str, Any] = {}
    columns = []
    with path.open(encoding="utf-8") as handle:
        next(handle, None)  # header
        for line in handle:
            entry = json.loads(line)
            record = entry["after"]
            _apply(tables, record)
            if record["step"] > step - window:
                columns.append(_column(record, entry.get("before"), tables,
                                       entry.get("events", [])))
            if record["step"] >= step:
                break
    return columns


def from_records(records: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Columns from the records a divergence carries (tables from their last change only)."""
    tables: dict[str, Any] = {}
    columns = []
    for record in records:
        if record is None:
            continue
        _apply(tables, record)
        columns.append(_column(record, None, tables, [
            {"kind": e.get("kind"), "block_hashes": e.get("block_hashes", [])}
            for e in record.get("events", [])]))
    return columns


def timeline_json(report_dir: Path, workload: dict[str, Any]) -> dict[str, Any] | None:
    """The timeline of the workload's decisive divergence, from its traces when it has them."""
    decisive = next((d for d in workload["divergences"] if d["level"] == workload["level"]),
                    None) or (workload["divergences"] or [None])[0]
    if decisive is None:
        return None
    step = decisive["step"]
    sides = []
    for side in ("left", "right"):
        trace = next((t for t in workload.get("traces", []) if f".{side}-" in t), None)
        if trace is not None and (report_dir / trace).exists():
            sides.append({"source": "trace", "trace": trace,
                          "columns": from_trace(report_dir / trace, step)})
        else:
            records = [p[side] for p in decisive["preceding"]]
            records.append(decisive[f"{side}_record"])
            sides.append({"source": "records", "columns": from_records(records)})
    return {"step": step, "level": decisive["level"], "sides": sides}


def render_timeline(timeline: dict[str, Any] | None, names: tuple[str, str]) -> str:
    if timeline is None:
        return ""
    parts = [f"<h3>Block timeline up to step {timeline['step']}</h3>",
             "<p class='note'>Which request holds which block ids (one list per KV-cache "
             "group), per system; a cell outlined in red changed at that step. Queues are "
             "the order before the step. Free-queue order and cached block ids are not "
             "recorded: the counts and the hashes stored / removed stand for them.</p>"]
    for name, side in zip(names, timeline["sides"], strict=True):
        parts.append(_side_table(name, side))
    return "<div class='timeline'>" + "".join(parts) + "</div>"


def _side_table(name: str, side: dict[str, Any]) -> str:
    columns = side["columns"]
    if not columns:
        return f"<p>{_e(name)}: no steps recorded.</p>"
    source = ("whole tables, from the trace" if side["source"] == "trace"
              else "tables as far as the report's records show them (run with --traces for "
                   "whole tables)")
    requests = sorted({r for c in columns for r in c["tables"]})
    head = "".join(f"<th>step {c['step']}</th>" for c in columns)
    rows = []
    for req in requests:
        cells = []
        for c in columns:
            table = c["tables"].get(req)
            mark = " class='changed'" if req in c["changed"] else ""
            text = "-" if table is None else " | ".join(
                ",".join(str(b) for b in group) for group in table)
            cells.append(f"<td{mark}><code>{_e(text)}</code></td>")
        rows.append(f"<tr><th>{_e(req)}</th>{''.join(cells)}</tr>")
    facts = []
    for label, key in (("running / waiting", "queues"), ("active / cached / empty", "blocks"),
                       ("hashes stored / removed", "hashes"),
                       ("queue head (running; waiting)", "head")):
        row = "".join(f"<td>{_e(_fact(c, key))}</td>" for c in columns)
        facts.append(f"<tr class='fact'><th>{label}</th>{row}</tr>")
    return (f"<h4>{_e(name)} <span class='note'>({source})</span></h4>"
            f"<div class='scroll'><table class='blocks'><tr><th>request</th>{head}</tr>"
            f"{''.join(rows)}{''.join(facts)}</table></div>")


def _fact(column: dict[str, Any], key: str) -> str:
    if key == "queues":
        return f"{column['running']} / {column['waiting']}"
    if key == "blocks":
        b = column.get("blocks")
        return f"{b['active']} / {b['cached']} / {b['empty']}" if b else "-"
    if key == "hashes":
        return f"{column['stored']} / {column['removed']}"
    queue = column["queue"]
    if queue is None:
        return "-"
    return (f"{', '.join(queue['running'][:3]) or '-'}; "
            f"{', '.join(queue['waiting'][:3]) or '-'}")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
