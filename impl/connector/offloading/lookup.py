"""`Lookups`: how many tokens past a request's local hit the CPU tier can load.

Full-attention groups are asked first, each for the run of chunks present from the local hit
on (a prefix); then windowed groups, widest window first, each for the rightmost run of the
chunks its window needs (`windows.window_lookup`). Every group may shorten the hit, which
can undo an answer given before:

* a group whose answer was deferred (a chunk still being written) is asked again, with all
  the others, once the hit gets shorter;
* a windowed group's run was found for the longer hit; once a later group shortens it, the
  windowed groups are asked again for the shorter one.

The rounds go on until no group shortens the hit. A request's own `max_load_tokens` caps
the hit past its local one, and then cuts it, group by group, to whole chunks (without a cap
a group's hit may end inside a chunk: the request's last tokens). With a windowed group the
prompt's last token is never loaded (it is computed again for its logits, and a window must
still hold a hit after that). A hit whose chunks another request's load is reading right now
waits a step (`None`), as does a hit with a chunk still being written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.connector.offloading.events import ConnectorEvents
from impl.connector.offloading.keys import LookupResult, OffloadKey
from impl.connector.offloading.windows import load_window, window_lookup

if TYPE_CHECKING:
    from impl.connector.offloading.manager import CPUOffloadingManager
    from impl.connector.offloading.request_state import GroupShape, RequestOffload


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def lookup_order(shapes: tuple[GroupShape, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(every group in the order asked, the windowed ones alone): full-attention groups in
    group order, then windowed groups by window, widest first (ties in group order)."""
    full = tuple(i for i, shape in enumerate(shapes) if shape.window is None)
    windowed = tuple(sorted((i for i, shape in enumerate(shapes) if shape.window is not None),
                            key=lambda i: -(shapes[i].window or 0)))
    return full + windowed, windowed


