"""The release matrix: every vLLM release the project claims, built and checked in one run.

`nox -s releases` (`python -m conformance.ci.releases`) builds each release's managed
environment, then per release:

* a release the twin follows (`impl.behaviour.FOLLOWED_RELEASES`): the default suite and the
  regressions in lockstep, the twin against that release in its worker (`vtwin gate
  --against vllm==X`), which must reach `exact` everywhere;
* every release: drift against the next release of the list, which must build and run on every
  default workload (no "could not be built") and lists what changed.

It writes `reports/releases/RUN_ID/` (`releases.json`, `releases.md`: the release table
`docs/systems.md` shows), points `reports/releases/latest` at it, and fails when any check
fails. The release list lives here, once: `RELEASES`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from conformance.rundirs import new_run_dir, point_latest, write_text

RELEASES: tuple[str, ...] = ("0.19.1", "0.32.0", "0.33.0")
"""Every release the project claims works as a System, oldest first."""
REPORT_ROOT = Path("reports") / "releases"


@dataclass(frozen=True, slots=True)
class ReleaseRow:
    """One release's line of the matrix."""

    release: str
    vllm: str
    env_seconds: float
    gate: str
    """`exact on N/N` (the twin against it), `not followed` or the failing line."""
    drift_to: str
    drift: str
    """`N classes (B behavioural) in W/T workloads`, or what could not be built."""
    ok: bool


def spec(release: str) -> str:
    return f"vllm=={release}"


def build_env(release: str, out: TextIO) -> tuple[str, float]:
    from conformance.systems.remote.envs import create, env_info

    started = time.monotonic()
    path = create(spec(release), out)
    info = env_info(path) or {}
    return str(info.get("vllm", "?")), time.monotonic() - started


def gate(release: str, out: TextIO, max_steps: int | None) -> tuple[str, bool]:
    """The default suite and regressions, the twin against `release` (followed ones only)."""
    from conformance.sched.conform import run_conform
    from conformance.sched.divergences import DEFAULT_PATH, load_known
    from conformance.sched.suite import gate_workloads
    from impl.behaviour import FOLLOWED_RELEASES

    if release not in FOLLOWED_RELEASES:
        return "not followed (the twin follows " + ", ".join(FOLLOWED_RELEASES) + ")", True
    run = run_conform(gate_workloads(), system="impl", against=spec(release),
                      known=load_known(DEFAULT_PATH), max_steps=max_steps, stream=out)
    good = sum(o.verdict in ("passed", "known") for o in run.outcomes)
    line = f"exact on {good}/{len(run.outcomes)}"
    if run.unbuilt:
        line += "; " + "; ".join(run.unbuilt)
    return line, run.ok


def drift(left: str, right: str, out: TextIO, max_steps: int | None) -> tuple[str, bool]:
    """Drift between two consecutive releases: every default workload must run on both."""
    from conformance.drift.run import default_workloads, run_drift

    data = run_drift(spec(left), spec(right), default_workloads(), max_steps=max_steps, out=out)
    s = data["summary"]
    line = (f"{s['classes']} classes ({s['behavioural']} behavioural) in "
            f"{s['workloads_differing']}/{s['workloads']} workloads")
    refused = [f"{u['reason']} ({', '.join(u['workloads'])})" for u in data["unbuilt"]
               if not deliberate_refusal(u["reason"])]
    deliberate = [w for u in data["unbuilt"] if deliberate_refusal(u["reason"])
                  for w in u["workloads"]]
    if deliberate:
        line += f"; refused by design: {', '.join(deliberate)}"
    line += "".join(f"; {r}" for r in refused)
    return line, not refused


EXPECTED_REFUSALS: tuple[str, ...] = (
    "Mamba prefix caching requires mamba_cache_mode='align'",
)
"""Configs a release itself refuses on purpose (0.33 wants mamba 'align' mode with prefix
caching): named in the matrix like any refusal, but not a broken release."""


