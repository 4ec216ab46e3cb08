"""The verdict store: mutmut's verdicts kept in the repository, so a new machine starts from them.

mutmut keeps its verdicts in `mutants/` (ignored by git): one `P.meta` per mutated module with
an exit code per mutant and a hash per function. A fresh clone had none, and judging every
mutant takes about 8 hours on two cores. `conformance/mutation/verdicts.jsonl` holds the same
verdicts, one line per function: its module, mutmut's hash of the function, the exit code of
each mutant (by number) and the test that killed it.

`restore` (before `mutmut run`) writes stored verdicts into `mutants/` where the machine has
none; `save` (after every run) writes the store back from `mutants/`. Which verdicts stay valid
is mutmut's own rule, kept: when a function's source changes, mutmut hashes it anew and drops
its verdicts, so a stored verdict is only ever used for the function it was judged on. One rule
is added for what mutmut cannot see: a survivor stays a survivor only under the tests it
survived. The store records a digest of the killers (the tracked files of `tests/`,
`conformance/`, `workloads/` and `vtwin/`, this store excepted); when it differs from the
checkout's, stored survivors are not restored and get tested again, except those accepted as
equivalent (no test can kill them; the store marks them when it is saved). Kills are kept, as
mutmut keeps them: a killing test that still exists is assumed to still kill.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.mutation.equivalents import classify, load_equivalents
from conformance.mutation.results import (
    KILLED,
    KILLERS_FILE,
    TIMEOUT,
    read_killers,
    read_mutants,
    status_of,
)
from vtwin.errors import UserError

STORE_PATH = Path("conformance", "mutation", "verdicts.jsonl")
KILLER_ROOTS = ("tests", "conformance", "workloads", "vtwin")
_SEPARATOR = "__mutmut_"
_FORMAT = "vtwin-mutation-verdicts"


@dataclass(frozen=True, slots=True)
class FunctionVerdicts:
    """The verdicts of one function's mutants, as judged on the source mutmut hashed."""

    module: str  # the mutated file, relative to the source root ("impl/core/block_pool.py")
    function: str  # mutmut's mangled name ("xǁBlockPoolǁget_new_blocks")
    hash: str
    exit_codes: dict[int, int]  # mutant number -> mutmut's exit code
    killers: dict[int, str]  # mutant number -> the test that killed it
    equivalent: frozenset[int] = frozenset()  # survivors accepted in equivalent_mutants.toml


@dataclass(frozen=True, slots=True)
class RestoreResult:
    restored: int  # verdicts written into mutants/
    survivors_dropped: int  # stored survivors left out: the killers changed since

    def line(self) -> str:
        dropped = (f", {self.survivors_dropped} stored survivors to test again (the tests "
                   "changed since)" if self.survivors_dropped else "")
        return f"mutation: restored {self.restored} verdicts from {STORE_PATH}{dropped}"


def killers_digest(root: Path) -> str:
    """sha256 of the tracked files the killer tests read (their paths and bytes)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", *KILLER_ROOTS], cwd=root,
                                capture_output=True, check=True).stdout.decode()
        paths = sorted(p for p in listed.split("\0") if p)
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk the folders
        paths = sorted(str(p.relative_to(root)) for top in KILLER_ROOTS
                       for p in (root / top).rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for path in paths:
        if Path(path) == STORE_PATH or not (root / path).is_file():
            continue
        digest.update(path.encode() + b"\0" + (root / path).read_bytes() + b"\0")
    return digest.hexdigest()


def _meta_path(mutants_dir: Path, module: str) -> Path:
    return mutants_dir / f"{module}.meta"


def collect(mutants_dir: Path, source_root: Path, equivalents: Path) -> list[FunctionVerdicts]:
    """Every judged function of `mutants_dir`, in a stable order."""
    killers = read_killers(mutants_dir)
    accepted, _ = classify(read_mutants(mutants_dir, source_root), load_equivalents(equivalents))
    functions: list[FunctionVerdicts] = []
    for meta in sorted(mutants_dir.rglob("*.py.meta")):
        module = str(meta.relative_to(mutants_dir).with_suffix(""))
        data = json.loads(meta.read_text(encoding="utf-8"))
        by_function: dict[str, dict[int, int]] = {}
        for name, code in data["exit_code_by_key"].items():
            if code is None:
                continue
            qualified, _, number = name.rpartition(_SEPARATOR)
            by_function.setdefault(qualified.rpartition(".")[2], {})[int(number)] = code
        for function, codes in sorted(by_function.items()):
            prefix = _mutant_prefix(module, function)
            functions.append(FunctionVerdicts(
                module, function, data["hash_by_function_name"].get(function, ""),
                dict(sorted(codes.items())),
                {n: killers[f"{prefix}{n}"] for n in sorted(codes)
                 if _detected(codes[n]) and f"{prefix}{n}" in killers},
                frozenset(n for n in codes
                          if f"{prefix}{n}" in accepted and not _detected(codes[n]))))
    return [f for f in functions if f.hash]


def _detected(exit_code: int) -> bool:
    return status_of(exit_code) in (KILLED, TIMEOUT)


def _mutant_prefix(module: str, function: str) -> str:
    dotted = module.removesuffix(".py").replace("/", ".")
    return f"{dotted}.{function}{_SEPARATOR}"


def save(mutants_dir: Path, source_root: Path, equivalents: Path,
         store: Path = STORE_PATH) -> int:
    """Write the store from `mutants_dir`; returns the verdicts written."""
    functions = collect(mutants_dir, source_root, equivalents)
    header = {"format": _FORMAT, "version": 1, "killers_digest": killers_digest(source_root)}
    lines = [json.dumps(header, sort_keys=True)]
    lines += [json.dumps({"module": f.module, "function": f.function, "hash": f.hash,
                          "exit_codes": {str(n): c for n, c in f.exit_codes.items()},
                          "killers": {str(n): t for n, t in f.killers.items()},
                          "equivalent": sorted(f.equivalent)},
                         ensure_ascii=False, sort_keys=True) for f in functions]
    store.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return sum(len(f.exit_codes) for f in functions)


def load(store: Path = STORE_PATH) -> tuple[str, list[FunctionVerdicts]]:
    """The store's killers digest and functions (none when there is no store yet)."""
    if not store.is_file():
        return "", []
    lines = store.read_text(encoding="utf-8").splitlines()
    try:
        header = json.loads(lines[0]) if lines else {}
    except json.JSONDecodeError as err:
        raise UserError(f"{store}:1: not JSON: {err.msg}") from None
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise UserError(f"{store}:1: not a verdict store (format {_FORMAT!r} expected)")
    functions = [_function(store, number, line)
                 for number, line in enumerate(lines[1:], start=2) if line.strip()]
    return str(header.get("killers_digest", "")), functions


