"""The worker protocol end to end: systems in a worker process behave exactly as in process.

`impl+worker` runs the twin in a worker under this interpreter, so the whole wire protocol
(every method, handles for `Scheduled.native`, drafts, async batches, events) is exercised
without a managed environment; a release (`vllm==0.32.0`) is tested only where its environment
has been built, and skips naming the command that builds it.
"""

from __future__ import annotations

import pytest

from conformance.sched.lockstep import run_lockstep
from conformance.sched.suite import resolve_workload
from conformance.systems.protocol import RunnerOutput, Scheduled, close_system
from conformance.systems.registry import resolve_system
from conformance.systems.remote.envs import env_dir, env_info
from conformance.systems.remote.proxy import ProxySystem, RemoteError, WorkerDied
from conformance.systems.specs import parse_spec


@pytest.mark.parametrize("workload", ["spec-decode-async", "preemption-storm",
                                      "aborts-mid-prefill-decode", "hybrid-sliding-window"])
def test_impl_in_a_worker_is_exact_against_impl(workload: str) -> None:
    loaded, every = resolve_workload(workload)
    remote = resolve_system("impl+worker")
    try:
        result = run_lockstep(loaded, resolve_system("impl"), remote, integrity_every=every)
    finally:
        close_system(remote)
    assert result.error is None, result.error
    assert result.level_reached == "exact", [d.summary() for d in result.divergences]
    assert result.steps > 10


def test_one_worker_serves_every_system_of_a_run() -> None:
    config = resolve_workload("decode-heavy")[0].config
    factory = resolve_system("impl+worker")
    first, second = factory(config), factory(config)
    try:
        assert isinstance(first, ProxySystem) and isinstance(second, ProxySystem)
        assert first.worker is second.worker and first.handle != second.handle
        assert first.none_hash == second.none_hash and first.name == "impl"
        first.close()
        assert not second.has_requests()
    finally:
        close_system(factory)


def test_remote_exceptions_keep_their_type_name() -> None:
    factory = resolve_system("impl+worker")
    system = factory(resolve_workload("decode-heavy")[0].config)
    bogus = Scheduled((), (), (), 0, (), (), (), (), native=12345)
    try:
        with pytest.raises(RemoteError) as err:
            system.update(bogus, RunnerOutput((), ()))
        assert type(err.value).__name__ == "KeyError"
        assert not system.has_requests()  # the worker goes on after an error
    finally:
        close_system(factory)


def test_a_killed_worker_is_one_clean_line() -> None:
    factory = resolve_system("impl+worker")
    system = factory(resolve_workload("decode-heavy")[0].config)
    assert isinstance(system, ProxySystem)
    system.worker.proc.kill()
    system.worker.proc.wait()
    with pytest.raises(WorkerDied) as err:
        system.schedule()
    message = str(err.value)
    assert "system 'impl+worker'" in message and "during schedule" in message
    assert "exit code -9" in message and "\n" not in message
    with pytest.raises(WorkerDied):  # and stays dead, with the same line
        factory(resolve_workload("decode-heavy")[0].config)


def test_a_dead_worker_in_lockstep_is_an_error_naming_the_side() -> None:
    loaded, _ = resolve_workload("decode-heavy")
    factory = resolve_system("impl+worker")
    system = factory(loaded.config)
    assert isinstance(system, ProxySystem)
    system.worker.proc.kill()
    result = run_lockstep(loaded, resolve_system("impl"), lambda _config: system)
    assert result.error is not None
    assert result.error.startswith("right system impl raised WorkerDied at step 0")


RELEASE = "vllm==0.32.0"


@pytest.mark.skipif(env_info(env_dir(parse_spec(RELEASE))) is None,
                    reason=f"needs the managed environment of {RELEASE}: run "
                           f"`vtwin env create '{RELEASE}'`")
def test_release_in_its_env_is_exact_against_impl() -> None:
    loaded, every = resolve_workload("decode-heavy")
    remote = resolve_system(RELEASE)
    try:
        result = run_lockstep(loaded, resolve_system("impl"), remote, integrity_every=every)
    finally:
        close_system(remote)
    assert result.error is None, result.error
    assert result.right == "upstream-0.32.0"
    assert result.level_reached == "exact", [d.summary() for d in result.divergences]
