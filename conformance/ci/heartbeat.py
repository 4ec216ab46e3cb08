"""A line on the console while one test runs long.

`nox -s conformance` runs pytest without `-v`: one dot per test, and nothing at all while a
test takes minutes (a trace replay in the offload suite, a KV family's Hypothesis examples),
which reads as a hang. After `VTWIN_HEARTBEAT_SECONDS` (default 30) inside one test, and again
every as long, a line goes straight to the console, past pytest's output capture:

    conformance/tests/test_offload_suite.py ........
        still running after 30 s: conformance/tests/test_offload_suite.py::test_x[mooncake-eager]
    conformance/tests/test_offload_suite.py ......

and the test's result then goes on, on a fresh line. Off under pytest-xdist (a worker's stdout
is its channel to the controller) and with `VTWIN_HEARTBEAT_SECONDS=0`. Registered by
`conformance/tests/conftest.py`.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

ENV = "VTWIN_HEARTBEAT_SECONDS"
DEFAULT_SECONDS = 30.0


class Heartbeat:
    """A daemon thread watching the test in progress; `report` is called by pytest's hooks."""

    def __init__(self, config: pytest.Config, every: float, fd: int) -> None:
        self.config = config
        self.every = every
        self.fd = fd
        """A duplicate of the console's stdout, taken while pytest was not capturing."""
        self.lock = threading.Lock()
        self.running: tuple[str, float] | None = None
        self.next_at = 0.0
        self.spoke = False
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="vtwin-heartbeat", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stopping.wait(min(1.0, self.every / 4)):
            with self.lock:
                if self.running is None or time.monotonic() < self.next_at:
                    continue
                nodeid, started = self.running
                elapsed = time.monotonic() - started
                self.next_at += self.every
                line = f"\n    still running after {elapsed:.0f} s: {nodeid}"
                try:
                    os.write(self.fd, line.encode("utf-8", "replace"))
                except OSError:  # the console went away; nothing to tell
                    self.running = None
                    continue
                self.spoke = True

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        # The reporter has written the test's file prefix; flush it so our lines come after.
        self.config.get_terminal_writer().flush()
        with self.lock:
            self.running = (nodeid, time.monotonic())
            self.next_at = time.monotonic() + self.every

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Before the reporter prints the result: if a heartbeat line was written, make it
        start a fresh line with the file prefix (verbose: the test's own line)."""
        with self.lock:
            spoke, self.spoke = self.spoke, False
            if report.when == "call":
                self.running = None
        reporter: Any = self.config.pluginmanager.get_plugin("terminalreporter")
        if not spoke or reporter is None:
            return
        reporter.currentfspath = None
        if self.config.get_verbosity(pytest.Config.VERBOSITY_TEST_CASES) <= 0:
            reporter.write_fspath_result(report.nodeid, "")

    @pytest.hookimpl
    def pytest_runtest_logfinish(self, nodeid: str, location: tuple[str, int | None, str]) -> None:
        with self.lock:
            self.running = None

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        os.close(self.fd)


def interval() -> float:
    try:
        return float(os.environ.get(ENV, DEFAULT_SECONDS))
    except ValueError:
        return DEFAULT_SECONDS


def pytest_configure(config: pytest.Config) -> None:
    every = interval()
    under_xdist = hasattr(config, "workerinput") or bool(
        config.getoption("numprocesses", default=None))
    if every <= 0 or under_xdist or config.pluginmanager.has_plugin("vtwin-heartbeat"):
        return
    capture: Any = config.pluginmanager.get_plugin("capturemanager")
    if capture is not None:
        with capture.global_and_fixture_disabled():  # fd 1 is the console again in here
            fd = os.dup(1)
    else:
        fd = os.dup(1)
    config.pluginmanager.register(Heartbeat(config, every, fd), "vtwin-heartbeat")


def pytest_unconfigure(config: pytest.Config) -> None:
    heartbeat = config.pluginmanager.get_plugin("vtwin-heartbeat")
    if isinstance(heartbeat, Heartbeat):
        heartbeat.stop()
        config.pluginmanager.unregister(heartbeat)
