"""Benchmark runs, each in a directory of its own: `reports/benchmarks/<run id>/`.

A quick pass used to write `reports/benchmarks.md` and `.json` in place, so each run replaced
the last one's numbers and a regression could only be seen by remembering them. Now every run
keeps `benchmarks.json` (the records), `benchmarks.md` (the report) and `run.json` (what the
index shows: date, commit, machine, how many cases are slower than upstream, targets met),
`reports/benchmarks/latest` points at the newest, and `reports/benchmarks/index.html` lists
them all (`conformance.rundirs`). asv's own history site stays in `reports/asv/`: it is
rebuilt from every commit asv measured, so it never loses a run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.rundirs import IndexPage, Summary, e, read_json, update_index

from .measure import Result

ROOT = Path("reports") / "benchmarks"
RUN_FILE = "run.json"


def run_json(results: Sequence[Result], env: dict[str, Any], left_out: Sequence[str],
             asv_commit: str | None, command: str) -> dict[str, Any]:
    """The run's summary: what a reader scanning the runs wants before opening one."""
    targeted = [r for r in results if r.target is not None]
    return {
        "format": "vtwin-bench-run/1", "command": command, "generated": env.get("date"),
        **{k: env.get(k) for k in ("commit", "machine", "python", "rounds", "seconds")},
        "cases": len(results),
        "slower": [r.name for r in results if r.speedup < 1],
        "targets_met": sum(bool(r.met) for r in targeted),
        "targets": len(targeted),
        "left_out": list(left_out),
        "asv_commit": asv_commit,
    }


def write_run(run_dir: Path, results: Sequence[Result], markdown: str,
              summary: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "benchmarks.json").write_text(
        json.dumps([r.to_json() for r in results], indent=2) + "\n", encoding="utf-8")
    (run_dir / "benchmarks.md").write_text(markdown, encoding="utf-8")
    (run_dir / RUN_FILE).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


def summarize(path: Path) -> Summary | None:
    data = read_json(path / RUN_FILE)
    if data is None or not str(data.get("format", "")).startswith("vtwin-bench-run/"):
        return None
    return {"id": path.name, **data}


def _row(run: Summary) -> list[str]:
    slower = run.get("slower") or []
    slower_html = (f"<span class='bad'>{len(slower)}</span>: "
                   + ", ".join(f"<code>{e(n)}</code>" for n in slower[:6])
                   + (", ..." if len(slower) > 6 else "")) if slower else \
        "<span class='ok'>none</span>"
    met, total = run.get("targets_met", 0), run.get("targets", 0)
    targets = f"<span class='{'ok' if met == total else 'bad'}'>{met}/{total}</span>"
    left = len(run.get("left_out") or [])
    links = f"<a href='{e(run['id'])}/benchmarks.md'>md</a> · " \
            f"<a href='{e(run['id'])}/benchmarks.json'>json</a>"
    return [e(run.get("generated")), f"<code>{e(run.get('commit'))}</code>",
            e(run.get("machine")), str(run.get("cases", 0)) + (f" ({left} left out)" if left
                                                                 else ""),
            slower_html, targets, links]


INDEX = IndexPage(
    title="vtwin benchmark runs",
    intro="Each run is the quick pass (<code>vtwin bench --quick</code>, <code>nox -s "
          "benchmarks</code>): impl and upstream vLLM interleaved in one process, impl / "
          "upstream ratios of medians. asv's per-commit history is in "
          "<a href='../asv/index.html'>reports/asv</a> (<code>nox -s asv</code>).",
    headers=("generated", "commit", "machine", "cases", "slower than upstream", "targets met",
             "files"),
    row=_row,
    main_page="benchmarks.md",
)


def update_runs_index(root: Path = ROOT) -> Path:
    return update_index(root, summarize, INDEX)
