"""The conformance report as one self-contained HTML page (inline CSS, plotly.js embedded once).

Per workload: the verdict at the requested level, the level reached, the steps compared, the
engine config, what the workload is there to cover, and for a divergence the view of
`divergence` (id to paste, distinct diffs, records before it, block timeline, traces).
Charts (`charts`) show active / cached / empty blocks and queue depths over steps for both
systems, with a marker at the divergence. A stalled run shows "stalled at step N" beside its
verdict and a table of both systems' queues and blocks. The page is laid out for 1280 px and
narrower: wide content (diffs, block tables) scrolls inside its own box, never the page.
Times are per workload; upstream's start-up is shown once in the header, not charged to the
first workload.
"""

from __future__ import annotations

import html
from typing import Any

from conformance.sched.report.charts import chart, page_script
from conformance.sched.report.divergence import render_config, render_divergences, render_traces

_COLORS = {"passed": "#1a7f37", "known": "#9a6700", "failed": "#cf222e", "error": "#cf222e",
           "unbuilt": "#cf222e"}
_STYLE = """
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:0 auto;padding:1.5em;max-width:1240px;
color:#1f2328}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #d0d7de;padding:3px 8px;vertical-align:top;text-align:left}
th{background:#f6f8fa}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0}
.badge{font-weight:bold}
section{border-top:2px solid #d0d7de;margin-top:2em;padding-top:.5em}
.scroll{overflow-x:auto;max-width:100%}
.note{color:#57606a;font-size:90%}
.paste{background:#fff8c5;border:1px solid #d4a72c;padding:.5em 1em;margin:.5em 0}
.divergence-id{font-size:110%;font-weight:bold}
.same{color:#57606a}
table.diff{font-family:ui-monospace,monospace;font-size:12px}
table.diff td{border:none;padding:0 4px;white-space:pre-wrap;word-break:break-all}
.diff_header{background:#f6f8fa;color:#57606a}
.diff_next{display:none}
.diff_add{background:#dafbe1}
.diff_chg{background:#fff8c5}
.diff_sub{background:#ffebe9}
table.blocks td.changed{outline:2px solid #cf222e;outline-offset:-2px}
table.blocks td.differs{outline:2px solid #bc4c00;outline-offset:-2px}
table.blocks tr.fact td,table.blocks tr.fact th{background:#f6f8fa;font-size:90%}
table.config th{font-weight:normal;color:#57606a}
.chart{width:100%;min-height:300px}
.grid{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1em}
@media (max-width:900px){.grid{grid-template-columns:minmax(0,1fr)}}
"""
_COPY = ("document.querySelectorAll('button.copy').forEach(function(b){b.onclick=function(){"
         "if(navigator.clipboard){navigator.clipboard.writeText(b.dataset.copy);}"
         "b.textContent='copied';};});")


