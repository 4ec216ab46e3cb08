"""The compiled build of the twin's hot modules, used only when `VTWIN_COMPILED=1` says so.

`python -m impl.compiled.build` compiles `impl/core` and `impl/sched` with mypyc (the same typed
source; nothing is rewritten) into `build/mypyc/<python tag>/`, plus the hand-written C
extensions of `NATIVE_MODULES` (each left out, with why, where it cannot build), next to a
manifest of the SHA-256 of every source it compiled. Importing `impl` calls `activate()`: with
`VTWIN_COMPILED=1` it puts a finder in front of the import system that loads those modules from
the build, after checking that every compiled source still has the digest the build recorded.
A stale or missing build is an `ImportError` naming the fix, never a silent fallback: a run that
asked for the compiled twin and got the pure one would prove nothing about the compiled one.
Without the switch nothing changes, so the mutation run and the unit tests see the pure source.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

SWITCH = "VTWIN_COMPILED"
MANIFEST = "manifest.json"
FORMAT = "vtwin-mypyc/1"
IMPL_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class NativeModule:
    """A hand-written C extension the compiled build adds beside mypyc's modules."""

    source: str
    """its C source, relative to the source root"""
    libraries: tuple[str, ...]
    """what it links (the build records why it could not, and goes on without it)"""


NATIVE_MODULES: dict[str, NativeModule] = {
    "impl.core._blockhash": NativeModule("impl/core/native/blockhash.c", ("crypto",)),
    "impl.core._prefetch": NativeModule("impl/core/native/prefetch.c", ()),
}
"""Module name -> C source. `impl.core._blockhash` serialises and digests a request's blocks
(`impl.core.request_hasher` uses it when it imports; OpenSSL's libcrypto does the SHA-256).
`impl.core._prefetch` asks the CPU for a batch of blocks before the pool's touch and free
loops reach them (`impl.core.block_pool.PREFETCH`; a hint, no state)."""


def build_dir(root: Path | None = None) -> Path:
    """`build/mypyc/<cache tag>-<platform>`: one build per interpreter ABI, beside the source
    tree (gitignored). An installed wheel has no build directory and runs pure."""
    base = root if root is not None else IMPL_DIR.parent / "build" / "mypyc"
    tag = f"{sys.implementation.cache_tag}-{sys.platform}"
    return base / tag


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def module_source(module: str, source_root: Path = IMPL_DIR.parent) -> Path:
    """Where the pure source of `impl.x.y` lives (the file its digest is taken of)."""
    return source_root.joinpath(*module.split(".")).with_suffix(".py")


@dataclass(frozen=True, slots=True)
class Build:
    """A compiled build as its manifest describes it."""

    directory: Path
    modules: dict[str, str]
    """module name -> SHA-256 of the source it was compiled from"""
    shared: str
    """mypyc's shared library (a top-level module the per-module shims import)"""
    compiler: str
    native: dict[str, str] = field(default_factory=dict)
    """C extension module name -> SHA-256 of its C source (`NATIVE_MODULES` that built)"""
    native_missing: dict[str, str] = field(default_factory=dict)
    """C extension module name -> why it was not built (the twin runs without it)"""

    @classmethod
    def read(cls, directory: Path) -> Build | None:
        try:
            data: dict[str, Any] = json.loads((directory / MANIFEST).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        if data.get("format") != FORMAT:
            return None
        return cls(directory, dict(data["modules"]), str(data["shared"]),
                   str(data.get("compiler", "mypyc")), dict(data.get("native", {})),
                   dict(data.get("native_missing", {})))

    def stale(self, source_root: Path = IMPL_DIR.parent) -> list[str]:
        """Modules whose source changed (or vanished) since the build."""
        changed = []
        for module, digest in sorted(self.modules.items()):
            path = module_source(module, source_root)
            if not path.is_file() or source_digest(path) != digest:
                changed.append(module)
        for module, digest in sorted(self.native.items()):
            native = NATIVE_MODULES.get(module)
            path = source_root / native.source if native is not None else Path()
            if native is None or not path.is_file() or source_digest(path) != digest:
                changed.append(module)
        return changed

    def extension(self, module: str) -> Path:
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        return self.directory.joinpath(*module.split(".")).with_name(
            module.rsplit(".", 1)[-1] + suffix)


class CompiledFinder:
    """Finds the compiled build's modules (and mypyc's shared library) before the source."""

    def __init__(self, build: Build) -> None:
        self.build = build

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        build = self.build
        if (fullname not in build.modules and fullname not in build.native
                and fullname != build.shared):
            return None
        location = self.build.extension(fullname)
        if not location.is_file():
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(location))
        return importlib.util.spec_from_file_location(fullname, location, loader=loader)


def requested() -> bool:
    return os.environ.get(SWITCH, "") == "1"


def active_build() -> Build | None:
    """The build the finder loads from, if this process switched it on."""
    for finder in sys.meta_path:
        if isinstance(finder, CompiledFinder):
            return finder.build
    return None


def activate(directory: Path | None = None) -> None:
    """Load the compiled modules in this process if `VTWIN_COMPILED=1` (idempotent).

    Must run before any of them is imported, which is why `impl/__init__.py` calls it.
    """
    if not requested() or active_build() is not None:
        return
    where = directory if directory is not None else build_dir()
    build = Build.read(where)
    fix = "run `python -m impl.compiled.build`, or unset VTWIN_COMPILED for the pure twin"
    if build is None:
        raise ImportError(f"{SWITCH}=1: no compiled build in {where} ({fix})")
    stale = build.stale()
    if stale:
        raise ImportError(f"{SWITCH}=1: the compiled build is older than the source of "
                          f"{', '.join(stale[:3])}{' ...' if len(stale) > 3 else ''} ({fix})")
    loaded = [name for name in build.modules if name in sys.modules]
    if loaded:
        raise ImportError(f"{SWITCH}=1: {loaded[0]} was imported before impl.compiled "
                          "could load its compiled build")
    sys.meta_path.insert(0, CompiledFinder(build))


def describe() -> str:
    """What `vtwin --version` says about the twin: which build runs, and what else is there."""
    build = active_build()
    if build is not None:
        native = "".join(f", {name} in C" for name in sorted(build.native))
        missing = "".join(f", {name} not built: {why}"
                          for name, why in sorted(build.native_missing.items()))
        return f"compiled ({build.compiler}, {len(build.modules)} modules{native}{missing})"
    available = Build.read(build_dir())
    if available is None:
        return "pure Python (no compiled build: python -m impl.compiled.build)"
    if available.stale():
        return "pure Python (compiled build out of date: python -m impl.compiled.build)"
    return f"pure Python (a compiled build is ready: {SWITCH}=1 uses it)"
