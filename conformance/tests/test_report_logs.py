"""Upstream's log records and Python warnings go to `upstream.log` in the run's report
directory; the console gets one line with their counts. Simulated with the `vllm` logger and a
planted system that logs and warns, so no upstream vLLM is needed."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest

from conformance.cli.conform import main
from conformance.sched.startup import upstream_logs
from conformance.systems.twin import ImplSystem


def noisy(config: Any) -> ImplSystem:
    """The twin, announcing itself the way upstream does on start-up. A child logger of its
    own: vllm's real `vllm.platforms` may have been configured (level, disabled) by an earlier
    test in the same worker that imported vllm, which would make this test order-dependent."""
    logger = logging.getLogger("vllm.vtwin_test_platforms")
    logger.disabled = False
    logger.warning("block_size is not a multiple of 32")
    logging.getLogger("vllm.config").info("an info line below the level")
    warnings.warn("SSM cache type reset", UserWarning, stacklevel=1)
    return ImplSystem(config)


def test_upstream_logs_go_to_a_file_and_one_console_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "WARNING")  # the capture's level: not the caller's
    code = main(["conform", "--workload", "decode-heavy", "--system",
                 "conformance.tests.test_report_logs:noisy", "--against", "impl",
                 "--report", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "block_size" not in err and "SSM cache" not in err
    [line] = [x for x in err.splitlines() if "upstream logs:" in x]
    assert line.endswith(f"-> {tmp_path / 'upstream.log'}")
    assert "upstream logs: 4 warnings ->" in line  # start-up build + the workload's build
    text = (tmp_path / "upstream.log").read_text()
    assert "WARNING vllm.vtwin_test_platforms: block_size is not a multiple of 32" in text
    assert "SSM cache type reset" in text and "below the level" not in text


def test_loggers_are_restored_afterwards(tmp_path: Path) -> None:
    logger = logging.getLogger("vllm")
    before = (list(logger.handlers), logger.propagate, logger.level)
    with upstream_logs(tmp_path / "u.log") as counts:
        logging.getLogger("vllm.x").error("boom")
    assert counts == {"error": 1}
    assert (list(logger.handlers), logger.propagate, logger.level) == before


def failing_load(config: Any) -> ImplSystem:
    """The twin, logging the error line upstream logs for a failed KV load."""
    logger = logging.getLogger("vllm.vtwin_test_connector")
    logger.disabled = False
    logger.error("Recovered from KV load failure")
    return ImplSystem(config)


def test_upstreams_error_for_a_planned_load_failure_is_called_expected(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The console's "1 error" was upstream's own line for a load failure the workload
    planned, and did not say so."""
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "WARNING")
    workload = "conformance/regressions/offload-load-failure-fail.jsonl"
    code = main(["conform", "--workload", workload, "--system",
                 "conformance.tests.test_report_logs:failing_load", "--against", "impl",
                 "--report", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 0, err
    [line] = [x for x in err.splitlines() if "upstream logs:" in x]
    assert "(expected: upstream logs each of the 2 planned load failures as an error)" in line, \
        line
