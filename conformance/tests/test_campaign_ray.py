"""Campaigns on a local Ray with two workers: a planted divergence comes back shrunk, an
interrupted campaign resumes without repeating a workload, a killed worker loses no result.

One Ray instance for the module (starting one costs seconds); each campaign starts its own
two actors on it, as `vtwin campaign` does. The systems are the twin and planted variants of it
(`campaign_planted.py`), so the tests need no vLLM, only Ray.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.campaign.driver import run_campaign
from conformance.campaign.plan import Plan
from conformance.campaign.store import Store
from conformance.campaign.task import TaskResult
from conformance.cli import main
from conformance.sched.lockstep import run_lockstep
from conformance.systems.registry import resolve_system
from conformance.tests.campaign_planted import HANG_FILE, LONG_PROMPT, TEST_DIR_ENV
from workloads import load

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[campaign]'")

PLANTED = "conformance.tests.campaign_planted:planted"
TWIN_AGAIN = "conformance.systems.twin:ImplSystem"


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Ray with 2 CPUs; the directory the planted systems use, known to every worker."""
    shared = tmp_path_factory.mktemp("campaign-shared")
    os.environ[TEST_DIR_ENV] = str(shared)  # inherited by the workers Ray starts
    ray.init(address="local", num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False,
             log_to_driver=False)
    yield shared
    ray.shutdown()
    os.environ.pop(TEST_DIR_ENV, None)


def _results(out: Path) -> list[dict[str, object]]:
    store = Store.of(out)
    try:
        return list(store.rows("SELECT * FROM results ORDER BY family, seed"))
    finally:
        store.close()


def test_planted_divergence_comes_back_shrunk(local_ray: Path, tmp_path: Path) -> None:
    plan = Plan(("impl", PLANTED), ("decode-heavy", "hypothesis"), tmp_path, seeds=(0, 3),
                workers=2)
    summary = run_campaign(plan)
    rows = _results(tmp_path)
    assert summary.tasks == 6 and len(rows) == 6 and summary.workers == 2
    assert len({row["pid"] for row in rows}) == 2  # both workers ran tasks
    heavy = [row for row in rows if row["family"] == "decode-heavy"]
    assert {(row["outcome"], row["signature"]) for row in heavy} == {
        ("diverged", "exact:block_tables")}
    path = next(p for p in map(Path, summary.regressions) if "decode-heavy" in p.name)
    shrunk = load(path)
    assert [(r.prompt_len, r.max_tokens) for r in shrunk.requests] == [(LONG_PROMPT + 1, 1)]
    again = run_lockstep(shrunk, resolve_system("impl"), resolve_system(PLANTED))
    divergence = again.divergence_at("exact")
    assert divergence is not None and divergence.top_field == "block_tables"
    page = (summary.run_dir / "report.html").read_text(encoding="utf-8")
    assert path.name in page and "decode-heavy" in page
    assert (tmp_path / "latest" / "report.html").is_file()
    assert "workloads/min/core" in (tmp_path / "index.html").read_text(encoding="utf-8")


def test_interrupted_campaign_resumes_without_repeating(local_ray: Path, tmp_path: Path
                                                        ) -> None:
    out = tmp_path / "one"
    plan = Plan(("impl", TWIN_AGAIN), ("decode-heavy", "bursty"), out, seeds=(0, 4),
                workers=2)
    arrived: list[TaskResult] = []

    def interrupt(result: TaskResult) -> None:
        arrived.append(result)
        if len(arrived) == 3:
            raise KeyboardInterrupt

    first = run_campaign(plan, on_result=interrupt)
    assert first.status == "interrupted" and first.tasks == 3
    kept = {(row["family"], row["seed"]) for row in _results(out)}
    assert len(kept) == 3
    args = ["campaign", "--systems", f"impl,{TWIN_AGAIN}", "--families", "decode-heavy,bursty",
            "--seeds", "0:4", "--out", str(out), "--workers", "2"]
    assert main(args) == 0
    rows = _results(out)
    assert len(rows) == 8 and {row["outcome"] for row in rows} == {"passed"}
    assert {(row["family"], row["seed"]) for row in rows
            if row["run_id"] == first.run_id} == kept  # the second run did not redo them
    assert main(args) == 0  # a third run finds nothing left
    assert len(_results(out)) == 8
    other = tmp_path / "two"
    assert main([*args[:-4], "--seeds", "4:5", "--out", str(other), "--workers", "2"]) == 0
    assert main(["campaign", "merge", str(out), str(other), "-o", str(tmp_path / "all")]) == 0
    assert len(_results(tmp_path / "all")) == 10
    assert main(["campaign", "report", str(tmp_path / "all")]) == 0
    assert "bursty" in (tmp_path / "all" / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("hanging", ["hang_once", "hang_once+worker"])
def test_killed_worker_loses_no_result(local_ray: Path, tmp_path: Path, hanging: str) -> None:
    """The first schedule() anywhere hangs after writing its pid, and this test kills that
    process: a Ray worker (Ray restarts the actor and retries the task) or, with `+worker`,
    the system's own worker process, as a release's is (the actor starts its systems afresh
    and runs the task again)."""
    marker = local_ray / HANG_FILE
    marker.unlink(missing_ok=True)
    killed: list[int] = []

    def kill_when_hung() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if marker.is_file() and marker.read_text():
                pid = int(marker.read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_hung, daemon=True)
    killer.start()
    plan = Plan(("impl", f"conformance.tests.campaign_planted:{hanging}"), ("decode-heavy",),
                tmp_path, seeds=(0, 4), workers=2)
    summary = run_campaign(plan)
    killer.join(timeout=5)
    rows = _results(tmp_path)
    assert killed, "no worker hung, so none was killed"
    assert summary.tasks == 4 and [(row["seed"], row["outcome"]) for row in rows] == [
        (0, "passed"), (1, "passed"), (2, "passed"), (3, "passed")]
    assert killed[0] not in {row["pid"] for row in rows}  # its task came back from a retry


def test_start_up_is_not_charged_to_the_budget(local_ray: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers that take longer to start than the whole budget still get the budget: the
    clock starts once they are up (on a loaded machine start-up alone once ate a 1-minute
    campaign, which then judged nothing and passed)."""
    from conformance.campaign import driver

    real = driver.start_workers

    def slow_start(plan: Plan) -> object:
        time.sleep(4.0)  # longer than the 3-second budget below
        return real(plan)

    monkeypatch.setattr(driver, "start_workers", slow_start)
    plan = Plan(("impl", TWIN_AGAIN), ("decode-heavy",), tmp_path, minutes=0.05, workers=2)
    summary = run_campaign(plan)
    assert summary.startup_seconds >= 4.0
    assert summary.tasks >= 1, "the budget was spent on start-up"
    assert summary.too_little(plan.minutes) is None or summary.tasks < 2
