"""A test that runs long says so on the console (`conformance.ci.heartbeat`): the main job once
sat silent for 134 s inside the offload suite and 76 s in the KV differential tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SLOW = """
import time

def test_quick_first():
    pass

def test_slow():
    time.sleep(1.6)

def test_quick_after():
    pass
"""

QUIET_START = ("-p", "no:hypothesispytest", "-p", "no:anyio")
"""Plugins the inner run does not need (a second and a half of start-up each)."""


def run_pytest(tmp_path: Path, *args: str, every: str = "0.5") -> str:
    (tmp_path / "test_slow.py").write_text(SLOW, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conformance.ci.heartbeat", "-p",
         "no:cacheprovider", *QUIET_START, "test_slow.py", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "VTWIN_HEARTBEAT_SECONDS": every})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_long_test_gets_lines_and_the_results_go_on_on_a_fresh_line(tmp_path: Path) -> None:
    out = run_pytest(tmp_path)
    beats = re.findall(r"^    still running after (\d+) s: test_slow.py::test_slow$", out, re.M)
    assert len(beats) >= 2 and beats == sorted(beats, key=int), out
    assert "test_quick_first" not in out and "test_quick_after" not in out, out
    # The dots resume under the last line, behind the file's name again.
    assert re.search(r"test_slow.py::test_slow\ntest_slow.py \.\.", out), out
    assert "3 passed" in out


def test_verbose_output_repeats_the_test_line(tmp_path: Path) -> None:
    out = run_pytest(tmp_path, "-v")
    assert re.search(r"still running after \d+ s: test_slow.py::test_slow\n"
                     r"test_slow.py::test_slow PASSED", out), out


@pytest.mark.parametrize("args, every", [((), "0"), (("-n", "2"), "0.5")],
                         ids=["switched-off", "under-xdist"])
def test_silent_when_off_or_under_xdist(tmp_path: Path, args: tuple[str, ...],
                                        every: str) -> None:
    if args:
        pytest.importorskip("xdist")
    out = run_pytest(tmp_path, *args, every=every)
    assert "still running" not in out and "3 passed" in out, out
