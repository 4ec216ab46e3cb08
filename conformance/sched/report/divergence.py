"""The divergence view of one workload: what a reviewer needs to act without opening JSON.

The id to paste into `conformance/divergences.toml` (with a ready entry), one side-by-side diff
per distinct divergence (the `exact` and `renamed` levels usually break at the same step on the
same records: that diff is shown once, and the other level says so), the records before it in
full (collapsible, marked identical where they are), the block timeline around it
(`timeline`) and links to the trace files.
"""

from __future__ import annotations

import difflib
import html
import json
from typing import Any

from conformance.sched.report.timeline import render_timeline


def render_divergences(w: dict[str, Any], left: str, right: str) -> str:
    divergences = w["divergences"]
    if not divergences:
        return ""
    decisive = next((d for d in divergences if d["level"] == w["level"]), divergences[0])
    parts = [_paste_box(decisive, w)]
    shown: dict[str, str] = {}
    for d in divergences:
        key = json.dumps([d["step"], d["left_record"], d["right_record"]], sort_keys=True)
        if key in shown:
            parts.append(f"<p class='same'>At level <b>{_e(d['level'])}</b>: the same step "
                         f"{d['step']} and records as level {_e(shown[key])}, field "
                         f"<code>{_e(d['field'])}</code>.</p>")
            continue
        shown[key] = d["level"]
        parts.append(_one(d, left, right))
    parts.append(render_timeline(w.get("timeline"), (left, right)))
    return "".join(parts)


def _paste_box(d: dict[str, Any], w: dict[str, Any]) -> str:
    entry = (f'[[divergence]]\nid = "{d["id"]}"\nlevel = "{d["level"]}"\n'
             'reason = "WHY this difference is acceptable"')
    known = w.get("known")
    status = (f"Waived by <code>{_e(known['id'])}</code>: {_e(known['reason'])}" if known
              else "To accept it, add this entry to <code>conformance/divergences.toml</code>:")
    return (f"<div class='paste'><p>Divergence id <code class='divergence-id'>{_e(d['id'])}"
            f"</code> <button type='button' class='copy' data-copy='{_e(d['id'])}'>copy id"
            f"</button></p><p>{status}</p><pre class='toml'>{_e(entry)}</pre></div>")


def _one(d: dict[str, Any], left: str, right: str) -> str:
    head = (f"<h3>First divergence at level {_e(d['level'])}: step {d['step']}, field "
            f"<code>{_e(d['field'])}</code></h3><div class='scroll'><table class='values'>"
            f"<tr><th></th><th>{_e(left)}</th><th>{_e(right)}</th></tr>"
            f"<tr><th>value</th><td><pre>{_e(_j(d['left']))}</pre></td>"
            f"<td><pre>{_e(_j(d['right']))}</pre></td></tr></table></div>"
            f"<p>Requests involved: {_e(', '.join(d['requests']) or '-')}</p>")
    diff = _side_by_side(d["left_record"], d["right_record"], left, right)
    preceding = "".join(_preceding(p, left, right) for p in d["preceding"])
    if preceding:
        preceding = f"<p>The records before it, in full:</p>{preceding}"
    return (f"{head}<p>The two records at step {d['step']} (only the differing region and "
            f"its context):</p><div class='scroll'>{diff}</div>{preceding}")


def _preceding(p: dict[str, Any], left: str, right: str) -> str:
    a, b = p["left"], p["right"]
    step = (a or b or {}).get("step")
    if a == b:
        return (f"<details><summary>step {step}: identical on both systems</summary>"
                f"<pre class='record'>{_e(_j(a))}</pre></details>")
    return (f"<details><summary>step {step}: records differ</summary><div class='scroll'>"
            f"{_side_by_side(a, b, left, right, context=False)}</div></details>")


def _side_by_side(a: dict[str, Any] | None, b: dict[str, Any] | None, left: str,
                  right: str, context: bool = True) -> str:
    a_lines = _j(a).splitlines() if a is not None else ["(ended)"]
    b_lines = _j(b).splitlines() if b is not None else ["(ended)"]
    return difflib.HtmlDiff(wrapcolumn=60).make_table(
        a_lines, b_lines, fromdesc=html.escape(left), todesc=html.escape(right),
        context=context, numlines=4)


def render_traces(w: dict[str, Any]) -> str:
    traces = w.get("traces") or []
    if not traces:
        return ("<p class='note'>No traces for this run (<code>--traces</code> writes each "
                "step's state and events per system).</p>")
    links = " · ".join(f"<a href='{_e(t)}'>{_e(t.rsplit('/', 1)[-1])}</a>" for t in traces)
    return f"<p>Traces: {links}</p>"


def render_config(config: dict[str, Any] | None) -> str:
    if not config:
        return ""
    cells = "".join(f"<tr><th>{_e(k)}</th><td><code>{_e(_compact(v))}</code></td></tr>"
                    for k, v in config.items())
    return (f"<details class='config' open><summary>Engine config</summary>"
            f"<table class='config'>{cells}</table></details>")


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))


def _j(value: Any) -> str:
    return json.dumps(value, indent=1)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
