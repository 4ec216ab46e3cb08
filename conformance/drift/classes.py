"""Drift classes: which class a record field's difference falls in, its kind, and hints.

A class is a `StepRecord` field; the three small stats dicts (``blocks``, ``prefix_cache``,
``scheduler_stats``) are split by key, because each key is its own counting rule. Two extra
classes exist outside the records: ``none_hash`` (the per-run hash seed) and ``end`` (how each
side's run ended: finished, stalled or raised, and at which step).

Hints name the rule a difference probably comes from, from the evidence alone (no version is
named anywhere here): which block ids each side handed out before, which blocks held a hash
when they were freed, and the workload's ``long_prefill_token_threshold``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from workloads.model import EngineConfig

ABSENT = "<absent>"
FIELD_KINDS: dict[str, str] = {
    **dict.fromkeys(("scheduled", "scheduled_new", "scheduled_cached", "scheduled_resumed",
                     "num_scheduled_tokens", "total_num_scheduled_tokens",
                     "num_computed_tokens", "num_output_tokens", "spec_tokens", "preempted",
                     "finished", "aborted", "applied_step", "outputs", "finish_reasons",
                     "num_running", "num_waiting", "end"), "schedule"),
    **dict.fromkeys(("new_block_ids", "block_tables", "new_block_hashes", "blocks", "events",
                     "none_hash", "free_head", "cached_digest"), "kv-cache"),
    **dict.fromkeys(("num_common_prefix_blocks", "prefix_cache", "scheduler_stats"),
                    "reported"),
}
"""Every comparable field and its kind; `--ignore-field` accepts exactly these names."""
OPTIONAL_FIELDS = frozenset({"free_head", "cached_digest"})
"""Observed by some adapters only (None: not observed): compared when both sides have them."""
SCHEDULE_KINDS = frozenset({"schedule"})
SPLIT_FIELDS = frozenset({"blocks", "prefix_cache", "scheduler_stats"})
BLOCK_FIELDS = frozenset({"new_block_ids", "block_tables"})


def kind_of(cls: str) -> str:
    """A field's kind; a field added to the records later counts as KV-cache state until it
    is listed here."""
    return FIELD_KINDS.get(cls.split(".", 1)[0], "kv-cache")


def classes_of(name: str, x: Any, y: Any) -> Iterator[tuple[str, str, Any, Any]]:
    """(class, path, left value, right value) for each difference in field `name`."""
    if name in SPLIT_FIELDS and isinstance(x, dict) and isinstance(y, dict):
        for key in [*x, *(k for k in y if k not in x)]:
            if x.get(key, ABSENT) != y.get(key, ABSENT):
                yield f"{name}.{key}", f"{name}.{key}", x.get(key, ABSENT), y.get(key, ABSENT)
        return
    parts, a, b = first_path(x, y, (name,))
    yield name, render(parts), a, b


def first_path(x: Any, y: Any, parts: tuple[str | int, ...]
               ) -> tuple[tuple[str | int, ...], Any, Any]:
    """The first place (depth first, in key order) where two JSON values differ."""
    if isinstance(x, dict) and isinstance(y, dict):
        for key in [*x, *(k for k in y if k not in x)]:
            if key not in x or key not in y:
                return (*parts, key), x.get(key, ABSENT), y.get(key, ABSENT)
            if x[key] != y[key]:
                return first_path(x[key], y[key], (*parts, key))
    elif isinstance(x, list) and isinstance(y, list):
        for i in range(max(len(x), len(y))):
            if i >= len(x) or i >= len(y):
                return (*parts, i), x[i] if i < len(x) else ABSENT, y[i] if i < len(y) else ABSENT
            if x[i] != y[i]:
                return first_path(x[i], y[i], (*parts, i))
    return parts, x, y


def render(parts: tuple[str | int, ...]) -> str:
    out = str(parts[0])
    for part in parts[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


class _Blocks:
    """One side's block history: ids handed out so far, and whether each held a hash the last
    time its request was seen (group 0: positions below the request's hash count)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.hashed: dict[int, bool] = {}
        self.tables: dict[str, list[int]] = {}
        self.hash_counts: dict[str, int] = {}

    def after(self, record: dict[str, Any]) -> None:
        for ids in record["new_block_ids"].values():
            if ids:
                for group in ids:
                    self.seen.update(group)
        for rid, hashes in record["new_block_hashes"].items():
            self.hash_counts[rid] = self.hash_counts.get(rid, 0) + len(hashes)
        for rid, table in record["block_tables"].items():
            if table:
                self.tables[rid] = table[0]
        for rid in {*record["block_tables"], *record["new_block_hashes"]}:
            count = self.hash_counts.get(rid, 0)
            for position, block in enumerate(self.tables.get(rid, ())):
                self.hashed[block] = position < count

    def describe(self, block: int) -> str:
        if block not in self.seen:
            return "never-used"
        return "freed-hashed" if self.hashed.get(block, False) else "freed-unhashed"


class Hinter:
    """Hints for one workload's differences; `after` is fed every record pair in order, after
    its differences are hinted (a hint reads the history up to the step before)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.sides = (_Blocks(), _Blocks())
        self.current: tuple[dict[str, Any], dict[str, Any]] = ({}, {})

    def at(self, a: dict[str, Any], b: dict[str, Any]) -> None:
        """The record pair about to be hinted (some hints read the rest of the step)."""
        self.current = (a, b)

    def after(self, a: dict[str, Any], b: dict[str, Any]) -> None:
        self.sides[0].after(a)
        self.sides[1].after(b)

    def hint(self, name: str, path: str, x: Any, y: Any) -> str | None:
        if name in BLOCK_FIELDS:
            return self._block_hint(x, y)
        if name == "num_scheduled_tokens":
            if not (isinstance(x, int) and isinstance(y, int)):
                return None
            threshold = self.config.long_prefill_token_threshold
            if threshold and (x == threshold) != (y == threshold):
                return (f"one side cuts a prefill chunk at long_prefill_token_threshold "
                        f"({threshold}), the other schedules {max(x, y)} tokens")
            return "a different number of tokens for a request"
        if name == "num_common_prefix_blocks" and (x == [] or y == []):
            return "filled on one side, empty on the other"
        if name.startswith("prefix_cache"):
            return self._stats_hint(path, x, y)
        if name == "events" and path.endswith(".group") and (x is None) != (y is None):
            return "events without a KV-cache group on one side (an older event format)"
        return None

    def _stats_hint(self, path: str, x: Any, y: Any) -> str:
        a, _ = self.current
        unadmitted = a.get("num_waiting", 0) > 0 and not a.get("scheduled_new")
        if (x == 0) != (y == 0) and unadmitted:
            return ("prefix-cache stats: one side counts the lookup of a waiting request that "
                    "was not admitted in that step, the other only admitted ones")
        return f"prefix-cache statistics counted by another rule ({path})"

    def _block_hint(self, x: Any, y: Any) -> str:
        if not (isinstance(x, int) and isinstance(y, int)):
            return "a different number of blocks"
        kinds = (self.sides[0].describe(x), self.sides[1].describe(y))
        if kinds[0] == kinds[1]:
            return f"both take a {kinds[0]} block, another one (free-queue order)"
        if "freed-unhashed" in kinds and "never-used" in kinds:
            return ("one side reuses a block freed without a hash where the other takes a "
                    "never-used one: the free-queue position of freed blocks without a hash")
        return f"one side takes a {kinds[0]} block, the other a {kinds[1]} one"
