"""Error types every layer shares. They live below `impl`, `workloads` and `conformance` so
that no layer imports upward to raise or catch one."""


class UserError(Exception):
    """Bad input from a user: a malformed file, an unknown name, an invalid option.

    The message must say what was wrong and where (file, line, field, request id).
    """


class IntegrityError(RuntimeError):
    """A cache or scheduler structure broke one of its invariants (`check_integrity()`).

    Raised instead of `assert` so the checks still run under `python -O`: an integrity check
    that vanishes with optimisation would let a broken twin pass the gate silently.
    """


def require(condition: bool, message: str) -> None:
    """Raise `IntegrityError(message)` unless `condition` holds (an `assert` that survives -O).

    Callers build `message` eagerly, so keep it cheap or guard hot paths with their own `if`."""
    if not condition:
        raise IntegrityError(message)


class ReleaseCheckFailed(IntegrityError):
    """The twin reached a state that the release it follows stops on with an assertion of its
    own: an upstream bug the twin reproduces rather than papers over, because a twin that runs
    on where upstream crashes hides the crash from whoever replays the workload on it.

    `check` names the upstream check (`conformance.sched.failures` pairs each name with the
    assertion upstream raises), so both systems stopping at the same step on the same check is
    agreement, and one stopping alone is a divergence like any other."""

    def __init__(self, check: str, detail: str) -> None:
        super().__init__(f"release check {check!r} fails: {detail}")
        self.check = check


class SystemBuildFailed(UserError):
    """A system under test could not be built for a workload's configuration: a release that
    lacks a field the workload sets, an environment that is not there, a factory that raised.

    Never a behaviour difference: `conform`, `drift`, `campaign` and `record` report it as
    their verdict ("SYSTEM could not be built: REASON") and exit 2, as for any configuration a
    user must change."""

    def __init__(self, system: str, reason: str) -> None:
        super().__init__(f"{system} could not be built: {reason}")
        self.system = system
        self.reason = reason


class HarnessError(RuntimeError):
    """The harness's own observation of a system failed (not the system, not the input):
    a kept view of upstream's state that a full walk disagrees with, say. Ends the run with an
    error naming the harness module to fix; never reported as a divergence."""
