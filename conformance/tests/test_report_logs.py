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
