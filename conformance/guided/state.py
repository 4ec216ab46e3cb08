"""State-level features: rare states that arcs cannot tell apart.

Any miss in a hit scan executes the same `break`, so arc novelty cannot see a hole *inside* a
cached run, or a hybrid search that a later attention type sent round again. `StateProbe`
watches the twin's hit searches in this process (it wraps their classes' methods from outside;
nothing in `impl/` knows about it) and adds a feature for each such state a run reached:

- ``("state", "<manager>:miss-before-window-end", 0, 0)``: a type's scan stopped before the
  end of what it may hit, and ``"<manager>:hole"`` when a block past the miss is still cached
  (a hole inside a cached run, the state the chunked-local and sliding-window scans must stop
  at);
- ``("state", "hybrid:<n>-types", lookups, 0)``: how many single-type lookups one hybrid
  search made (more than the types: a later type shortened the hit and the others were asked
  again);
- ``("state", "sched:scheduled-after-<event>", bound, 0)``: within one step, a request was
  scheduled after a running request scheduled earlier in the step was preempted
  (``taken-back``: its tokens go back to the budget) or after an admitted decode was padded to
  the uniform spec-decode width (``padding``: the padded slots count); ``bound`` is 1 when
  the budget left cut that request's chunk. Those are the states where a budget given back wrongly
  shows: arcs see each event, not one followed by a chunk the budget cut.

Installed once per process (`install`; `uninstall` puts the methods back), on the pure-Python
twin only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.guided.features import Feature

STATE = "state"
SCAN = "find_longest_cache_hit"
"""The single-type hit scan each manager class defines (a classmethod)."""


@dataclass(slots=True)
class StateProbe:
    features: set[Feature] = field(default_factory=set)
    lookups: list[int] = field(default_factory=list)
    installed: bool = False
    originals: list[tuple[Any, str, Any]] = field(default_factory=list)
    """(owner, attribute, what it held) for each wrapped method, for `uninstall`."""
    victim_plan: object | None = None
    """The last step plan that took a preempted request's tokens back."""
    padded_plan: object | None = None
    """The last step plan that admitted a decode padded to the uniform spec-decode width."""
    padding: bool = False
    """The admission under way was just padded (its own `schedule` call comes next)."""

    def take(self) -> frozenset[Feature]:
        """The features since the last call."""
        taken = frozenset(self.features)
        self.features.clear()
        return taken

    def install(self) -> None:
        if self.installed:
            return
        from impl.core import coordinator
        from impl.core.single_type_manager import SingleTypeKVCacheManager

        for cls in _subclasses(SingleTypeKVCacheManager):
            method = cls.__dict__.get(SCAN)
            if isinstance(method, classmethod):
                self.originals.append((cls, SCAN, method))
                setattr(cls, SCAN, classmethod(self._scan(cls.__name__, method.__func__)))
        search = "find_hybrid_hit"  # the coordinator's own reference to the hybrid search
        self.originals.append((coordinator, search, getattr(coordinator, search)))
        setattr(coordinator, search, self._hybrid(getattr(coordinator, search)))
        from impl.sched.admission_rules import AdmissionRules
        from impl.sched.step_plan import StepPlan

        for owner, name, wrap in ((StepPlan, "take_back", self._take_back),
                                  (StepPlan, "schedule", self._schedule),
                                  (AdmissionRules, "_uniform_decode_padding", self._padding)):
            self.originals.append((owner, name, getattr(owner, name)))
            setattr(owner, name, wrap(getattr(owner, name)))
        self.installed = True

    def uninstall(self) -> None:
        """Put every wrapped method back (a test's process goes on with the plain twin)."""
        for owner, name, original in reversed(self.originals):
            setattr(owner, name, original)
        self.originals.clear()
        self.installed = False

    def _scan(self, name: str, scan: Callable[..., Any]) -> Callable[..., Any]:
        def watched(cls: type, block_hashes: Sequence[bytes], max_length: int,
                    group_ids: Sequence[int], block_pool: Any, spec: Any, *rest: Any) -> Any:
            hits, length = scan(cls, block_hashes, max_length, group_ids, block_pool, spec,
                                *rest)
            if self.lookups:
                self.lookups[-1] += 1
            block_size = spec.block_size
            end = min(max_length // block_size, len(block_hashes))
            got = -(-length // block_size)
            if got < end:
                self.features.add((STATE, f"{name}:miss-before-window-end", 0, 0))
                if any(block_pool.get_cached_block(block_hashes[i], group_ids) is not None
                       for i in range(got + 1, end)):
                    self.features.add((STATE, f"{name}:hole", 0, 0))
            return hits, length
        return watched

    def _take_back(self, take_back: Callable[..., Any]) -> Callable[..., Any]:
        def watched(plan: Any, request: Any) -> Any:
            self.victim_plan = plan
            return take_back(plan, request)
        return watched

    def _padding(self, padding: Callable[..., Any]) -> Callable[..., Any]:
        def watched(scheduler: Any, num_computed: int, num_new: int) -> int:
            pad: int = padding(scheduler, num_computed, num_new)
            self.padding = pad > 0
            return pad
        return watched

    def _schedule(self, schedule: Callable[..., Any]) -> Callable[..., Any]:
        def watched(plan: Any, request: Any, num_new: int, blocks: Any) -> Any:
            bound = int(num_new >= plan.token_budget)
            if plan is self.victim_plan:
                self.features.add((STATE, "sched:scheduled-after-taken-back", bound, 0))
            if plan is self.padded_plan:
                self.features.add((STATE, "sched:scheduled-after-padding", bound, 0))
            if self.padding:  # this is the padded admission itself
                self.padded_plan, self.padding = plan, False
            return schedule(plan, request, num_new, blocks)
        return watched

    def _hybrid(self, search: Callable[..., Any]) -> Callable[..., Any]:
        def watched(block_hashes: Sequence[bytes], hash_block_size: int, max_length: int,
                    spec_groups: Sequence[Any], *rest: Any, **named: Any) -> Any:
            self.lookups.append(0)
            try:
                return search(block_hashes, hash_block_size, max_length, spec_groups, *rest,
                              **named)
            finally:
                made = self.lookups.pop()
                self.features.add((STATE, f"hybrid:{len(spec_groups)}-types", made, 0))
        return watched


def _subclasses(cls: type[Any]) -> list[type[Any]]:
    found: list[type[Any]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found
