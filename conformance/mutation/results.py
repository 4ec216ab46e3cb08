"""mutmut's working directory (`mutants/`) read back as one `Mutant` per mutant.

mutmut 3 keeps, per mutated source file `P`: `mutants/P.meta` (JSON: `exit_code_by_key`, the
verdict of each mutant by its name) and `mutants/P`, the file with every function's original
(`<mangled>__mutmut_orig`) and its mutants (`<mangled>__mutmut_<n>`) side by side. A mutant name
is `<module>.<mangled>__mutmut_<n>`, the mangled name `x_<function>` or `xǁ<Class>ǁ<method>`.
The diff of a mutant is its function against the original; its line is where they first differ,
in the source file under `source_root`. `plugin` writes `mutants/mutmut-killers.jsonl`.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from vtwin.errors import UserError

KILLED, SURVIVED, NO_TESTS, TIMEOUT, NOT_RUN, SUSPICIOUS = (
    "killed", "survived", "no tests", "timeout", "not run", "suspicious")
STATUSES = (KILLED, TIMEOUT, SURVIVED, NO_TESTS, SUSPICIOUS, NOT_RUN)
# mutmut's exit codes (mutmut/stats.py); 2 is a run it stopped (--max-minutes), so not run.
# 3 is pytest's internal error, which mutmut counts as killed: the run broke before or beside
# the tests (a plugin hook raising, say), so no test detected the mutant. Suspicious, not a
# kill: it lowers the score and `--rerun-survivors` tests it again.
_STATUS_BY_EXIT: dict[int | None, str] = {
    None: NOT_RUN, 2: NOT_RUN, 1: KILLED, 3: SUSPICIOUS, 37: KILLED, 0: SURVIVED, 5: NO_TESTS,
    33: NO_TESTS, 34: NOT_RUN, 36: TIMEOUT, 24: TIMEOUT, -24: TIMEOUT, 152: TIMEOUT,
    255: TIMEOUT,
}
SEP = "ǁ"
KILLERS_FILE = "mutmut-killers.jsonl"  # written by `plugin`, one JSON record per kill
_NAME = re.compile(r"^(?P<module>[\w.]+?)\.(?P<mangled>x(?:_|ǁ)[^.]+)__mutmut_(?P<n>\d+)$")


@dataclass(frozen=True, slots=True)
class Mutant:
    id: str
    path: str          # source file, e.g. impl/core/block_pool.py
    function: str      # module.mangled, e.g. impl.core.block_pool.xǁBlockPoolǁtouch
    qualname: str      # BlockPool.touch
    line: int | None   # first changed line in the source file
    status: str
    diff: str
    killer: str | None = None   # pytest node id of the first failing test

    @property
    def detected(self) -> bool:
        return self.status in (KILLED, TIMEOUT)

    @property
    def sha(self) -> str:
        """Short hash of the changed lines only: stable while the mutation means the same."""
        changed = [ln[1:].strip() for ln in self.diff.splitlines()
                   if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        return hashlib.sha256("\n".join(changed).encode()).hexdigest()[:12]

    @property
    def killed_by(self) -> str:
        """The killer in words: a unit test, a KV lockstep family or a scheduler workload."""
        if self.status == TIMEOUT:
            return "timeout (the mutant hangs a test)"
        return describe_killer(self.killer)


def describe_killer(nodeid: str | None) -> str:
    if nodeid is None:
        return "unknown (no failing test recorded)"
    kv = re.search(r"test_kv_differential\.py::TestKVLockstep_(\w+)", nodeid)
    if kv:
        return f"KV family {kv.group(1)}"
    workload = re.search(r"test_mutation_killers\.py::\w+\[(.+)\]$", nodeid)
    if workload:
        return f"workload {workload.group(1)}"
    return f"test {nodeid}"


def status_of(exit_code: int | None) -> str:
    return _STATUS_BY_EXIT.get(exit_code, SUSPICIOUS)


def split_name(name: str) -> tuple[str, str, int]:
    """`impl.core.x.xǁCǁf__mutmut_3` -> (`impl.core.x`, `xǁCǁf`, 3)."""
    match = _NAME.match(name)
    if match is None:
        raise UserError(f"mutant {name!r}: not a mutmut 3 mutant name")
    return match["module"], match["mangled"], int(match["n"])


def qualname_of(mangled: str) -> str:
    if mangled.startswith("x_"):
        return mangled[2:]
    _, cls, method = mangled.split(SEP, 2)
    return f"{cls}.{method}"


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function by qualified name (`f`, `Class.method`), one class level deep."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}.{item.name}"] = item
                    found[item.name] = found.get(item.name, item)
    return found


def _segment(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    end = node.end_lineno or node.lineno
    text = textwrap.dedent("".join(lines[node.lineno - 1:end]))
    return text.splitlines()


class _MutantFile:
    """One mutated file in `mutants/`: the original and mutant text of each function."""

    def __init__(self, mutated: Path, source: Path) -> None:
        text = mutated.read_text(encoding="utf-8")
        self.lines = text.splitlines(keepends=True)
        self.defs = _functions(ast.parse(text))
        self.source_defs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        if source.is_file():
            self.source_defs = _functions(ast.parse(source.read_text(encoding="utf-8")))

    def diff_and_line(self, path: str, mangled: str, n: int) -> tuple[str, int | None]:
        orig = self.defs.get(f"{mangled}__mutmut_orig")
        mutant = self.defs.get(f"{mangled}__mutmut_{n}")
        if orig is None or mutant is None:
            return "", None
        before, after = _segment(self.lines, orig), _segment(self.lines, mutant)
        # The def lines differ only by mutmut's renaming: show the source's name on both sides.
        name = qualname_of(mangled).rsplit(".", 1)[-1]
        before[0] = before[0].replace(f"{mangled}__mutmut_orig", name)
        after[0] = after[0].replace(f"{mangled}__mutmut_{n}", name)
        diff = "\n".join(difflib.unified_diff(before, after, path, path, lineterm=""))
        first = next((i1 for tag, i1, *_ in
                      difflib.SequenceMatcher(a=before, b=after).get_opcodes()
                      if tag != "equal"), 0)
        source_def = self.source_defs.get(qualname_of(mangled))
        line = source_def.lineno + first if source_def is not None else None
        return diff, line


def read_killers(mutants_dir: Path) -> dict[str, str]:
    """The last recorded first failure per mutant (a rerun overwrites an older verdict)."""
    killers: dict[str, str] = {}
    path = mutants_dir / KILLERS_FILE
    if not path.is_file():
        return killers
    seen: set[str] = set()
    for line in reversed(path.read_text(encoding="utf-8").splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        mutant, test = str(record.get("mutant", "")), str(record.get("test", ""))
        if mutant and test and mutant not in seen:
            seen.add(mutant)
            killers[mutant] = test
    return killers


def read_mutants(mutants_dir: Path, source_root: Path) -> list[Mutant]:
    """Every mutant mutmut generated under `mutants_dir`, sorted by file, line and id."""
    metas = sorted((mutants_dir / "impl").rglob("*.py.meta")) if mutants_dir.is_dir() else []
    if not metas:
        raise UserError(f"{mutants_dir}: no mutmut results (run `nox -s mutation` first)")
    killers = read_killers(mutants_dir)
    mutants: list[Mutant] = []
    for meta in metas:
        path = meta.relative_to(mutants_dir).as_posix().removesuffix(".meta")
        verdicts = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        mutated = _MutantFile(mutants_dir / path, source_root / path)
        for name, exit_code in verdicts.items():
            module, mangled, n = split_name(name)
            diff, line = mutated.diff_and_line(path, mangled, n)
            status = status_of(exit_code)
            mutants.append(Mutant(
                id=name, path=path, function=f"{module}.{mangled}", qualname=qualname_of(mangled),
                line=line, status=status, diff=diff,
                killer=killers.get(name) if status == KILLED else None))
    mutants.sort(key=lambda m: (m.path, m.line or 0, m.id))
    return mutants
