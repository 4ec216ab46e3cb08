"""Who holds which block around a divergence: a block timeline per system.

With `--traces` the timeline is rebuilt from each side's trace (every step's changed block
tables, applied in order from step 0, with a request's table dropped when it finishes, is
aborted or preempted), so every live request's whole table is shown. Without traces only the
records the report carries are known (the divergent step and the few before it), so a table
appears from the step it last changed.

Besides who holds what, each system's free queue head (the next block ids an allocation takes,
in eviction order) and its cached block ids (free blocks still holding a prefix-cache hash) are
shown: per step as they stood before it (from the trace's snapshots, so only with `--traces`),
and in a last column as they stood right after the divergent step (read from both systems when
the divergence was found, so always). A free-head or cached cell that differs from the other
system's at the same step is outlined, since a different free order or cache content is the
usual cause of different block ids.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from conformance.sched.trace import parse_id_ranges

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
                                                  "waiting": before["waiting"]},
            "free_head": None if before is None else before.get("free_head"),
            "cached_ids": None if before is None else before.get("cached_ids")}


def _after_column(state: dict[str, Any], step: int, tables: dict[str, Any]) -> dict[str, Any]:
    """The state read right after the divergent step: its queues, free head and cached ids
    (the tables are the divergent step's own)."""
    return {"step": step, "after": True, "tables": dict(tables), "changed": [],
            "running": len(state["running"]), "waiting": len(state["waiting"]),
            "blocks": state.get("blocks"), "stored": None, "removed": None,
            "queue": {"running": state["running"], "waiting": state["waiting"]},
            "free_head": state.get("free_head"), "cached_ids": state.get("cached_ids")}


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
    after = (workload.get("divergence_states") or {}).get(decisive["level"])
    sides = []
    for side in ("left", "right"):
        trace = next((t for t in workload.get("traces", []) if f".{side}-" in t), None)
        if trace is not None and (report_dir / trace).exists():
            entry = {"source": "trace", "trace": trace,
                     "columns": from_trace(report_dir / trace, step)}
        else:
            records = [p[side] for p in decisive["preceding"]]
            records.append(decisive[f"{side}_record"])
            entry = {"source": "records", "columns": from_records(records)}
        columns = entry["columns"]
        if after is not None and after.get(side) is not None:
            last = columns[-1]["tables"] if columns else {}
            columns.append(_after_column(after[side], after["step"], last))
        sides.append(entry)
    return {"step": step, "level": decisive["level"], "sides": sides}


def render_timeline(timeline: dict[str, Any] | None, names: tuple[str, str]) -> str:
    if timeline is None:
        return ""
    parts = [f"<h3>Block timeline up to step {timeline['step']}</h3>",
             "<p class='note'>Which request holds which block ids (one list per KV-cache "
             "group), per system; a cell outlined in red changed at that step. Queue heads, "
             "the free queue's head (next blocks to allocate, in eviction order) and the "
             "cached block ids (free, still holding a hash) are as they stood before each "
             "step (known with --traces); the last column is the state right after the "
             "divergent step. A free-head or cached cell outlined in orange differs from the "
             "other system's.</p>"]
    sides = timeline["sides"]
    for index, (name, side) in enumerate(zip(names, sides, strict=True)):
        parts.append(_side_table(name, side, sides[1 - index] if len(sides) == 2 else None))
    return "<div class='timeline'>" + "".join(parts) + "</div>"


def _side_table(name: str, side: dict[str, Any], other: dict[str, Any] | None) -> str:
    columns = side["columns"]
    if not columns:
        return f"<p>{_e(name)}: no steps recorded.</p>"
    source = ("whole tables, from the trace" if side["source"] == "trace"
              else "tables as far as the report's records show them (run with --traces for "
                   "whole tables)")
    requests = sorted({r for c in columns for r in c["tables"]})
    head = "".join(f"<th>{'after step' if c.get('after') else 'step'} {c['step']}</th>"
                   for c in columns)
    theirs = {(c["step"], bool(c.get("after"))): c for c in (other or {}).get("columns", [])}
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
    for label, key in (("free queue head", "free_head"), ("cached block ids", "cached_ids")):
        row = "".join(_id_cell(c, theirs.get((c["step"], bool(c.get("after")))), key)
                      for c in columns)
        facts.append(f"<tr class='fact ids'><th>{label}</th>{row}</tr>")
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
        if column["stored"] is None:
            return "-"
        return f"{column['stored']} / {column['removed']}"
    queue = column["queue"]
    if queue is None:
        return "-"
    return (f"{', '.join(queue['running'][:3]) or '-'}; "
            f"{', '.join(queue['waiting'][:3]) or '-'}")


def _id_cell(column: dict[str, Any], other: dict[str, Any] | None, key: str) -> str:
    ids = column.get(key)
    if ids is None:
        return "<td>-</td>"
    mark = ""
    if other is not None and other.get(key) is not None and other[key] != ids:
        mark = " class='differs'"
    text = ", ".join(str(i) for i in ids) if key == "free_head" else ranges(
        parse_id_ranges(ids))
    if key == "free_head" and column.get("blocks"):
        free = column["blocks"]["cached"] + column["blocks"]["empty"]
        text += ", ..." if free > len(ids) else ""
    return f"<td{mark}><code>{_e(text or 'none')}</code></td>"


def ranges(ids: list[int], most: int = 12) -> str:
    """Sorted ids as runs, `3-9, 12, 15-20`; past `most` runs, `... (N ids)`."""
    runs: list[tuple[int, int]] = []
    for block in sorted(ids):
        if runs and block == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], block)
        else:
            runs.append((block, block))
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:most])
    return text + (f", ... ({len(ids)} ids)" if len(runs) > most else "")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
