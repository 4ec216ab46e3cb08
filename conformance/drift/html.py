"""`drift.html`: the drift JSON (`vtwin drift --report DIR`) as one self-contained page.

What a reader of a drift wants first is the list of difference classes: behavioural ones
before cosmetic ones, and within them the root classes (a workload where the class is the
first thing to differ) before those only seen downstream of an earlier difference, since a
downstream class may be nothing but a consequence. Each class row names its workloads, the
first step and an example (left value against right value); a per-workload table then says
how each run ended on both sides and where the schedules parted. No script, no external
asset: the page opens from a CI artifact as it is.
"""

from __future__ import annotations

import json
from typing import Any

from conformance.rundirs import e

STYLE = """
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:0 auto;padding:1.5em;max-width:1240px;color:#1f2328}
table{border-collapse:collapse;margin:.5em 0;width:100%}
td,th{border:1px solid #d0d7de;padding:3px 8px;vertical-align:top;text-align:left}
th{background:#f6f8fa}
code,.value{font-family:ui-monospace,monospace;font-size:12px;overflow-wrap:anywhere}
td.class code{white-space:nowrap}
.behavioural{color:#cf222e;font-weight:bold}
.cosmetic{color:#57606a}
.known{color:#9a6700}
.note{color:#57606a;font-size:90%}
.scroll{overflow-x:auto;max-width:100%}
"""
EXAMPLE_CHARS = 160


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= EXAMPLE_CHARS else text[:EXAMPLE_CHARS] + "..."


def _startup(seconds: dict[str, float]) -> str:
    return ", ".join(f"{spec} {value:.1f} s" for spec, value in seconds.items()) or "-"


def _order(cls: dict[str, Any]) -> tuple[int, int, str]:
    return (cls["effect"] != "behavioural", not cls["root_in"], cls["class"])


def _class_row(cls: dict[str, Any]) -> str:
    example = cls["example"]
    effect = "known" if cls.get("known") else cls["effect"]
    where = (f"root in {', '.join(map(e, cls['root_in']))}" if cls["root_in"]
             else "downstream only")
    hints = "".join(f"<div class='note'>{e(h)}</div>" for h in cls.get("hints", []))
    return (f"<tr><td class='class'><code>{e(cls['class'])}</code>{hints}</td>"
            f"<td class='{e(effect)}'>{e(effect)}</td><td>{e(cls['kind'])}</td>"
            f"<td>{cls['workloads']} ({e(where)})</td><td>{cls['steps']}</td>"
            f"<td>{e(example['workload'])} step {example['step']}<br>"
            f"<code>{e(example['path'])}</code></td>"
            f"<td class='value'>{e(_value(example['left']))}</td>"
            f"<td class='value'>{e(_value(example['right']))}</td></tr>")


def _workload_row(w: dict[str, Any]) -> str:
    def end(side: dict[str, Any]) -> str:
        detail = f": {side['detail']}" if side.get("detail") else ""
        return f"{side['end']} after step {side['step']}{detail} ({side['steps']} steps)"

    parted = w.get("schedule_parted_at")
    return (f"<tr><td>{e(w['workload'])}</td>"
            f"<td>{e(w.get('first') or '-')}"
            f"{'' if w.get('first_step') is None else ' at step ' + str(w['first_step'])}</td>"
            f"<td>{'-' if parted is None else parted}</td><td>{len(w.get('classes', []))}</td>"
            f"<td>{e(end(w['left']))}</td><td>{e(end(w['right']))}</td></tr>")


def render_drift(data: dict[str, Any]) -> str:
    """The page for one drift JSON document (the shape `run_drift` returns)."""
    summary, timing = data["summary"], data["timing"]
    classes = sorted(data["classes"], key=_order)
    ignored = data["ignored"]["fields"]
    head = (f"<h1>Drift: {e(data['left'])} vs {e(data['right'])}</h1>"
            f"<p>{summary['classes']} difference classes ({summary['behavioural']} behavioural, "
            f"{summary['cosmetic']} cosmetic) in {summary['workloads_differing']} of "
            f"{summary['workloads']} workloads. Systems: {e(data['systems']['left'])} / "
            f"{e(data['systems']['right'])}.</p>"
            f"<p class='note'>start-up {e(_startup(timing['startup_seconds']))}; per step "
            f"{timing['ms_per_step']['left']} ms (left) vs {timing['ms_per_step']['right']} ms "
            f"(right); wall {timing['wall_seconds']} s"
            f"{'; ignored fields: ' + e(', '.join(ignored)) if ignored else ''}</p>")
    for unbuilt in data.get("unbuilt", ()):  # setup errors, never classes
        head += (f"<p class='unbuilt' style='color:#cf222e'>error: {e(unbuilt['reason'])} "
                 f"(not run: {e(', '.join(unbuilt['workloads']))})</p>")
    class_table = ("<h2>Difference classes</h2><p class='note'>Behavioural first; a class "
                   "with a root workload is the first difference there, a downstream-only "
                   "class may be a consequence of an earlier one.</p><div class='scroll'>"
                   "<table><tr><th>class</th><th>effect</th><th>kind</th><th>workloads</th>"
                   "<th>steps</th><th>first example</th><th>left</th><th>right</th></tr>"
                   + "".join(map(_class_row, classes)) + "</table></div>"
                   if classes else "<h2>No difference</h2>")
    workload_table = ("<h2>Workloads</h2><div class='scroll'><table><tr><th>workload</th>"
                      "<th>first difference</th><th>schedules part at step</th>"
                      "<th>classes</th><th>left ended</th><th>right ended</th></tr>"
                      + "".join(map(_workload_row, data["workloads"])) + "</table></div>")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>drift {e(data['left'])} vs {e(data['right'])}</title>"
            f"<style>{STYLE}</style></head><body>{head}{class_table}{workload_table}"
            "</body></html>")
