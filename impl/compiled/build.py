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

from impl.compiled import (
    FORMAT,
    IMPL_DIR,
    MANIFEST,
    NATIVE_MODULES,
    Build,
    build_dir,
    source_digest,
)

PACKAGES: tuple[str, ...] = ("impl/core", "impl/sched")
NOT_COMPILED: dict[str, str] = {}
"""Modules of `PACKAGES` left pure, each with why (none now: Scheduler's four mixins are
`mypy_extensions.trait`s, the one form of multiple inheritance mypyc compiles, so the whole
class, `update_from_output` included, is native)."""
GROUP = "vtwin_impl"
"""mypyc's name for the shared library that holds every compiled module's code."""
NO_COMPILER = 3


def c_compiler() -> str | None:
    """Why no C extension can be built here, or None when one can (a C compiler and
    Python.h: all `NATIVE_MODULES` need besides their own libraries)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None and shutil.which(os.environ.get("CC", "cc")) is None:
        return f"no C compiler ({cc}) on PATH"
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not include.is_file():
        return f"no Python headers ({include})"
    return None


def compiler() -> str | None:
    """Why the build cannot run here, or None when it can (a C compiler, Python.h, mypyc)."""
    missing = c_compiler()
    if missing is not None:
        return missing
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


def compile_native(out: Path, scratch: Path,
                   source_root: Path = IMPL_DIR.parent) -> tuple[dict[str, str], dict[str, str]]:
    """Build each of `NATIVE_MODULES` into `out`: (built: name -> source digest, missing: name
    -> why). One that fails (no OpenSSL headers, say) is left out, not fatal: the twin's
    Python code runs without it, and `vtwin --version` says so."""
    import importlib

    setuptools = importlib.import_module("setuptools")
    built: dict[str, str] = {}
    missing: dict[str, str] = {}
    for name, native in NATIVE_MODULES.items():
        source = source_root / native.source
        extension = setuptools.Extension(name, [str(source)], libraries=list(native.libraries),
                                         extra_compile_args=["-O3"])
        log = scratch / f"{name}.log"
        try:
            with working_directory(scratch), _quiet(log):
                setuptools.setup(name=f"vtwin-{name}", ext_modules=[extension],
                                 script_args=["--quiet", "build_ext", "--build-lib", str(out),
                                              "--build-temp", str(scratch / "native")])
        except (Exception, SystemExit) as err:  # distutils exits with the compiler's error
            missing[name] = _first_error(log) or f"{type(err).__name__}: {err}"
            continue
        built[name] = source_digest(source)
    return built, missing


@contextlib.contextmanager
def _quiet(log: Path) -> Iterator[None]:
    """The C compiler's output (file descriptors 1 and 2) into `log`: a missing header is one
    line in the build's summary, not a page of compiler output."""
    with log.open("wb") as sink:
        saved = [os.dup(1), os.dup(2)]
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)


def _first_error(log: Path) -> str | None:
    lines = log.read_text("utf-8", "replace").splitlines() if log.is_file() else []
    return next((line.strip() for line in lines if "error" in line.lower()), None)


def up_to_date(current: Build | None, modules: dict[str, str],
               native: dict[str, str]) -> bool:
    """The build holds exactly these sources: mypyc's modules, and every native module built
    from its current source or recorded as missing (`--force` retries a missing one)."""
    if current is None or current.modules != modules:
        return False
    return all(current.native.get(name) == digest or name in current.native_missing
               for name, digest in native.items())


def build(target: Path, force: bool = False) -> str:
    """Compile into `target` unless it already holds a build of exactly these sources."""
    modules = sources()
    before = digests(modules)
    native_sources = {name: source_digest(IMPL_DIR.parent / native.source)
                      for name, native in NATIVE_MODULES.items()}
    current = Build.read(target)
    if not force and up_to_date(current, before, native_sources):
        return f"up to date ({len(before)} modules in {target})"
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / f".scratch-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    start = time.perf_counter()
    try:
        out = compile_modules(modules, scratch)
        native, missing = compile_native(out, scratch)
        if digests(modules) != before:
            raise RuntimeError("sources changed while compiling: run the build again")
        shared = [p.name.split(".")[0] for p in out.glob(f"*{GROUP}*")]
        if len(shared) != 1:
            raise RuntimeError(f"expected one mypyc shared library in {out} (got {shared})")
        manifest = {"format": FORMAT, "compiler": "mypyc", "shared": shared[0],
                    "python": sys.version.split()[0], "modules": before, "native": native,
                    "native_missing": missing}
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        out.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = time.perf_counter() - start
    extra = "".join(f" + {name} (C)" for name in native)
    extra += "".join(f"; {name} not built: {why}" for name, why in missing.items())
    return f"built {len(before)} modules with mypyc{extra} in {seconds:.0f} s -> {target}"


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
