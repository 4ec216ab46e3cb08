"""`python -m impl.compiled.build`: compile the twin's hot modules with mypyc, if a C compiler
is here.

Every module of `impl/core` and `impl/sched` is compiled except the `NOT_COMPILED` ones, each
with why; new modules are picked up by themselves. The build runs in a scratch directory and
replaces `build/mypyc/<tag>/` only once it succeeded, with a manifest of the digest of every
source it compiled (taken before and after compiling, so an edit during the build cannot slip
into a manifest that vouches for it). Exit status: 0 built or up to date, 1 the build failed,
3 no compiler here (the twin runs pure Python; `--require` turns that into 1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

from impl.compiled import FORMAT, IMPL_DIR, MANIFEST, Build, build_dir, source_digest

PACKAGES: tuple[str, ...] = ("impl/core", "impl/sched")
NOT_COMPILED: dict[str, str] = {}
"""Modules of `PACKAGES` left pure, each with why (none now: Scheduler's four mixins are
`mypy_extensions.trait`s, the one form of multiple inheritance mypyc compiles, so the whole
class, `update_from_output` included, is native)."""
GROUP = "vtwin_impl"
"""mypyc's name for the shared library that holds every compiled module's code."""
NO_COMPILER = 3


def compiler() -> str | None:
    """Why the build cannot run here, or None when it can (a C compiler and Python.h)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None and shutil.which(os.environ.get("CC", "cc")) is None:
        return f"no C compiler ({cc}) on PATH"
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not include.is_file():
        return f"no Python headers ({include})"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed (pip install mypy)"
    return None


def module_name(path: Path, source_root: Path) -> str:
    return ".".join(path.relative_to(source_root).with_suffix("").parts)


def sources(source_root: Path = IMPL_DIR.parent) -> dict[str, Path]:
    """Module name -> source file of every module the build compiles."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((source_root / package).rglob("*.py")):
            name = module_name(path, source_root)
            if path.name != "__init__.py" and name not in NOT_COMPILED:
                found[name] = path
    return found


def digests(modules: dict[str, Path]) -> dict[str, str]:
    return {name: source_digest(path) for name, path in modules.items()}


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """setuptools reads the configuration files of the current directory: build in a scratch
    one so the project's own pyproject.toml plays no part."""
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def compile_modules(modules: dict[str, Path], scratch: Path) -> Path:
    """Run mypyc and the C compiler; returns the directory holding the extension modules."""
    import importlib

    from mypyc.build import mypycify

    # setuptools ships no type stubs; its `setup` is Any either way.
    setup = importlib.import_module("setuptools").setup

    out = scratch / "out"
    with working_directory(scratch):
        extensions = mypycify([str(p) for p in modules.values()], opt_level="3",
                              target_dir=str(scratch / "c"), group_name=GROUP)
        jobs = str(max(1, min(4, os.cpu_count() or 1)))
        setup(name="vtwin-compiled", ext_modules=extensions,
              script_args=["--quiet", "build_ext", "--build-lib", str(out),
                           "--build-temp", str(scratch / "obj"), "--parallel", jobs])
    return out


def build(target: Path, force: bool = False) -> str:
    """Compile into `target` unless it already holds a build of exactly these sources."""
    modules = sources()
    before = digests(modules)
    current = Build.read(target)
    if not force and current is not None and current.modules == before:
        return f"up to date ({len(before)} modules in {target})"
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / f".scratch-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    start = time.perf_counter()
    try:
        out = compile_modules(modules, scratch)
        if digests(modules) != before:
            raise RuntimeError("sources changed while compiling: run the build again")
        shared = [p.name.split(".")[0] for p in out.glob(f"*{GROUP}*")]
        if len(shared) != 1:
            raise RuntimeError(f"expected one mypyc shared library in {out} (got {shared})")
        manifest = {"format": FORMAT, "compiler": "mypyc", "shared": shared[0],
                    "python": sys.version.split()[0], "modules": before}
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        out.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = time.perf_counter() - start
    return f"built {len(before)} modules with mypyc in {seconds:.0f} s -> {target}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m impl.compiled.build",
                                     description="Compile impl/core and impl/sched with mypyc "
                                                 "(VTWIN_COMPILED=1 then uses the build).")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--require", action="store_true",
                        help="fail (exit 1) when there is no compiler instead of exit 3")
    parser.add_argument("--list", action="store_true",
                        help="list the modules compiled and those left pure, then exit")
    args = parser.parse_args(argv)
    if args.list:
        for name in sources():
            print(name)
        for name, why in NOT_COMPILED.items():
            print(f"{name} (pure: {why})")
        return 0
    missing = compiler()
    if missing is not None:
        print(f"impl.compiled: {missing}: the twin runs pure Python", file=sys.stderr)
        return 1 if args.require else NO_COMPILER
    try:
        line = build(build_dir(), force=args.force)
    except Exception as err:  # mypyc's and the C compiler's errors are printed above it
        print(f"impl.compiled: build failed: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    print(f"impl.compiled: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
