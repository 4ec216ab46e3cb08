"""The study page: the verdict, a table per policy, and plotly charts of what pins did.

Charts (drawn by `html_charts.page_script`, plotly.js embedded once, works offline): blocks
over time per policy (active, of which pinned, cached, empty), queues over time, pinned blocks
over time, and job completion time per job. Each chart's data is kept as JSON on its element.
"""

from __future__ import annotations

import html
import json
from typing import Any

from conformance.sched.report.charts import page_script
from conformance.study.continuum import Study

COLORS = {"fcfs": "#0969da", "continuum": "#bf3989"}
STYLE = """body{font:14px system-ui,sans-serif;margin:24px;max-width:1200px;color:#1f2328}
table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #d0d7de;padding:4px 8px;
text-align:right}th{background:#f6f8fa}td:first-child,th:first-child{text-align:left}
.verdict li{margin:4px 0}.chart{min-height:340px;margin:18px 0}"""


def _layout(title: str, xaxis: str, yaxis: str, **extra: Any) -> dict[str, Any]:
    return {"title": {"text": title, "x": 0, "font": {"size": 14}}, "height": 340,
            "margin": {"l": 56, "r": 16, "t": 40, "b": 80}, "hovermode": "x unified",
            "plot_bgcolor": "white", "paper_bgcolor": "white",
            "xaxis": {"title": {"text": xaxis}, "gridcolor": "#eaeef2", "showline": True},
            "yaxis": {"title": {"text": yaxis}, "gridcolor": "#eaeef2", "rangemode": "tozero",
                      "showline": True},
            "legend": {"orientation": "h", "y": -0.25, "yanchor": "top"}, **extra}


def _chart(name: str, data: list[dict[str, Any]], layout: dict[str, Any]) -> str:
    figure = html.escape(json.dumps({"data": data, "layout": layout}, separators=(",", ":")),
                         quote=True)
    return f"<div class='chart' id='{name}' data-figure=\"{figure}\"></div>"


def _line(name: str, values: list[int], color: str, dash: str = "solid",
          fill: str | None = None) -> dict[str, Any]:
    trace: dict[str, Any] = {"type": "scatter", "mode": "lines", "name": name,
                             "x": list(range(len(values))), "y": values,
                             "line": {"color": color, "width": 1.6, "dash": dash}}
    if fill:
        trace["fill"] = fill
    return trace


def charts(study: Study) -> list[str]:
    fcfs, cont = study.runs
    out = []
    for run in study.runs:
        s = run.series
        out.append(_chart(f"blocks-{run.policy}", [
            _line("active", s["active"], "#1a7f37", fill="tozeroy"),
            _line("of which pinned", s["pinned"], "#bf3989", fill="tozeroy"),
            _line("cached (free, evictable)", s["cached"], "#9a6700"),
            _line("empty", s["empty"], "#8c959f", dash="dot"),
        ], _layout(f"Blocks over time: {run.policy}", "step", "blocks")))
    out.append(_chart("queues", [
        _line(f"{r.policy} {q}", r.series[q], COLORS[r.policy],
              dash="solid" if q == "running" else "dash")
        for r in study.runs for q in ("running", "waiting")
    ], _layout("Queues over time", "step", "requests")))
    out.append(_chart("pinned", [_line("pinned blocks", cont.series["pinned"], "#bf3989",
                                       fill="tozeroy")],
                      _layout("Pinned blocks over time (continuum)", "step", "blocks")))
    jobs = sorted(fcfs.jct_steps)
    out.append(_chart("jct", [
        {"type": "bar", "name": r.policy, "x": jobs, "y": [r.jct_steps[j] for j in jobs],
         "marker": {"color": COLORS[r.policy]}} for r in study.runs
    ], _layout("Job completion time per job", "job", "steps", barmode="group")))
    return out


def render(study: Study) -> str:
    step_ms = study.workload.step_ms or 1.0
    rows = [r.summary(step_ms) for r in study.runs]
    keys = [k for k in rows[0] if k != "policy"]
    table = "<table><tr><th>metric</th>" + "".join(
        f"<th>{html.escape(r['policy'])}</th>" for r in rows) + "</tr>"
    for key in keys:
        cells = "".join(f"<td>{_fmt(r[key])}</td>" for r in rows)
        table += f"<tr><td>{html.escape(key)}</td>{cells}</tr>"
    table += "</table>"
    verdict = "".join(f"<li>{html.escape(line)}</li>" for line in study.verdict())
    config = html.escape(json.dumps(study.workload.config.to_dict(), sort_keys=True))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Continuum study: "
            f"{html.escape(study.workload.name)}</title><style>{STYLE}</style></head><body>"
            f"<h1>Continuum vs FCFS on {html.escape(study.workload.name)}</h1>"
            f"<p>{len(study.runs[0].jct_steps)} jobs, {step_ms:g} ms per step; both runs on "
            f"the twin (integrity checked after every step).</p>"
            f"<ul class='verdict'>{verdict}</ul>{table}{''.join(charts(study))}"
            f"<details><summary>engine config</summary><pre>{config}</pre></details>"
            f"{page_script()}</body></html>")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    return html.escape(str(value))
