"""A guided run's report: strategies side by side, as numbers and as one page.

`summarize(run_dir)` reads each strategy's ``search.json`` and returns what `summary.json`
holds: per strategy the runs, the twin and upstream arcs reached, arcs per hour (beyond what
the warm-up run reached, `runner.WARM_UP`), and, the
question guidance is for, the arcs one strategy reached that the other did not reach *in the
same time* (the last point of the shorter timeline bounds both), plus the seconds to each
failure signature. `render(summary)` is ``index.html``: that table, a chart of arcs over time
per strategy and side (plotly, embedded once, offline), and each failure with its file.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from conformance.rundirs import IndexPage, Summary, read_json, update_index
from conformance.sched.report.charts import page_script

COLORS = {"guided": "#0969da", "uniform": "#bf8700"}
TIMELINE_FIELDS = ("seconds", "runs", "twin_arcs", "upstream_arcs", "corpus", "failures")


def _at(timeline: list[list[float]], seconds: float) -> dict[str, float]:
    """The last point at or before `seconds` (zeros before the first run)."""
    point = [0.0] * len(TIMELINE_FIELDS)
    for row in timeline:
        if row[0] > seconds:
            break
        point = row
    return dict(zip(TIMELINE_FIELDS, point, strict=True))


def summarize(run_dir: Path) -> dict[str, Any]:
    searches = {}
    for path in sorted(run_dir.glob("*/search.json")):
        data = read_json(path)
        if data is not None:
            searches[str(data["strategy"])] = data
    ends = [data["timeline"][-1][0] for data in searches.values() if data["timeline"]]
    horizon = min(ends, default=0.0)
    strategies = {}
    for name, data in searches.items():
        timeline = data["timeline"]
        last = timeline[-1] if timeline else [0.0] * len(TIMELINE_FIELDS)
        hours = max(last[0], 1e-9) / 3600
        strategies[name] = {
            "runs": data["runs"], "seconds": last[0], "mutants": data["mutants"],
            "invalid_mutants": data["invalid"], "corpus": len(data["corpus"]),
            "twin_arcs": data["twin_arcs"], "upstream_arcs": data["upstream_arcs"],
            "arcs_per_hour": round((data["twin_arcs"] + data["upstream_arcs"]
                                    - sum(data.get("warm_up_arcs", (0, 0)))) / hours),
            "at_common_horizon": _at(timeline, horizon),
            "found": [{"signature": f["signature"], "seconds": f["seconds"], "run": f["run"],
                       "detail": f["detail"], "file": f"{name}/{f['file']}",
                       "origin": f["origin"]} for f in data["found"]],
            "generator_errors": data["errors"],
        }
    first = next(iter(searches.values()), {})
    return {"left": first.get("left"), "right": first.get("right"),
            "families": first.get("settings", {}).get("families"),
            "common_horizon_seconds": horizon, "strategies": strategies}


def write_summary(run_dir: Path) -> dict[str, Any]:
    summary = summarize(run_dir)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    (run_dir / "index.html").write_text(render(summary, run_dir), encoding="utf-8")
    return summary


def _figure(run_dir: Path, side: str) -> dict[str, Any]:
    traces = []
    for path in sorted(run_dir.glob("*/search.json")):
        data = read_json(path) or {}
        rows = data.get("timeline", [])
        name = str(data.get("strategy"))
        column = TIMELINE_FIELDS.index(f"{side}_arcs")
        traces.append({"type": "scatter", "mode": "lines", "name": name,
                       "x": [row[0] / 60 for row in rows], "y": [row[column] for row in rows],
                       "line": {"color": COLORS.get(name, "#57606a"), "width": 2}})
    layout = {"title": {"text": f"{side} arcs reached", "x": 0, "font": {"size": 14}},
              "height": 320, "margin": {"l": 64, "r": 16, "t": 36, "b": 48},
              "hovermode": "x unified", "paper_bgcolor": "white", "plot_bgcolor": "white",
              "xaxis": {"title": {"text": "minutes"}, "showgrid": True, "gridcolor": "#eaeef2"},
              "yaxis": {"title": {"text": "arcs"}, "showgrid": True, "gridcolor": "#eaeef2"}}
    return {"data": traces, "layout": layout}


def render(summary: dict[str, Any], run_dir: Path) -> str:
    e = html.escape
    rows = []
    for name, s in summary["strategies"].items():
        common = s["at_common_horizon"]
        first = min((f["seconds"] for f in s["found"]), default=None)
        rows.append(
            f"<tr><td>{e(name)}</td><td>{s['runs']}</td><td>{s['mutants']}</td>"
            f"<td>{s['corpus']}</td><td>{s['twin_arcs']}</td><td>{s['upstream_arcs']}</td>"
            f"<td>{int(common['twin_arcs'])} / {int(common['upstream_arcs'])}</td>"
            f"<td>{s['arcs_per_hour']}</td><td>{len(s['found'])}</td>"
            f"<td>{'-' if first is None else f'{first:.0f} s'}</td></tr>")
    failures = [
        f"<li><b>{e(name)}</b> <code>{e(f['signature'])}</code> after {f['seconds']:.0f} s "
        f"(run {f['run']}, {e(f['origin'])}): {e(f['detail'])} "
        f"<a href='{e(f['file'])}'>{e(f['file'])}</a></li>"
        for name, s in summary["strategies"].items() for f in s["found"]]
    charts = "".join(
        "<div class='chart' data-figure=\"" + e(json.dumps(_figure(run_dir, side)), quote=True)
        + "\"></div>" for side in ("twin", "upstream"))
    return (
        "<!doctype html><meta charset='utf-8'><title>vtwin guided search</title>"
        "<style>body{font:14px system-ui;margin:24px;max-width:1100px}"
        "table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:4px 8px}"
        "th{background:#f6f8fa}</style>"
        f"<h1>Guided search: {e(str(summary['left']))} against {e(str(summary['right']))}</h1>"
        f"<p>Families: {e(', '.join(summary['families'] or []))}. Arcs are coverage.py's "
        "branch arcs of the twin's <code>impl/</code> and upstream's measured directories; "
        "'at the common horizon' compares the strategies after the same time "
        f"({summary['common_horizon_seconds']:.0f} s).</p>"
        "<table><tr><th>strategy</th><th>runs</th><th>mutants</th><th>corpus</th>"
        "<th>twin arcs</th><th>upstream arcs</th><th>twin / upstream at the common horizon"
        "</th><th>arcs per hour</th><th>failure signatures</th><th>first failure</th></tr>"
        + "".join(rows) + "</table>" + charts
        + ("<h2>Failures</h2><ul>" + "".join(failures) + "</ul>" if failures else
           "<p>No failure found.</p>") + page_script())


def run_summary(run_dir: Path) -> Summary | None:
    """One run for the index of runs (None: not a guided run)."""
    data = read_json(run_dir / "summary.json")
    if data is None:
        return None
    strategies = data.get("strategies", {})
    return {"id": run_dir.name, "planted": (run_dir / "planted.txt").is_file(),
            "strategies": {name: {"runs": s["runs"], "twin_arcs": s["twin_arcs"],
                                  "upstream_arcs": s["upstream_arcs"],
                                  "found": len(s["found"])} for name, s in strategies.items()}}


INDEX = IndexPage(
    title="vtwin guided searches",
    intro="Each run compares strategies with the same budget (`vtwin guide`).",
    headers=("planted bug", "strategy: runs, twin / upstream arcs, failures"),
    row=lambda run: ("yes" if run["planted"] else "-", "<br>".join(
        f"{html.escape(name)}: {s['runs']}, {s['twin_arcs']} / {s['upstream_arcs']}, "
        f"{s['found']}" for name, s in run["strategies"].items())),
    main_page="index.html",
)


def update_runs_index(root: Path) -> Path:
    """`root/runs.json` and `root/index.html` over every guided run kept there."""
    return update_index(root, run_summary, INDEX)
