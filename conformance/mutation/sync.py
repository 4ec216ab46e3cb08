"""Keep mutmut's copy of the source tree (`mutants/impl`) in step with `impl/`.

mutmut 3 copies each file of its `source_paths` into `mutants/` only when the copy does not
exist yet, and regenerates a `.py` file only when its source is newer. Everything else goes
stale between runs: a C source the compiled build's tests compile (`impl/core/native/*.c`),
a type stub, a data file, and a module deleted from `impl/` (still importable from `mutants/`,
so tests that should fail on its absence pass). That happened: a changed `blockhash.c` was
tested in its old form until the copy was removed by hand. So before each run the copies of
non-Python files are refreshed, and copies whose source is gone are removed (a `.py` copy with
mutmut's files beside it, `P.meta` and `P.spans`).
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from vtwin.errors import UserError

SKIPPED_DIRS = frozenset({"__pycache__"})
# mutmut's own files beside a mutated module `P`: its verdicts (`P.meta`) and its functions'
# line spans (`P.spans`).
MUTMUT_SUFFIXES = (".meta", ".spans")


@dataclass(frozen=True, slots=True)
class SyncResult:
    refreshed: tuple[str, ...]  # copies (re)written from their source, relative to mutants/
    removed: tuple[str, ...]  # copies whose source is gone

    def line(self) -> str:
        return (f"mutation: refreshed {len(self.refreshed)} non-Python copies, removed "
                f"{len(self.removed)} copies without a source in mutants/")


def source_paths(pyproject: Path) -> list[str]:
    """`[tool.mutmut] source_paths` of `pyproject` (mutmut's default, `src`, when unset)."""
    try:
        config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"{pyproject}: cannot read [tool.mutmut]: {err}") from err
    paths = config.get("tool", {}).get("mutmut", {}).get("source_paths", ["src"])
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise UserError(f"{pyproject}: [tool.mutmut] source_paths must be a list of strings")
    return paths


def _files(root: Path) -> list[Path]:
    """Files under `root`, relative to it, outside `__pycache__`."""
    return sorted(path.relative_to(root) for path in root.rglob("*")
                  if path.is_file() and not SKIPPED_DIRS.intersection(path.parts))


def _source_of(copy: Path) -> Path:
    """The source file a copy in mutants/ stands for (`P.py.meta` belongs to `P.py`)."""
    if copy.suffix in MUTMUT_SUFFIXES and copy.with_suffix("").suffix == ".py":
        return copy.with_suffix("")
    return copy


def sync_copies(mutants_dir: Path, source_root: Path, paths: list[str]) -> SyncResult:
    """Refresh `mutants_dir`'s copies of the non-Python files under each of `paths` (relative
    to `source_root`) and remove copies whose source is gone. A path mutmut has not copied yet
    is left to mutmut. `.py` files with a source are mutmut's: it regenerates them."""
    refreshed: list[str] = []
    removed: list[str] = []
    for path in paths:
        source_dir, copy_dir = source_root / path, mutants_dir / path
        if not source_dir.is_dir() or not copy_dir.is_dir():
            continue
        for relative in _files(source_dir):
            if relative.suffix == ".py":
                continue
            source, copy = source_dir / relative, copy_dir / relative
            if copy.is_file() and copy.read_bytes() == source.read_bytes():
                continue
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy)
            refreshed.append(str(Path(path) / relative))
        for relative in _files(copy_dir):
            if not (source_dir / _source_of(relative)).is_file():
                (copy_dir / relative).unlink()
                removed.append(str(Path(path) / relative))
    return SyncResult(tuple(refreshed), tuple(removed))
