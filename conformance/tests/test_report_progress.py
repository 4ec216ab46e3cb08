"""Progress: a tqdm bar (workloads done, the current step) when stderr is a terminal, plain
lines otherwise (what CI logs want); the result lines are the same either way."""

from __future__ import annotations

import io

from conformance.sched.conform import run_conform


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_and_a_log_gets_lines() -> None:
    tty, log = Terminal(), io.StringIO()
    for stream in (tty, log):
        run = run_conform(["decode-heavy", "spec-decode"], system="impl", against="impl",
                          stream=stream, progress_every=100)
        assert run.ok
    bar, lines = tty.getvalue(), log.getvalue()
    assert "2/2" in bar and "workload" in bar and "\r" in bar
    assert "decode-heavy: step" in bar  # the postfix shows the current step
    assert "\r" not in lines and "vtwin conform:     decode-heavy: step 200" in lines
    for text in (bar, lines):
        assert "[2/2] spec-decode: " in text and "passed at exact" in text
