"""Surviving mutants we accept, each with its reason: `conformance/equivalent_mutants.toml`.

Two kinds of entry::

    [[mutant]]                  # one mutant that cannot change behaviour
    id = "impl.core.block_pool.xǁBlockPoolǁtouch__mutmut_3"
    sha = "0123456789ab"        # optional: `Mutant.sha`, the hash of its changed lines
    reason = "why no observable can tell it from the original"

    [[function]]                # every mutant of one function that is not behaviour
    name = "impl.core.block.xǁKVCacheBlockǁ__repr__"
    reason = "debug text only: no observable, no decision reads it"

A `sha` pins the entry to the mutation it was written for: mutmut numbers mutants per function,
so an edited function can give the same id to a different mutation, and then the entry no longer
applies; with a sha the entry follows its mutation to its new number instead (same function,
same changed lines), so editing a function elsewhere does not make its entries stale. An entry
that matches no mutant (or whose sha no longer matches) is stale, and a stale entry fails the
run, as for known divergences: the reason went away with the code.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from conformance.mutation.results import Mutant
from conformance.paths import EQUIVALENT_MUTANTS_TOML
from vtwin.errors import UserError

DEFAULT_PATH = EQUIVALENT_MUTANTS_TOML
_MUTANT_KEYS = frozenset({"id", "sha", "reason"})
_FUNCTION_KEYS = frozenset({"name", "reason"})


@dataclass(frozen=True, slots=True)
class Equivalent:
    kind: str           # "mutant" or "function"
    key: str            # mutant id or function name
    reason: str
    sha: str | None = None

    def matches(self, mutant: Mutant) -> bool:
        if self.kind == "function":
            return mutant.function == self.key
        if self.sha is None:
            return mutant.id == self.key
        # The sha names the mutation itself, so it still finds it after an edit elsewhere in
        # the function renumbered the function's mutants (the number in the id moved).
        return self.sha == mutant.sha and mutant.function == self.key.rsplit("__mutmut_", 1)[0]

    def describe(self) -> str:
        return f"[[{self.kind}]] {self.key}" + (f" (sha {self.sha})" if self.sha else "")


def _entry(kind: str, index: int, raw: object, path: Path) -> Equivalent:
    where = f"{path}: [[{kind}]] #{index + 1}"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: not a table")
    keys = _MUTANT_KEYS if kind == "mutant" else _FUNCTION_KEYS
    unknown = set(raw) - keys
    if unknown:
        raise UserError(f"{where}: unknown keys {sorted(unknown)} (allowed: {sorted(keys)})")
    key = raw.get("id" if kind == "mutant" else "name")
    reason, sha = raw.get("reason"), raw.get("sha")
    if not isinstance(key, str) or not key:
        raise UserError(f"{where}: needs a non-empty {'id' if kind == 'mutant' else 'name'}")
    if not isinstance(reason, str) or not reason.strip():
        raise UserError(f"{where} ({key}): needs a reason")
    if sha is not None and not isinstance(sha, str):
        raise UserError(f"{where} ({key}): sha must be a string (got {sha!r})")
    return Equivalent(kind, key, reason.strip(), sha)


def load_equivalents(path: Path) -> tuple[Equivalent, ...]:
    """Read and check the file; a missing default file means no entries."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if path == DEFAULT_PATH:
            return ()
        raise UserError(f"{path}: equivalent-mutants file not found") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{path}: not valid TOML: {err}") from None
    unknown = set(data) - {"mutant", "function"}
    if unknown:
        raise UserError(f"{path}: unknown tables {sorted(unknown)} (allowed: mutant, function)")
    entries: list[Equivalent] = []
    for kind in ("mutant", "function"):
        raw = data.get(kind, [])
        if not isinstance(raw, list):
            raise UserError(f"{path}: {kind} must be an array of tables ([[{kind}]])")
        entries.extend(_entry(kind, i, item, path) for i, item in enumerate(raw))
    seen: set[tuple[str, str]] = set()
    for entry in entries:
        if (entry.kind, entry.key) in seen:
            raise UserError(f"{path}: {entry.describe()} is listed twice")
        seen.add((entry.kind, entry.key))
    return tuple(entries)


def classify(mutants: Iterable[Mutant], entries: Iterable[Equivalent]
             ) -> tuple[dict[str, Equivalent], list[Equivalent]]:
    """Which mutants are accepted as equivalent (by id, with the entry), and the stale entries.

    A mutant entry wins over a function entry. An entry is stale when it matches no mutant at
    all; a mutant it matches that the suite kills anyway is reported, not waived (see report).
    """
    mutants = list(mutants)
    ordered = sorted(entries, key=lambda e: e.kind != "mutant")
    accepted: dict[str, Equivalent] = {}
    stale: list[Equivalent] = []
    by_id = {m.id: m for m in mutants}
    for entry in ordered:
        same = by_id.get(entry.key)
        if entry.kind == "mutant" and same is not None and entry.matches(same):
            matched = [same]  # still under its id: an identical mutation elsewhere is another
        else:
            matched = [m for m in mutants if entry.matches(m)]
        if not matched:
            stale.append(entry)
        for mutant in matched:
            accepted.setdefault(mutant.id, entry)
    return accepted, stale
