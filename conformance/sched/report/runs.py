"""`reports/conformance/index.html`: every run directory, newest first, with its verdict.

Rebuilt from the run directories after each run (`report.update_runs_index`), so it can only
link to reports that exist. Each row links the run's lockstep page (`conform.html`), its
differential-test page (`index.html`, written by `nox -s conformance`) and upstream's log.
"""

from __future__ import annotations

from typing import Any

from conformance.rundirs import INDEX_STYLE, e


def render_runs(runs: list[dict[str, Any]], latest: str | None) -> str:
    rows = "".join(_row(run, run["id"] == latest) for run in runs)
    latest_html = (f"<p>Latest run: <a href='latest/conform.html'>{e(latest)}</a> "
                   "(<code>reports/conformance/latest</code> points at it).</p>"
                   if latest else "")
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>vtwin conformance runs</title><style>{INDEX_STYLE}</style></head><body>
<h1>vtwin conformance runs</h1>
{latest_html}
<p>Each run has a directory of its own; nothing is overwritten. <i>lockstep</i>: the
workloads run side by side with upstream vLLM (<code>vtwin conform</code> / <code>gate</code>);
<i>tests</i>: the differential test suite (<code>nox -s conformance</code>).</p>
<table><thead><tr><th>run</th><th>generated</th><th>command</th><th>lockstep</th>
<th>tests</th><th>pages</th></tr></thead><tbody>{rows}</tbody></table>
</body></html>
"""


def _row(run: dict[str, Any], latest: bool) -> str:
    files = set(run.get("files", []))
    lockstep = "-"
    if "workloads" in run:
        cls = "ok" if run.get("ok") else "bad"
        lockstep = (f"<span class='{cls}'>{run['reached']}/{run['workloads']}</span> at "
                    f"{e(run.get('level'))} ({e(run.get('systems'))})")
    tests = "-"
    if "tests" in run:
        t = run["tests"]
        bad = t["failed"] + t["error"]
        tests = (f"<span class='{'bad' if bad else 'ok'}'>{t['passed']} passed, {bad} failed"
                 f"</span>, {t['skipped']} skipped")
    links = [f"<a href='{e(run['id'])}/{name}'>{label}</a>"
             for name, label in (("conform.html", "lockstep"), ("index.html", "tests"),
                                 ("upstream.log", "upstream log")) if name in files]
    mark = " <b>(latest)</b>" if latest else ""
    return (f"<tr><td><code>{e(run['id'])}</code>{mark}</td><td>{e(run.get('generated'))}"
            f"</td><td>{e(run.get('command') or 'nox -s conformance')}</td><td>{lockstep}</td>"
            f"<td>{tests}</td><td>{' · '.join(links) or '-'}</td></tr>")
