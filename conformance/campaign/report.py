"""The campaign report: one self-contained HTML page over a whole store, and the run index.

Per pair of systems (the twin against each release) and family: workloads, steps, failures
by kind (divergences, one-sided stalls, errors and crashed workers), agreed stalls, time; then
every failure class with its count, first seed, one example line and its shrunk regression
file; then every run with its workers and throughput (workloads per minute per core, start-up
excluded: the number that says how many workloads a night of N cores buys).

A campaign run writes the page into its run directory (`rundirs`: `DIR/RUN_ID/report.html`
and `run.json`, `DIR/latest`, `DIR/index.html` over all runs); `vtwin campaign report DIR`
writes it for the store as it is now.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.campaign.store import Store
from conformance.rundirs import INDEX_STYLE, IndexPage, Summary, e, point_latest, read_json
from conformance.rundirs import update_index as update_runs_index

PAGE = "report.html"
PER_FAMILY = """SELECT left, right, family, COUNT(*) AS workloads, SUM(steps) AS steps,
    SUM(outcome = 'diverged') AS diverged, SUM(outcome = 'stalled') AS stalled,
    SUM(outcome IN ('error', 'crashed')) AS errors,
    SUM(outcome IN ('stall-agreed', 'same-failure')) AS agreed,
    SUM(outcome = 'refused') AS refused, SUM(seconds) AS seconds
    FROM results GROUP BY left, right, family ORDER BY left, right, family"""
CLASSES = """SELECT r.left, r.right, r.family, r.signature, COUNT(*) AS workloads,
    MIN(r.seed) AS first_seed, MIN(r.detail) AS detail, g.name AS regression,
    g.requests_before, g.requests_after, g.detail AS shrink
    FROM results r LEFT JOIN regressions g ON g.left = r.left AND g.right = r.right
    AND g.family = r.family AND g.signature = r.signature
    WHERE r.outcome IN ('diverged', 'stalled', 'error', 'crashed')
    GROUP BY r.left, r.right, r.family, r.signature ORDER BY r.left, r.right, r.family"""
RUN_COUNTS = """SELECT run_id, COUNT(DISTINCT systems || '|' || family || '|' || seed) AS tasks,
    COUNT(DISTINCT CASE WHEN outcome IN ('diverged', 'stalled', 'error', 'crashed')
    THEN systems || '|' || family || '|' || seed END) AS failing
    FROM results GROUP BY run_id"""
COUNTS = ("workloads", "steps", "diverged", "stalled", "errors", "agreed", "refused")
INDEX = IndexPage(
    title="vtwin campaigns",
    intro="Each campaign run checks generated workloads on Ray and keeps every result in "
          "<code>campaign.sqlite</code>; a run's page summarises the whole store as it was.",
    headers=("status", "systems", "workloads", "failing", "workers", "workloads/min/core"),
    row=lambda r: [e(r.get("status")), f"<code>{e(r.get('systems'))}</code>",
                   e(r.get("tasks")), e(r.get("failing")), e(r.get("workers")),
                   e(r.get("throughput"))],
    main_page=PAGE)


def throughput(run: dict[str, Any]) -> float | None:
    """Workloads per minute per core of one run row (None: nothing to measure)."""
    busy = (run.get("seconds") or 0) - (run.get("startup_seconds") or 0)
    if not run.get("tasks") or not run.get("workers") or busy <= 0:
        return None
    return round(float(run["tasks"]) / (busy / 60) / float(run["workers"]), 2)


def runs(store: Store) -> list[dict[str, Any]]:
    counts = {r["run_id"]: r for r in store.rows(RUN_COUNTS)}
    out = []
    for run in store.rows("SELECT * FROM runs ORDER BY started, run_id"):
        run["failing"] = counts.get(run["run_id"], {}).get("failing", 0)
        run["throughput"] = throughput(run)
        out.append(run)
    return out


def _table(headers: tuple[str, ...], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(store: Store, run_id: str | None = None, regressions_href: str = "regressions"
           ) -> str:
    pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in store.rows(PER_FAMILY):
        pairs.setdefault((row["left"], row["right"]), []).append(row)
    sections = []
    for (left, right), rows in pairs.items():
        cells = [[e(r["family"]), e(r["workloads"]), e(r["steps"]),
                  _bad(r["diverged"]), _bad(r["stalled"]), _bad(r["errors"]), e(r["agreed"]),
                  e(r["refused"]), f"{r['seconds']:.0f}s"] for r in rows]
        total = {k: sum(r[k] or 0 for r in rows) for k in COUNTS + ("seconds",)}
        cells.append(["<b>all</b>", *(f"<b>{e(total[k])}</b>" for k in COUNTS),
                      f"<b>{total['seconds']:.0f}s</b>"])
        sections.append(f"<h3><code>{e(left)}</code> vs <code>{e(right)}</code></h3>" + _table(
            ("family", "workloads", "steps", "diverged", "one-sided stalls", "errors",
             "agreed stalls", "both refuse", "time"), cells))
    classes = [[f"<code>{e(c['left'])}</code> vs <code>{e(c['right'])}</code>",
                e(c["family"]), f"<code>{e(c['signature'])}</code>", e(c["workloads"]),
                e(c["first_seed"]), e(c["detail"]), _regression(c, regressions_href)]
               for c in store.rows(CLASSES)]
    run_rows = [[("<b>" if r["run_id"] == run_id else "") + f"<code>{e(r['run_id'])}</code>",
                 e(r["status"]), f"<code>{e(r['code'])}</code>", e(r["address"] or "local"),
                 e(r["workers"]), e(r["tasks"]),
                 e(r["failing"]), e(r["seconds"]), e(r["startup_seconds"]),
                 f"<b>{e(r['throughput'])}</b>"] for r in runs(store)]
    total = next(store.rows("SELECT COUNT(DISTINCT systems || '|' || family || '|' || seed) AS n, "
                            "COALESCE(SUM(steps), 0) AS steps FROM results"))
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>vtwin campaign</title><style>{INDEX_STYLE}</style></head><body>
<h1>vtwin campaign</h1>
<p>{e(total['n'])} workloads checked, {e(total['steps'])} steps compared (store
<code>{e(store.path.name)}</code>{f", run <code>{e(run_id)}</code>" if run_id else ""}).
A failure is a divergence at <code>exact</code>, a one-sided stall, an error or a worker that
died on every retry; each class (pair, family, signature) is shrunk once.</p>
<h2>Per release and family</h2>{''.join(sections) or '<p>no results yet</p>'}
<h2>Failure classes</h2>{_table(("pair", "family", "signature", "workloads", "first seed",
                                 "example", "regression"), classes) if classes else
                         '<p class="ok">none</p>'}
<h2>Runs and throughput</h2>
<p>Throughput: workloads per minute per core (worker), start-up (Ray, systems) excluded.
Code: the digest of the harness a run used (sources, Python, Hypothesis), which decides what
each (family, seed) workload is.</p>
{_table(("run", "status", "code", "where", "workers", "workloads", "failing", "seconds",
         "start-up s", "workloads/min/core"), run_rows)}
</body></html>
"""


