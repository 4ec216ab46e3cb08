"""The mutation plugin's process bounds and the meaning of mutmut's exit codes: a mutant run that
broke inside the harness is never counted as a kill."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap

from conformance.mutation.plugin import lowered
from conformance.mutation.results import KILLED, SURVIVED, SUSPICIOUS, status_of

INF = resource.RLIM_INFINITY


def test_limits_are_only_ever_lowered() -> None:
    assert lowered((INF, INF), 900) == (900, 900)
    assert lowered((12, 13), 900) == (12, 13)  # mutmut's own CPU limit stays
    assert lowered((INF, 13), 900) == (13, 13)
    assert lowered((2000, INF), 900) == (900, 900)
    assert lowered((100, 5000), 900) == (100, 900)


def test_pytest_configure_under_mutmuts_cpu_limit_does_not_raise() -> None:
    """As mutmut 3.8 forks a mutant's process: a CPU limit of a few seconds already set, then
    the plugin's hook. Raising the hard limit there ended pytest with an internal error."""
    code = textwrap.dedent("""
        import resource
        resource.setrlimit(resource.RLIMIT_CPU, (30, 31))
        from conformance.mutation.plugin import pytest_configure
        pytest_configure(None)
        print(resource.getrlimit(resource.RLIMIT_CPU), resource.getrlimit(resource.RLIMIT_AS))
    """)
    env = {**os.environ, "MUTANT_UNDER_TEST": "impl.core.block.x_f__mutmut_1",
           "VTWIN_MUTANT_MAX_GIB": "64"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(30,", "31)", f"({64 << 30},", f"{64 << 30})"]


def test_a_pytest_internal_error_is_suspicious_not_a_kill() -> None:
    assert status_of(3) == SUSPICIOUS
    assert status_of(1) == KILLED and status_of(0) == SURVIVED
