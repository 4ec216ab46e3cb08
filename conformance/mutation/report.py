"""The mutation score and its report: `mutation.json` and `index.html` in one run's directory
(`reports/mutation/<run id>/`, see `conformance.mutation.runs`).

score = killed / (total - equivalent - not run), in percent. `killed` counts timeouts (the mutant
hangs a test: CI notices); `equivalent` counts surviving mutants the equivalents file accepts;
`not run` counts mutants a bounded run (`--max-minutes`) did not reach. Mutants no killer test
executes ("no tests") are survivors: nothing would notice them.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from conformance.mutation.equivalents import Equivalent, classify
from conformance.mutation.results import NOT_RUN, Mutant


@dataclass(frozen=True, slots=True)
class Summary:
    total: int
    killed: int
    survived: int
    equivalent: int
    not_run: int
    stale: tuple[str, ...] = field(default=())

    @property
    def considered(self) -> int:
        return self.total - self.equivalent - self.not_run

    @property
    def score(self) -> float:
        """Percent of the non-equivalent mutants that ran and were killed (100 if none ran)."""
        return 100.0 * self.killed / self.considered if self.considered else 100.0

    def passes(self, target: float) -> bool:
        return self.score >= target and not self.stale


@dataclass(frozen=True, slots=True)
class Verdict:
    """Each mutant's outcome once the equivalents file is applied."""

    mutants: tuple[Mutant, ...]
    equivalent: dict[str, Equivalent]
    summary: Summary

    def outcome(self, mutant: Mutant) -> str:
        if mutant.detected:
            return "killed"
        if mutant.status == NOT_RUN:
            return "not run"
        return "equivalent" if mutant.id in self.equivalent else "survived"


def judge(mutants: Sequence[Mutant], entries: Sequence[Equivalent]) -> Verdict:
    accepted, stale = classify(mutants, entries)
    by_id = {m.id: m for m in mutants}
    # A single-mutant entry for a mutant the suite now kills is stale too: delete it.
    stale += [e for e in entries if e.kind == "mutant" and e not in stale
              and any(by_id[i].detected for i, w in accepted.items() if w is e)]
    accepted = {i: e for i, e in accepted.items() if not by_id[i].detected}
    counts = Counter("killed" if m.detected else "not run" if m.status == NOT_RUN
                     else "equivalent" if m.id in accepted else "survived" for m in mutants)
    summary = Summary(total=len(mutants), killed=counts["killed"], survived=counts["survived"],
                      equivalent=counts["equivalent"], not_run=counts["not run"],
                      stale=tuple(e.describe() for e in stale))
    return Verdict(tuple(mutants), accepted, summary)


def _summary_dict(summary: Summary, target: float, minutes: float | None,
                  total_minutes: float | None) -> dict[str, object]:
    return {"total": summary.total, "killed": summary.killed, "survived": summary.survived,
            "equivalent": summary.equivalent, "not_run": summary.not_run,
            "score": round(summary.score, 2), "target": target, "passed": summary.passes(target),
            "stale_equivalents": list(summary.stale), "minutes": minutes,
            "minutes_all_runs": total_minutes}


def per_file(verdict: Verdict) -> dict[str, Counter[str]]:
    table: dict[str, Counter[str]] = {}
    for mutant in verdict.mutants:
        table.setdefault(mutant.path, Counter())[verdict.outcome(mutant)] += 1
    return table


def to_json(verdict: Verdict, target: float, minutes: float | None,
            total_minutes: float | None = None) -> dict[str, object]:
    mutants = []
    for m in verdict.mutants:
        entry = verdict.equivalent.get(m.id)
        mutants.append({
            "id": m.id, "path": m.path, "line": m.line, "function": m.qualname,
            "status": m.status, "outcome": verdict.outcome(m), "sha": m.sha,
            "killer": m.killer, "killed_by": m.killed_by if m.detected else None,
            "equivalent_reason": entry.reason if entry is not None else None, "diff": m.diff})
    return {"summary": _summary_dict(verdict.summary, target, minutes, total_minutes),
            "files": {path: dict(c) for path, c in per_file(verdict).items()},
            "killers": dict(Counter(m.killed_by for m in verdict.mutants if m.detected)
                            .most_common()),
            "mutants": mutants}


_CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:1100px}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px}
th{background:#eee}td.n{text-align:right}pre{background:#f6f6f6;padding:6px;overflow:auto}
.del{color:#a00}.add{color:#070}.bad{color:#a00;font-weight:bold}.ok{color:#070}
h3{font-size:14px;margin:1.2em 0 .2em}code{font-size:13px}"""


def _diff_html(diff: str) -> str:
    rows = []
    for line in diff.splitlines():
        css = ("del" if line.startswith("-") and not line.startswith("---") else
               "add" if line.startswith("+") and not line.startswith("+++") else "")
        text = html.escape(line)
        rows.append(f'<span class="{css}">{text}</span>' if css else text)
    return "<pre>" + "\n".join(rows) + "</pre>"


def _where(m: Mutant) -> str:
    return f"{m.path}:{m.line if m.line is not None else '?'}"


def to_html(verdict: Verdict, target: float, minutes: float | None,
            total_minutes: float | None = None) -> str:
    s = verdict.summary
    esc = html.escape
    verdict_css = "ok" if s.passes(target) else "bad"
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>vtwin mutation "
           f"testing</title><style>{_CSS}</style></head><body><h1>Mutation testing</h1>",
           f"<p class='{verdict_css}'>score {s.score:.1f}% (target {target:g}%): "
           f"{s.killed} killed of {s.considered} non-equivalent mutants that ran</p>",
           "<table><tr><th>total</th><th>killed</th><th>survived</th><th>equivalent</th>"
           f"<th>not run</th><th>minutes (this run)</th><th>minutes (all runs)</th></tr>"
           f"<tr><td class=n>{s.total}</td>"
           f"<td class=n>{s.killed}</td><td class=n>{s.survived}</td>"
           f"<td class=n>{s.equivalent}</td><td class=n>{s.not_run}</td>"
           f"<td class=n>{'' if minutes is None else f'{minutes:.1f}'}</td>"
           f"<td class=n>{'' if total_minutes is None else f'{total_minutes:.1f}'}</td>"
           "</tr></table>"]
    if s.stale:
        out.append("<h2 class=bad>Stale equivalent-mutant entries</h2><ul>"
                   + "".join(f"<li><code>{esc(x)}</code></li>" for x in s.stale) + "</ul>")
    out.append("<h2>Per file</h2><table><tr><th>file</th><th>killed</th><th>survived</th>"
               "<th>equivalent</th><th>not run</th></tr>")
    for path, c in sorted(per_file(verdict).items()):
        out.append(f"<tr><td>{esc(path)}</td>" + "".join(
            f"<td class=n>{c[k]}</td>" for k in ("killed", "survived", "equivalent", "not run"))
            + "</tr>")
    out.append("</table>")
    groups = (("Surviving mutants", "survived"), ("Equivalent mutants", "equivalent"))
    for title, outcome in groups:
        chosen = [m for m in verdict.mutants if verdict.outcome(m) == outcome]
        out.append(f"<h2>{title} ({len(chosen)})</h2>")
        for m in chosen:
            entry = verdict.equivalent.get(m.id)
            why = f" — {esc(entry.reason)}" if entry is not None else f" ({esc(m.status)})"
            out.append(f"<h3><code>{esc(_where(m))}</code> {esc(m.qualname)}: "
                       f"<code>{esc(m.id)}</code> sha {m.sha}{why}</h3>{_diff_html(m.diff)}")
    killers = Counter(m.killed_by for m in verdict.mutants if m.detected).most_common()
    out.append("<h2>Killers</h2><table><tr><th>killer</th><th>mutants</th></tr>" + "".join(
        f"<tr><td>{esc(k)}</td><td class=n>{n}</td></tr>" for k, n in killers) + "</table>")
    out.append("<h2>Killed mutants</h2><table><tr><th>where</th><th>mutant</th>"
               "<th>killed by</th></tr>")
    for m in (m for m in verdict.mutants if m.detected):
        out.append(f"<tr><td><code>{esc(_where(m))}</code></td><td><code>{esc(m.id)}</code>"
                   f"</td><td>{esc(m.killed_by)}</td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out)


def write_report(verdict: Verdict, out_dir: Path, target: float,
                 minutes: float | None = None, total_minutes: float | None = None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    data = {"generated": generated, **to_json(verdict, target, minutes, total_minutes)}
    (out_dir / "mutation.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n",
                                           encoding="utf-8")
    (out_dir / "index.html").write_text(to_html(verdict, target, minutes, total_minutes),
                                        encoding="utf-8")