def _bad(count: int | None) -> str:
    return f"<span class='bad'>{count}</span>" if count else "0"


def _regression(row: dict[str, Any], href: str) -> str:
    if row["regression"] is None:
        return e(row["shrink"] or "not shrunk yet")
    return (f"<a href='{e(href)}/{e(row['regression'])}'><code>{e(row['regression'])}</code>"
            f"</a> ({e(row['requests_before'])} &rarr; {e(row['requests_after'])} requests)")


def write_report(store: Store, path: Path, run_id: str | None = None,
                 regressions_href: str = "regressions") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(store, run_id, regressions_href), encoding="utf-8")
    return path


def publish(store: Store, out: Path, run_dir: Path) -> Path:
    """The run's page and `run.json`, `out/latest` pointing at it, and the index of runs."""
    run = next((r for r in runs(store) if r["run_id"] == run_dir.name), {})
    (run_dir / "run.json").write_text(json.dumps(run, indent=1, default=str),
                                      encoding="utf-8")
    page = write_report(store, run_dir / PAGE, run_dir.name, "../regressions")
    point_latest(out, run_dir)
    update_runs_index(out, summarize, INDEX)
    return page


def summarize(run_dir: Path) -> Summary | None:
    data = read_json(run_dir / "run.json")
    if data is None or "run_id" not in data:
        return None
    return {**data, "id": data["run_id"]}
