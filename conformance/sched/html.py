"""The conformance report as one self-contained HTML page (inline CSS and SVG, no scripts).

Per workload: the verdict at the requested level, the level reached, the steps compared, the
first divergence as a side-by-side diff of the two step records (with the records before it
folded away), and plots over steps of active / cached / empty blocks and of queue depths, the
left system drawn solid and the right one dashed (identical runs draw one line). A stalled run
shows "stalled at step N" beside its verdict and a table of both systems' queues and blocks.
"""

from __future__ import annotations

import difflib
import html
import json
from typing import Any

_COLORS = {"passed": "#1a7f37", "known": "#9a6700", "failed": "#cf222e", "error": "#cf222e"}
_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#1f2328}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #d0d7de;padding:3px 8px;vertical-align:top;text-align:left}
pre{white-space:pre-wrap;margin:0}
.badge{font-weight:bold}
section{border-top:2px solid #d0d7de;margin-top:2em;padding-top:.5em}
table.diff{font-family:ui-monospace,monospace;font-size:12px}
table.diff td{border:none;padding:0 4px;white-space:pre-wrap;word-break:break-all}
.diff_header{background:#f6f8fa;color:#57606a}
.diff_next{display:none}
.diff_add{background:#dafbe1}
.diff_chg{background:#fff8c5}
.diff_sub{background:#ffebe9}
svg text{font-size:11px;fill:#57606a}
"""


def render(report: dict[str, Any]) -> str:
    rows = []
    for w in report["workloads"]:
        color = _COLORS.get(w["verdict"], "#57606a")
        rows.append(
            f"<tr><td><a href='#{_anchor(w['workload'])}'>{_e(w['workload'])}</a></td>"
            f"<td class='badge' style='color:{color}'>{w['verdict']}{_stall_badge(w)}</td>"
            f"<td>{_e(w['level_reached'] or 'none')}</td><td>{w['steps']}</td>"
            f"<td>{w['seconds']:.1f}s</td></tr>")
    stale = "".join(f"<li><code>{_e(k['id'])}</code> ({k['level']}): {_e(k['reason'])}</li>"
                    for k in report["stale_known_divergences"])
    stale_html = (f"<p style='color:#cf222e'>Stale known divergences (matched nothing):</p>"
                  f"<ul>{stale}</ul>" if stale else "")
    verdict = "ok" if report["ok"] else "FAILED"
    sections = "".join(_workload(w, report) for w in report["workloads"])
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>vtwin conform: {_e(report['left'])} vs {_e(report['right'])}</title>
<style>{_STYLE}</style></head><body>
<h1>vtwin conform: {_e(report['left'])} vs {_e(report['right'])}</h1>
<p>Level <b>{_e(report['level'])}</b>; verdict <b>{verdict}</b>;
generated {_e(report['generated'])}. Levels: <i>exact</i> (every field),
<i>renamed</i> (block ids up to one bijection), <i>schedule</i> (token counts,
preemptions, finishes).</p>
{stale_html}
<table><tr><th>workload</th><th>verdict</th><th>level reached</th><th>steps</th><th>time</th></tr>
{''.join(rows)}</table>
{sections}
</body></html>
"""


def _workload(w: dict[str, Any], report: dict[str, Any]) -> str:
    color = _COLORS.get(w["verdict"], "#57606a")
    parts = [
        f"<section id='{_anchor(w['workload'])}'><h2>{_e(w['workload'])} "
        f"<span class='badge' style='color:{color}'>{w['verdict']}{_stall_badge(w)}</span>"
        "</h2>",
        f"<p>{_e(w['description'])}</p>",
        "<table>"
        f"<tr><th>requests</th><td>{w['requests']}</td></tr>"
        f"<tr><th>steps compared</th><td>{w['steps']}</td></tr>"
        f"<tr><th>level reached</th><td>{_e(w['level_reached'] or 'none')}</td></tr>"
        f"<tr><th>time</th><td>{w['seconds']:.1f}s</td></tr></table>",
    ]
    if w["known"] is not None:
        parts.append(f"<p>Known divergence <code>{_e(w['known']['id'])}</code>: "
                     f"{_e(w['known']['reason'])}</p>")
    if w["error"] and not w.get("stall"):  # a stall's error is its stall line, below
        parts.append(f"<p style='color:#cf222e'>{_e(w['error'])}</p>"
                     f"<details><summary>traceback</summary><pre>{_e(w['error_detail'] or '')}"
                     "</pre></details>")
    if w.get("stall"):
        parts.append(_stall(w))
    for d in w["divergences"]:
        parts.append(_divergence(d, report["left"], report["right"]))
    left, right = w["series"]["left"], w["series"]["right"]
    parts.append(line_chart("KV-cache blocks", [
        ("active", "#cf222e", left["active"], right["active"]),
        ("cached", "#0969da", left["cached"], right["cached"]),
        ("empty", "#1a7f37", left["empty"], right["empty"]),
    ], report["left"], report["right"]))
    parts.append(line_chart("queue depth", [
        ("running", "#8250df", left["running"], right["running"]),
        ("waiting", "#bf8700", left["waiting"], right["waiting"]),
    ], report["left"], report["right"]))
    parts.append("</section>")
    return "".join(parts)


def _stall_badge(w: dict[str, Any]) -> str:
    stall = w.get("stall")
    if not stall:
        return ""
    who = "both" if stall["side"] == "both" else stall[stall["side"]]["system"]
    return f" ({_e(who)} stalled at step {stall['step']})"


def _stall(w: dict[str, Any]) -> str:
    """The stall line, then per side: reason, queues and block counts at that step."""
    stall = w["stall"]
    color = "#57606a" if stall["agreed"] else "#cf222e"
    rows = []
    for side in ("left", "right"):
        x = stall[side]
        b = x["blocks"]
        rows.append(
            f"<tr><th>{_e(x['system'])}</th><td>{_e(x['reason'] or 'did not stall')}</td>"
            f"<td>{_e(', '.join(x['running']) or '-')}</td>"
            f"<td>{_e(', '.join(x['waiting']) or '-')}</td>"
            f"<td>{b['active']} / {b['cached']} / {b['empty']}</td></tr>")
    return (f"<p style='color:{color}'>{_e(w.get('stalled') or '')}</p><table><tr><th></th>"
            "<th>stall</th><th>running</th><th>waiting</th><th>active / cached / empty</th></tr>"
            f"{''.join(rows)}</table>")


def _divergence(d: dict[str, Any], left: str, right: str) -> str:
    head = (f"<h3>First divergence at level {_e(d['level'])}: step {d['step']}, "
            f"field <code>{_e(d['field'])}</code></h3>"
            f"<table><tr><th></th><th>{_e(left)}</th><th>{_e(right)}</th></tr>"
            f"<tr><th>value</th><td><pre>{_e(_j(d['left']))}</pre></td>"
            f"<td><pre>{_e(_j(d['right']))}</pre></td></tr></table>"
            f"<p>Requests involved: {_e(', '.join(d['requests']) or '-')}</p>")
    diff = _side_by_side(d["left_record"], d["right_record"], left, right)
    preceding = "".join(
        f"<details><summary>step {p['left'].get('step')}</summary>"
        f"{_side_by_side(p['left'], p['right'], left, right)}</details>"
        for p in d["preceding"])
    if preceding:
        preceding = f"<p>Preceding records:</p>{preceding}"
    return f"{head}<p>The two records at step {d['step']}:</p>{diff}{preceding}"


def _side_by_side(a: dict[str, Any] | None, b: dict[str, Any] | None, left: str,
                  right: str) -> str:
    a_lines = _j(a).splitlines() if a is not None else ["(ended)"]
    b_lines = _j(b).splitlines() if b is not None else ["(ended)"]
    return difflib.HtmlDiff(wrapcolumn=70).make_table(
        a_lines, b_lines, fromdesc=html.escape(left), todesc=html.escape(right),
        context=True, numlines=4)


def line_chart(title: str, lines: list[tuple[str, str, list[int], list[int]]],
               left: str, right: str, width: int = 760, height: int = 200) -> str:
    """Inline SVG: one colored line per series, left system solid, right dashed."""
    pad_l, pad_r, pad_t, pad_b = 48, 12, 22, 22
    steps = max((len(v) for _, _, a, b in lines for v in (a, b)), default=0)
    top = max((max(v, default=0) for _, _, a, b in lines for v in (a, b)), default=0) or 1
    plot_w, plot_h = width - pad_l - pad_r, height - pad_t - pad_b

    def points(values: list[int]) -> str:
        if not values:
            return ""
        stride = max(1, len(values) // plot_w)
        coords = []
        for i in range(0, len(values), stride):
            x = pad_l + (i / max(steps - 1, 1)) * plot_w
            y = pad_t + plot_h - values[i] / top * plot_h
            coords.append(f"{x:.1f},{y:.1f}")
        return " ".join(coords)

    body = [f"<rect x='{pad_l}' y='{pad_t}' width='{plot_w}' height='{plot_h}' "
            "fill='none' stroke='#d0d7de'/>",
            f"<text x='4' y='{pad_t + 8}'>{top}</text>",
            f"<text x='4' y='{pad_t + plot_h}'>0</text>",
            f"<text x='{pad_l}' y='{height - 6}'>step 0</text>",
            f"<text x='{width - pad_r - 70}' y='{height - 6}'>step {max(steps - 1, 0)}</text>",
            f"<text x='{pad_l}' y='14' style='font-weight:bold'>{_e(title)}</text>"]
    legend_x = pad_l + 120
    for label, color, a, b in lines:
        body.append(f"<polyline fill='none' stroke='{color}' stroke-width='1.5' "
                    f"points='{points(a)}'/>")
        body.append(f"<polyline fill='none' stroke='{color}' stroke-width='1.5' "
                    f"stroke-dasharray='5 3' points='{points(b)}'/>")
        body.append(f"<text x='{legend_x}' y='14' style='fill:{color}'>{_e(label)}</text>")
        legend_x += 70
    body.append(f"<text x='{legend_x + 10}' y='14'>solid: {_e(left)}, dashed: {_e(right)}"
                "</text>")
    return (f"<div><svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"viewBox='0 0 {width} {height}'>{''.join(body)}</svg></div>")


def _j(value: Any) -> str:
    return json.dumps(value, indent=1)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _anchor(name: str) -> str:
    return "w-" + "".join(c if c.isalnum() else "-" for c in name)