def _function(store: Path, number: int, line: str) -> FunctionVerdicts:
    where = f"{store}:{number}"
    try:
        raw = json.loads(line)
        return FunctionVerdicts(
            str(raw["module"]), str(raw["function"]), str(raw["hash"]),
            {int(n): int(c) for n, c in raw["exit_codes"].items()},
            {int(n): str(t) for n, t in raw.get("killers", {}).items()},
            frozenset(int(n) for n in raw.get("equivalent", [])))
    except json.JSONDecodeError as err:
        raise UserError(f"{where}: not JSON: {err.msg}") from None
    except KeyError as err:
        raise UserError(f"{where}: missing field {err.args[0]!r}") from None
    except (AttributeError, TypeError, ValueError) as err:
        raise UserError(f"{where}: malformed entry: {err}") from None


def _empty_meta() -> dict[str, Any]:
    return {"exit_code_by_key": {}, "hash_by_function_name": {}, "type_check_error_by_key": {},
            "durations_by_key": {}, "estimated_durations_by_key": {}}


def restore(mutants_dir: Path, source_root: Path, store: Path = STORE_PATH) -> RestoreResult:
    """Write the stored verdicts into `mutants_dir` where it has none for the same function.

    A function the machine judged on another version of its source keeps the machine's
    verdicts (mutmut's hash decides which are still valid). A function the machine has no
    hash for gets the stored hash, and its module's mutant copy is removed so mutmut
    generates it again and compares that hash with the source's: verdicts of a function
    changed since they were stored are dropped by mutmut itself.
    """
    digest, functions = load(store)
    same_tests = digest == killers_digest(source_root)
    by_module: dict[str, list[FunctionVerdicts]] = {}
    for function in functions:
        by_module.setdefault(function.module, []).append(function)
    restored = dropped = 0
    killer_lines: list[str] = []
    known_killers = read_killers(mutants_dir)
    for module, stored in sorted(by_module.items()):
        meta = _meta_path(mutants_dir, module)
        data: dict[str, Any] = (json.loads(meta.read_text(encoding="utf-8"))
                                if meta.is_file() else _empty_meta())
        hashes: dict[str, str] = data["hash_by_function_name"]
        verdicts: dict[str, int | None] = data["exit_code_by_key"]
        regenerate = False
        for function in stored:
            local_hash = hashes.get(function.function)
            if local_hash is not None and local_hash != function.hash:
                continue
            if local_hash is None:
                hashes[function.function] = function.hash
                regenerate = True
            prefix = _mutant_prefix(module, function.function)
            for number, code in function.exit_codes.items():
                name = f"{prefix}{number}"
                if verdicts.get(name) is not None:
                    continue
                if not (same_tests or _detected(code) or number in function.equivalent):
                    dropped += 1
                    continue
                verdicts[name] = code
                restored += 1
                killer = function.killers.get(number)
                if killer is not None and name not in known_killers:
                    killer_lines.append(json.dumps({"mutant": name, "test": killer}))
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps(data, indent=4), encoding="utf-8")
        if regenerate:
            (mutants_dir / module).unlink(missing_ok=True)
    if killer_lines:
        with open(mutants_dir / KILLERS_FILE, "a", encoding="utf-8") as out:
            out.write("\n".join(killer_lines) + "\n")
    return RestoreResult(restored, dropped)