class Lookups:
    manager: CPUOffloadingManager
    shapes: tuple[GroupShape, ...]
    chunks_being_loaded: set[OffloadKey] | None
    lookup_groups: tuple[int, ...]  # `lookup_order`, fixed at construction
    windowed_groups: tuple[int, ...]
    mamba_align_size: int | None  # `windows.mamba_align_tokens`
    partial_tail_tokens: int  # `partial_tails.partial_tail_tokens` (0: off)
    hash_block_tokens: int
    events: ConnectorEvents  # hits snapshot self-describing payloads

    def _lookup(self, state: RequestOffload) -> int | None:
        """The hit past the local one in tokens (0: none), or None to ask again next step:
        whole chunks (`_chunk_lookup`), then, where partial tails are on, a hash boundary
        inside the next block (`_partial_tail`)."""
        complete = self._chunk_lookup(state)
        state.partial_tail_boundary = None
        if complete is None or not self.partial_tail_tokens:
            return complete
        return self._partial_tail(state, complete)

    def _partial_tail(self, state: RequestOffload, complete: int) -> int | None:
        """A hit past the `complete` chunks that ends inside the next block: the rightmost
        hash boundary before the prompt's last token (and within the request's load cap)
        whose keys every group holds, readable. A boundary some group is still writing is
        passed over; if every one was, and no whole chunk hit, the request asks again."""
        num_local = state.num_local_tokens
        complete_end = num_local + complete
        request = state.request
        last = min(request.num_prompt_tokens - 1, complete_end + self.partial_tail_tokens - 1)
        limits = request.offload_limits
        if limits is not None and limits.max_load_tokens is not None:
            last = min(last, num_local + limits.max_load_tokens)
        step = self.hash_block_tokens
        last -= last % step
        pending = False
        for boundary in range(last, complete_end, -step):
            missed = waiting = False
            keys = []
            for shape in self.shapes:
                keys.append(state.chunk_key(shape, boundary))
                result = self.manager.lookup(keys[-1])
                if result is LookupResult.MISS:
                    missed = True
                    break
                waiting |= result is LookupResult.HIT_PENDING
            pending |= waiting
            if not missed and not waiting:
                for shape, key in zip(self.shapes, keys, strict=True):
                    self.events.record_partial(request, shape, boundary, key, lookup=True)
                state.partial_tail_boundary = boundary
                return boundary - num_local
        return None if pending and complete == 0 else complete

    def _chunk_lookup(self, state: RequestOffload) -> int | None:
        """The hit past the local one in whole chunks (the request's last tokens may end
        it), or None to ask again next step."""
        order, windowed = self.lookup_groups, self.windowed_groups
        num_local = state.num_local_tokens
        max_hit = state.request.num_tokens
        limits = state.request.offload_limits
        cap = None if limits is None else limits.max_load_tokens
        if cap is not None:
            max_hit = min(max_hit, num_local + cap)
        max_hit -= 1 if windowed else 0
        if windowed and self.mamba_align_size is not None:
            max_hit -= max_hit % self.mamba_align_size  # a mamba state ends a whole chunk
        num_hit = 0
        deferred = False
        pending: tuple[int, ...] = order
        while pending:
            groups, pending = pending, ()
            asked_window = False
            for index in groups:
                shape, group = self.shapes[index], state.groups[index]
                per_chunk = shape.tokens_per_chunk
                max_hit = min(max_hit, len(group.keys) * per_chunk)
                if cap is not None:
                    max_hit -= max_hit % per_chunk  # a capped load ends on a whole chunk
                if max_hit - num_local < per_chunk:
                    return 0
                start = num_local // per_chunk
                end = min(_cdiv(max_hit, per_chunk), len(group.keys))
                keys = group.keys[start:end]
                if shape.window is None:
                    found = self._prefix_hits(state, shape, start, keys)
                else:
                    first = load_window(shape.spec, shape.window, per_chunk,
                                        min(max_hit, end * per_chunk))
                    found = window_lookup(self.manager, keys, shape.window,
                                          first or shape.window)
                if found == 0:
                    return 0
                if found is None:
                    deferred = True
                else:
                    max_hit = min(max_hit, per_chunk * (start + found))
                new_hit = max_hit - num_local
                if new_hit < per_chunk:
                    return 0
                if new_hit < num_hit:
                    if deferred:
                        deferred = False  # a shorter hit: ask every group again
                        pending = order
                    elif asked_window and not pending:
                        pending = windowed  # do the windows found still end this hit?
                asked_window |= shape.window is not None
                num_hit = new_hit
        if deferred:
            return None
        if self.chunks_being_loaded and self._reads_chunks_being_loaded(state, num_hit):
            return None
        return num_hit

    def _reads_chunks_being_loaded(self, state: RequestOffload, num_hit: int) -> bool:
        """Whether the load of this hit would read a chunk another load is reading now."""
        assert self.chunks_being_loaded is not None
        num_local = state.num_local_tokens
        hit_end = num_local + num_hit
        for shape, group in zip(self.shapes, state.groups, strict=True):
            per_chunk = shape.tokens_per_chunk
            keys = group.keys[num_local // per_chunk:_cdiv(hit_end, per_chunk)]
            window = load_window(shape.spec, shape.window, per_chunk, hit_end)
            if window is not None:
                keys = keys[-window:]
            if any(key in self.chunks_being_loaded for key in keys):
                return True
        return False

    def _prefix_hits(self, state: RequestOffload, shape: GroupShape, start: int,
                     keys: list[OffloadKey]) -> int | None:
        """Chunks found from the start of `keys` (chunks `start`... of `shape`; None: one of
        them is still being written). Each hit may snapshot its self-describing payload."""
        found = 0
        deferred = False
        for chunk, key in enumerate(keys, start):
            result = self.manager.lookup(key)
            if result is LookupResult.MISS:
                break
            if result is LookupResult.HIT:
                self.events.record_lookup(state.request, shape, chunk, key)
            else:
                deferred = True
            found += 1
        return None if deferred else found