def render(report: dict[str, Any]) -> str:
    rows = []
    for w in report["workloads"]:
        color = _COLORS.get(w["verdict"], "#57606a")
        decisive = _decisive(w)
        where = "-" if decisive is None else (
            f"step {decisive['step']}, <code>{_e(decisive['field'])}</code>")
        rows.append(
            f"<tr><td><a href='#{_anchor(w['workload'])}'>{_e(w['workload'])}</a></td>"
            f"<td class='badge' style='color:{color}'>{w['verdict']}{_stall_badge(w)}</td>"
            f"<td>{_e(w['level_reached'] or 'none')}</td><td>{w['steps']}</td>"
            f"<td>{where}</td><td>{w['seconds']:.1f}s</td></tr>")
    stale = "".join(f"<li><code>{_e(k['id'])}</code> ({k['level']}): {_e(k['reason'])}</li>"
                    for k in report["stale_known_divergences"])
    stale_html = (f"<p style='color:#cf222e'>Stale known divergences (matched nothing):</p>"
                  f"<ul>{stale}</ul>" if stale else "")
    verdict = "ok" if report["ok"] else "FAILED"
    startup = report.get("startup_seconds") or 0
    startup_html = (f" Upstream start-up (importing torch and vllm): {startup:.1f}s, not "
                    "counted in any workload's time." if startup else "")
    run = report.get("run_id")
    run_html = (f" Run <code>{_e(run)}</code> (<a href='../index.html'>all runs</a>)."
                if run else "")
    sections = "".join(_workload(w, report) for w in report["workloads"])
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>vtwin conform: {_e(report['left'])} vs {_e(report['right'])}</title>
<style>{_STYLE}</style></head><body>
<h1>vtwin conform: {_e(report['left'])} vs {_e(report['right'])}</h1>
<p>Level <b>{_e(report['level'])}</b>; verdict <b class='verdict'>{verdict}</b>;
generated {_e(report['generated'])}.{run_html}{startup_html} Levels: <i>exact</i> (every
field), <i>renamed</i> (block ids up to one bijection), <i>schedule</i> (token counts,
preemptions, finishes).</p>
{stale_html}
<table><tr><th>workload</th><th>verdict</th><th>level reached</th><th>steps</th>
<th>first divergence</th><th>time</th></tr>
{''.join(rows)}</table>
{sections}
{page_script()}<script>{_COPY}</script>
</body></html>
"""


def _decisive(w: dict[str, Any]) -> dict[str, Any] | None:
    """The divergence that decided the verdict, else the first one found at any level."""
    divergences = w["divergences"]
    return next((d for d in divergences if d["level"] == w["level"]),
                divergences[0] if divergences else None)


def _workload(w: dict[str, Any], report: dict[str, Any]) -> str:
    color = _COLORS.get(w["verdict"], "#57606a")
    left, right = report["left"], report["right"]
    covers = w.get("covers")
    about = (f"<p><b>Covers:</b> {_e(covers)}.</p><p class='note'>Built from: "
             f"{_e(w['description'])}</p>" if covers else f"<p>{_e(w['description'])}</p>")
    parts = [
        f"<section id='{_anchor(w['workload'])}' class='workload' "
        f"data-verdict='{_e(w['verdict'])}'><h2>{_e(w['workload'])} "
        f"<span class='badge' style='color:{color}'>{w['verdict']}{_stall_badge(w)}</span>"
        "</h2>", about,
        "<div class='grid'><div><table>"
        f"<tr><th>requests</th><td>{w['requests']}</td></tr>"
        f"<tr><th>steps compared</th><td>{w['steps']}</td></tr>"
        f"<tr><th>level reached</th><td>{_e(w['level_reached'] or 'none')}</td></tr>"
        f"<tr><th>time</th><td>{w['seconds']:.1f}s</td></tr></table>{render_traces(w)}"
        f"</div><div>{render_config(w.get('config'))}</div></div>",
    ]
    if w["error"] and not w.get("stall"):  # a stall's error is its stall line, below
        parts.append(f"<p style='color:#cf222e'>{_e(w['error'])}</p>"
                     f"<details><summary>traceback</summary><pre>{_e(w['error_detail'] or '')}"
                     "</pre></details>")
    if w.get("stall"):
        parts.append(_stall(w))
    if w.get("unbuilt"):  # a setup error: nothing was compared
        parts.append(f"<p style='color:#cf222e'>{_e(w['unbuilt'])}</p>")
    for agreed in ("refused", "same_failure"):  # agreement, shown as a quiet note
        if w.get(agreed):
            parts.append(f"<p style='color:#57606a'>{_e(w[agreed])}</p>")
    parts.append(render_divergences(w, left, right))
    decisive = _decisive(w)
    marker = None if decisive is None else (
        decisive["step"], f"divergence ({decisive['level']}) at step {decisive['step']}")
    s_left, s_right = w["series"]["left"], w["series"]["right"]
    parts.append("<div class='grid'>" + chart("KV-cache blocks", [
        ("active", "#cf222e", s_left["active"], s_right["active"]),
        ("cached", "#0969da", s_left["cached"], s_right["cached"]),
        ("empty", "#1a7f37", s_left["empty"], s_right["empty"]),
    ], left, right, marker) + chart("queue depth", [
        ("running", "#8250df", s_left["running"], s_right["running"]),
        ("waiting", "#bf8700", s_left["waiting"], s_right["waiting"]),
    ], left, right, marker) + _offload_charts(s_left, s_right, left, right, marker) + "</div>")
    parts.append("</section>")
    return "".join(parts)


def _offload_charts(s_left: dict[str, Any], s_right: dict[str, Any], left: str, right: str,
                    marker: tuple[int, str] | None) -> str:
    """The CPU tier's pool split three ways (seed 003, section 8: `free` alone hides what it
    holds) and the blocks each step loads and stores; nothing without a CPU tier."""
    if "cpu_active" not in s_left or "cpu_active" not in s_right:
        return ""
    return chart("CPU tier blocks", [
        ("active", "#cf222e", s_left["cpu_active"], s_right["cpu_active"]),
        ("cached", "#0969da", s_left["cpu_cached"], s_right["cpu_cached"]),
        ("empty", "#1a7f37", s_left["cpu_empty"], s_right["cpu_empty"]),
    ], left, right, marker) + chart("blocks moved per step", [
        ("loaded (CPU to GPU)", "#8250df", s_left["loaded_blocks"], s_right["loaded_blocks"]),
        ("stored (GPU to CPU)", "#bf8700", s_left["stored_blocks"], s_right["stored_blocks"]),
    ], left, right, marker)


def _stall_badge(w: dict[str, Any]) -> str:
    if w.get("refused"):
        return " (config refused by both)"
    if w.get("same_failure"):
        return " (both stop on an upstream bug)"
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
    return (f"<p style='color:{color}'>{_e(w.get('stalled') or '')}</p><div class='scroll'>"
            "<table><tr><th></th><th>stall</th><th>running</th><th>waiting</th>"
            f"<th>active / cached / empty</th></tr>{''.join(rows)}</table></div>")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _anchor(name: str) -> str:
    return "w-" + "".join(c if c.isalnum() else "-" for c in name)