def deliberate_refusal(reason: str) -> bool:
    """Whether "SYSTEM could not be built: REASON" is a refusal by design: the adapter's own
    one-line refusal of a field or connector the release lacks (a `UserError`, whose message
    carries no exception type), or one of `EXPECTED_REFUSALS`. Anything else (a pydantic
    ValidationError, an ImportError, an AttributeError) is a broken release."""
    detail = reason.partition(" could not be built: ")[2]
    raised = re.match(r"\w+(Error|Exception|Exit): ", detail)
    return raised is None or any(text in detail for text in EXPECTED_REFUSALS)


def run_matrix(releases: Sequence[str], out: TextIO, max_steps: int | None = None
               ) -> list[ReleaseRow]:
    rows: list[ReleaseRow] = []
    for index, release in enumerate(releases):
        print(f"vtwin releases: [{index + 1}/{len(releases)}] {spec(release)}: environment ...",
              file=out, flush=True)
        vllm, env_seconds = build_env(release, out)
        print(f"vtwin releases: {spec(release)}: the default suite ...", file=out, flush=True)
        gate_line, gate_ok = gate(release, out, max_steps)
        after = releases[index + 1] if index + 1 < len(releases) else None
        drift_line, drift_ok = "-", True
        if after is not None:
            build_env(after, out)
            print(f"vtwin releases: drift {spec(release)} -> {spec(after)} ...", file=out,
                  flush=True)
            drift_line, drift_ok = drift(release, after, out, max_steps)
        row = ReleaseRow(release, vllm, round(env_seconds, 1), gate_line,
                         spec(after) if after else "-", drift_line, gate_ok and drift_ok)
        print(f"vtwin releases: {spec(release)}: {'ok' if row.ok else 'FAILED'}: gate "
              f"{row.gate}; drift to {row.drift_to}: {row.drift}", file=out, flush=True)
        rows.append(row)
    return rows


def render_markdown(rows: Sequence[ReleaseRow], run_id: str) -> str:
    lines = [f"Release matrix `{run_id}` (`nox -s releases`):", "",
             "| release | vLLM | the twin on the default suite | drift to the next release | ok |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{spec(r.release)}` | {r.vllm} | {r.gate} | "
              f"{'' if r.drift_to == '-' else r.drift_to + ': '}{r.drift} | "
              f"{'yes' if r.ok else '**no**'} |" for r in rows]
    return "\n".join(lines) + "\n"


def write_report(rows: Sequence[ReleaseRow], root: Path) -> Path:
    run_dir = new_run_dir(root, "releases")
    data: dict[str, Any] = {"releases": [asdict(r) for r in rows],
                            "ok": all(r.ok for r in rows)}
    write_text(run_dir / "releases.json", json.dumps(data, indent=1) + "\n")
    write_text(run_dir / "releases.md", render_markdown(rows, run_dir.name))
    point_latest(root, run_dir)
    return run_dir


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.ci.releases",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--release", action="append", dest="releases", metavar="X.Y.Z",
                        help=f"only these releases (default: all of {', '.join(RELEASES)})")
    parser.add_argument("--out", type=Path, default=REPORT_ROOT, metavar="DIR")
    parser.add_argument("--max-steps", type=int, default=None, help="cap each workload")
    args = parser.parse_args(argv)
    releases = tuple(args.releases or RELEASES)
    unknown = [r for r in releases if r not in RELEASES]
    if unknown:
        print(f"vtwin releases: error: {unknown[0]} is not a claimed release "
              f"({', '.join(RELEASES)})", file=sys.stderr)
        return 2
    rows = run_matrix(releases, sys.stderr, args.max_steps)
    run_dir = write_report(rows, args.out)
    sys.stderr.write(render_markdown(rows, run_dir.name))
    print(f"vtwin releases: report {run_dir / 'releases.md'}", file=sys.stderr)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
