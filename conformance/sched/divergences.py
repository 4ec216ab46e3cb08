"""Known divergences: differences from upstream we accept on purpose, each with its reason.

The file is TOML (`conformance/divergences.toml` by default), one table per entry::

    [[divergence]]
    id = "spec-decode-async:num_scheduled_tokens"   # WORKLOAD:FIELD, as reports print it
    level = "schedule"      # the weakest level this divergence breaks
    reason = "why we accept it, with a link"

An entry may name the pair of systems it is about, as specs (`conformance.systems.specs`; order and
spelling do not matter, ``upstream`` and ``upstream-0.32.0`` are one system)::

    [[divergence]]
    id = "hybrid-mamba:end"
    level = "schedule"
    systems = ["impl", "vllm==0.33.0"]
    reason = "..."

Such an entry only exists for runs of that pair; an entry without ``systems`` holds for every
pair. So one file keeps what is known between the twin and each release apart.

An entry waives a workload's first divergence at a level when the ids match and that level is
at least as strict as the entry's (a divergence that breaks `schedule` also breaks `renamed`
and `exact`). An entry that waives nothing in a run that could have hit it (its workload ran,
at a level at least as strict as its own) is stale, and a stale entry fails the run: a known
divergence that went away must be deleted, not left to hide a new one.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from conformance.paths import DIVERGENCES_TOML
from conformance.sched.compare import LEVELS, Divergence, stricter_or_equal
from vtwin.errors import UserError

DEFAULT_PATH = DIVERGENCES_TOML
_KEYS = frozenset({"id", "level", "reason"})
_OPTIONAL = frozenset({"systems"})


@dataclass(frozen=True, slots=True)
class KnownDivergence:
    id: str
    level: str
    reason: str
    systems: tuple[str, str] | None = None
    """The pair of system specs this entry is about (None: every pair)."""

    def for_pair(self, left: str, right: str) -> bool:
        """Whether this entry holds for a run of `left` against `right` (either order)."""
        if self.systems is None:
            return True
        return sorted(map(_canonical, self.systems)) == sorted(map(_canonical, (left, right)))

    @property
    def workload(self) -> str:
        return self.id.rsplit(":", 1)[0]

    def waives(self, divergence: Divergence) -> bool:
        return divergence.id == self.id and stricter_or_equal(divergence.level, self.level)

    def applies(self, workload: str, level: str) -> bool:
        """Whether a run of `workload` at `level` could have hit this entry."""
        return workload == self.workload and stricter_or_equal(level, self.level)


def load_known(path: Path) -> tuple[KnownDivergence, ...]:
    """Read and check a known-divergences file; a missing default file means no entries."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if path == DEFAULT_PATH:
            return ()
        raise UserError(f"{path}: known-divergences file not found") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read known-divergences file: {err}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"{path}: not valid TOML: {err}") from None
    extra = set(data) - {"divergence"}
    if extra:
        raise UserError(f"{path}: unknown top-level key {sorted(extra)[0]!r} "
                        "(entries go in [[divergence]] tables)")
    entries = data.get("divergence", [])
    if not isinstance(entries, list):
        raise UserError(f"{path}: 'divergence' must be an array of tables ([[divergence]])")
    known = [_entry(path, index, raw) for index, raw in enumerate(entries, 1)]
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for index, entry in enumerate(known, 1):
        key = (entry.id, tuple(sorted(map(_canonical, entry.systems or ()))))
        if key in seen:
            pair = f" for systems {list(entry.systems)}" if entry.systems else ""
            raise UserError(f"{path}: divergence #{index}: duplicate id {entry.id!r}{pair}")
        seen.add(key)
    return tuple(known)


def _canonical(spec: str) -> str:
    """A spec as one string whatever its spelling (`upstream-0.32.0` is `upstream`; the twin
    is `impl` whichever release it follows: the pair's other side says which)."""
    from conformance.systems.specs import parse_spec

    parsed = parse_spec(spec)
    version = None if parsed.kind == "impl" else parsed.version
    return repr((parsed.kind, version, parsed.path, parsed.target, parsed.scheduler_cls,
                 parsed.worker))


def _entry(path: Path, index: int, raw: object) -> KnownDivergence:
    where = f"{path}: divergence #{index}"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: must be a table")
    unknown = set(raw) - _KEYS - _OPTIONAL
    if unknown:
        raise UserError(f"{where}: unknown field {sorted(unknown)[0]!r} (fields: id, level, "
                        "reason, systems)")
    for key in sorted(_KEYS):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise UserError(f"{where}: field {key!r} must be a non-empty string")
    workload, sep, field = raw["id"].rpartition(":")
    if not sep or not workload or not field:
        raise UserError(f"{where}: field 'id' must look like WORKLOAD:FIELD, got {raw['id']!r}")
    if raw["level"] not in LEVELS:
        raise UserError(f"{where}: field 'level' must be one of {', '.join(LEVELS)}, "
                        f"got {raw['level']!r}")
    return KnownDivergence(raw["id"], raw["level"], raw["reason"].strip(),
                           _systems(where, raw.get("systems")))


def _systems(where: str, raw: object) -> tuple[str, str] | None:
    if raw is None:
        return None
    if not (isinstance(raw, list) and len(raw) == 2
            and all(isinstance(s, str) and s.strip() for s in raw)):
        raise UserError(f"{where}: field 'systems' must be two system specs, e.g. "
                        f'["impl", "vllm==0.33.0"], got {raw!r}')
    for spec in raw:
        try:
            _canonical(spec)
        except UserError as err:
            raise UserError(f"{where}: field 'systems': {err}") from None
    return raw[0].strip(), raw[1].strip()


def find_waiver(known: Iterable[KnownDivergence],
                divergence: Divergence) -> KnownDivergence | None:
    return next((k for k in known if k.waives(divergence)), None)


def stale_entries(known: Iterable[KnownDivergence], level: str,
                  ran: Iterable[str], used: Iterable[KnownDivergence]) -> list[KnownDivergence]:
    """Entries a run at `level` over workloads `ran` could have used but did not."""
    ran_set, used_set = set(ran), set(used)
    return [k for k in known
            if k not in used_set and any(k.applies(w, level) for w in ran_set)]
