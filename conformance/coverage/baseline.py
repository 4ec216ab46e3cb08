"""The ratchet: the focus files' coverage may not fall below the committed baseline.

The baseline (`conformance/coverage_baseline.json`) holds, per focus file, statement and branch
coverage and the lines executed, for one mode of the run (`gate`: the deterministic gate alone,
what CI measures; the generated families draw new examples every run, so their coverage moves).
A drop fails with the regions that stopped being reached: lines the baseline executed that this
run did not, grouped by upstream function.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.coverage.features import regions
from conformance.coverage.targets import FOCUS_FILES, relative_name
from conformance.paths import HARNESS_DIR
from vtwin.errors import UserError

BASELINE = HARNESS_DIR / "coverage_baseline.json"


def executed_lines(data: dict[str, Any], root: Path) -> dict[str, list[int]]:
    return {relative_name(path, root): sorted(entry["executed_lines"])
            for path, entry in data["files"].items()
            if relative_name(path, root) in FOCUS_FILES}


def make_baseline(summary: dict[str, Any], data: dict[str, Any], root: Path,
                  mode: str) -> dict[str, Any]:
    executed = executed_lines(data, root)
    return {"mode": mode, "vllm": summary["vllm"],
            "files": {r["file"]: {"statement_pct": r["statement_pct"],
                                  "branch_pct": r["branch_pct"],
                                  "executed": executed.get(r["file"], [])}
                      for r in summary["focus"]}}


def load_baseline(path: Path = BASELINE) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no coverage baseline; write one with "
                        "`python -m conformance.coverage --quick --update-baseline`") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not JSON ({err})") from None
    return data


def check(summary: dict[str, Any], data: dict[str, Any], root: Path,
          baseline: dict[str, Any], mode: str) -> list[str]:
    """One line per focus file that fell below the baseline, naming what stopped being
    reached (empty: the ratchet holds). A run of another mode or release is refused."""
    if baseline.get("mode") != mode or baseline.get("vllm") != summary["vllm"]:
        raise UserError(f"the coverage baseline is for mode {baseline.get('mode')!r} on vLLM "
                        f"{baseline.get('vllm')}, this run is {mode!r} on {summary['vllm']}: "
                        "compare like with like")
    now = {r["file"]: r for r in summary["focus"]}
    executed = executed_lines(data, root)
    sources = {relative_name(p, root): p for p in data["files"]}
    drops = []
    for file, base in baseline["files"].items():
        row = now.get(file)
        if row is None:
            drops.append(f"{file}: not measured any more (was {base['statement_pct']}%)")
            continue
        if row["statement_pct"] >= base["statement_pct"] and \
                row["branch_pct"] >= base["branch_pct"]:
            continue
        lost = sorted(set(base["executed"]) - set(executed.get(file, [])))
        source = Path(sources[file]).read_text(encoding="utf-8") if file in sources else ""
        where = ", ".join(f"{g.function} ({g.span})" for g in regions(file, source, lost)) \
            if source else "?"
        drops.append(f"{file}: statements {row['statement_pct']}% (baseline "
                     f"{base['statement_pct']}%), branches {row['branch_pct']}% (baseline "
                     f"{base['branch_pct']}%); no longer reached: {where or 'branches only'}")
    return drops
