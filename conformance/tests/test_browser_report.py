"""The report pages in a real headless browser (Playwright driving Debian's chromium through
`executable_path`; no browser download): a passing and a failing run, the divergence id,
the engine config, the markers drawn on the charts, nothing wider than a 1280 px window, and
screenshots saved under the report directory (and under `$VTWIN_REPORT_DIR/screenshots/`
when `nox -s conformance` sets it, so CI keeps them beside its report).

Skips, saying what is missing, only when the `playwright` package or a chromium binary is
absent (`.ci/run` installs chromium with apt where it can)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.cli.conform import main
from conformance.tests.test_sched_planted import FREE_ORDER
from workloads import dump

VARIANT = "conformance.tests.test_sched_planted:ForwardFreeImpl"
WIDTH = 1280
CHROMIUM = next((p for p in (os.environ.get("VTWIN_CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser")) if p), None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the playwright package is missing: pip install -e .[test]")
    if CHROMIUM is None:
        pytest.skip("no chromium binary on PATH: apt-get install -y chromium (.ci/run does it)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM,
                                              args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()


def _open(browser: Any, page_path: Path, shot: str) -> Any:
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(page_path.resolve().as_uri())
    if page.locator(".chart").count():
        page.wait_for_selector(".chart .main-svg", timeout=30_000)
    assert errors == [], errors
    width = page.evaluate("Math.max(document.documentElement.scrollWidth,"
                          "document.body.scrollWidth)")
    assert width <= WIDTH, f"{page_path.name} is {width} px wide at a {WIDTH} px window"
    for directory in _shot_dirs(page_path.parent):
        directory.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(directory / shot), full_page=True)
    return page


def _shot_dirs(report_dir: Path) -> list[Path]:
    dirs = [report_dir / "screenshots"]
    if os.environ.get("VTWIN_REPORT_DIR"):
        dirs.append(Path(os.environ["VTWIN_REPORT_DIR"]) / "screenshots")
    return dirs


def test_a_failing_report_in_the_browser(browser: Any, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    workload = tmp_path / "free-order.jsonl"
    dump(FREE_ORDER, workload)
    out = tmp_path / "failing"
    assert main(["conform", "--workload", str(workload), "--system", VARIANT,
                 "--against", "impl", "--report", str(out), "--traces"]) == 1
    capsys.readouterr()
    page = _open(browser, out / "conform.html", "failing-conform.png")
    assert page.locator(".divergence-id").first.inner_text() == "planted:free_head"
    assert page.locator(".divergence-id").first.is_visible()
    assert page.locator("table.config").first.is_visible()
    assert "max_num_batched_tokens" in page.locator("table.config").first.inner_text()
    # Every chart drew the divergence marker: a shape line and its label at step 0.
    charts = page.locator(".chart")
    assert charts.count() == 2
    for index in range(charts.count()):
        chart = charts.nth(index)
        assert chart.locator(".shapelayer path").count() >= 1
        assert "divergence (exact) at step 0" in (chart.locator(".annotation").text_content() or "")
    assert page.locator("table.blocks td.changed").count() >= 2
    # The free queue heads part (the planted bug frees head first), outlined on both sides.
    assert page.locator("table.blocks td.differs").count() >= 2
    assert page.locator("table.blocks td.differs").first.is_visible()
    page.close()


def test_a_passing_report_and_the_index_of_runs(browser: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["conform", "--workload", "decode-heavy", "--workload", "hybrid-mamba",
                 "--system", "impl", "--against", "impl", "--run-id", "passing"]) == 0
    capsys.readouterr()
    root = tmp_path / "reports" / "conformance"
    page = _open(browser, root / "passing" / "conform.html", "passing-conform.png")
    assert page.locator(".verdict").inner_text() == "ok"
    assert page.locator(".divergence-id").count() == 0
    assert page.locator(".chart .main-svg").count() >= 4
    assert page.locator("table.config").count() == 2
    page.close()
    index = _open(browser, root / "index.html", "runs-index.png")
    assert index.locator("a[href='passing/conform.html']").count() == 1
    index.close()
