"""`EncoderCacheManager`: which multimodal items' encoder outputs are kept, and for whom.

The encoder turns an item (an image) into embeddings once; the decoder reads them while its
chunks cover the item's placeholders. The cache is counted in embeddings and shared by item
identifier: a request showing an image that is cached (by itself earlier, or by another
request) takes a reference instead of running the encoder again.

An entry nobody references is not dropped: it becomes *freeable* and stays readable until an
allocation needs its room, when the oldest freeable entries are evicted (and reported to the
worker, which then drops the tensors). So `num_free_slots` is room never handed out and
`num_freeable_slots` adds the room of unreferenced entries.

Why a request's input ids are a `set` and iterated as one: the order in which inputs are freed
decides the order of `freeable`, hence what is evicted first, and upstream frees in the
iteration order of such a set; the twin performs the same insertions and removals, so CPython
gives it the same order.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from impl.sched.request import Request
from vtwin.errors import IntegrityError


class EncoderCacheManager:
    def __init__(self, cache_size: int) -> None:
        self.cache_size = cache_size
        self.num_free_slots = cache_size
        self.num_freeable_slots = cache_size
        # identifier -> ids of the requests referencing the entry (empty: freeable)
        self.cached: dict[str, set[str]] = {}
        # identifier -> embeddings the entry holds
        self.num_embeds_by_id: dict[str, int] = {}
        # request id -> indices of its inputs that hold a reference
        self.request_inputs: dict[str, set[int]] = {}
        # unreferenced entries, oldest first -> their embeddings
        self.freeable: OrderedDict[str, int] = OrderedDict()
        # entries evicted since the worker was last told
        self.freed: list[str] = []

    def reset(self) -> None:
        """Forget every entry (new weights make old embeddings stale)."""
        self.cached.clear()
        self.num_embeds_by_id.clear()
        self.request_inputs.clear()
        self.freeable.clear()
        self.freed.clear()
        self.num_free_slots = self.cache_size
        self.num_freeable_slots = self.cache_size

    def cached_num_embeds(self, identifier: str) -> int | None:
        """Embeddings the entry for `identifier` holds (None: no entry)."""
        return self.num_embeds_by_id.get(identifier)

    def check_and_update_cache(self, request: Request, input_id: int) -> bool:
        """Whether input `input_id` of `request` is cached already; if so the request now
        references it (an unreferenced entry stops being freeable)."""
        identifier = request.mm_features[input_id].identifier
        holders = self.cached.get(identifier)
        if holders is None:
            return False
        if not holders:
            self.num_freeable_slots -= self.freeable.pop(identifier)
        holders.add(request.request_id)
        self.request_inputs.setdefault(request.request_id, set()).add(input_id)
        return True

    def can_allocate(self, request: Request, input_id: int, compute_budget: int,
                     num_embeds_scheduled: int) -> bool:
        """Whether the input fits the step's encoder budget and, with the embeddings already
        chosen this step, the cache; evicts the oldest freeable entries when free room alone
        is short (eviction happens here, at decision time)."""
        needed = request.get_num_encoder_embeds(input_id)
        if needed > compute_budget:
            return False
        needed += num_embeds_scheduled
        if needed <= self.num_free_slots:
            return True
        if needed > self.num_freeable_slots:
            return False
        while needed > self.num_free_slots:
            identifier, embeds = self.freeable.popitem(last=False)
            del self.cached[identifier]
            del self.num_embeds_by_id[identifier]
            self.freed.append(identifier)
            self.num_free_slots += embeds
        return True

    def allocate(self, request: Request, input_id: int) -> None:
        """Take room for the input's embeddings (after `can_allocate` said yes)."""
        identifier = request.mm_features[input_id].identifier
        embeds = request.get_num_encoder_embeds(input_id)
        self.cached.setdefault(identifier, set()).add(request.request_id)
        stored = self.num_embeds_by_id.setdefault(identifier, embeds)
        assert stored == embeds, "allocation of an entry under another size"
        assert self.num_free_slots >= embeds and self.num_freeable_slots >= embeds
        self.request_inputs.setdefault(request.request_id, set()).add(input_id)
        self.num_free_slots -= embeds
        self.num_freeable_slots -= embeds

    def cached_input_ids(self, request: Request) -> set[int]:
        return self.request_inputs.get(request.request_id, set())

    def free_encoder_input(self, request: Request, input_id: int) -> None:
        """Drop the request's reference held through input `input_id`. A request showing the
        same item twice keeps its one reference until its last input of that item goes; an
        entry left without references becomes freeable."""
        request_id = request.request_id
        identifier = request.mm_features[input_id].identifier
        inputs = self.request_inputs.get(request_id)
        if inputs is not None:
            inputs.discard(input_id)
            if not inputs:
                del self.request_inputs[request_id]
        holders = self.cached.get(identifier)
        if not holders:
            return  # evicted already, or nobody references it
        features = request.mm_features
        if any(features[other].identifier == identifier
               for other in self.request_inputs.get(request_id, ())):
            return
        holders.discard(request_id)
        if not holders:
            embeds = self.num_embeds_by_id[identifier]
            self.freeable[identifier] = embeds
            self.num_freeable_slots += embeds

    def free(self, request: Request) -> None:
        """Drop every reference the request holds (it finished or was preempted)."""
        for input_id in list(self.cached_input_ids(request)):
            self.free_encoder_input(request, input_id)

    def get_freed_mm_hashes(self) -> list[str]:
        """Entries evicted since the last call, for the worker to drop; one evicted and then
        allocated again in the same step is still wanted and is left out."""
        freed = [identifier for identifier in self.freed if identifier not in self.cached]
        self.freed = []
        return freed

    @property
    def usage(self) -> float:
        """The share of the cache handed out to referenced or freeable entries."""
        return 0.0 if not self.cache_size else 1 - self.num_free_slots / self.cache_size

    def check_integrity(self, requests: Mapping[str, Request]) -> None:
        """Room adds up, freeable is exactly the unreferenced entries, and every reference a
        request holds is one the entry lists (raises `IntegrityError`)."""
        held = sum(self.num_embeds_by_id.values())
        if set(self.num_embeds_by_id) != set(self.cached):
            raise IntegrityError("encoder cache: entries and their sizes disagree")
        if self.num_free_slots != self.cache_size - held or self.num_free_slots < 0:
            raise IntegrityError(f"encoder cache: {self.num_free_slots} free slots, but "
                                 f"{held} of {self.cache_size} are held")
        unreferenced = {i for i, holders in self.cached.items() if not holders}
        if set(self.freeable) != unreferenced:
            raise IntegrityError("encoder cache: freeable entries are not the unreferenced ones")
        if any(self.freeable[i] != self.num_embeds_by_id[i] for i in self.freeable):
            raise IntegrityError("encoder cache: a freeable entry's size changed")
        if self.num_freeable_slots != self.num_free_slots + sum(self.freeable.values()):
            raise IntegrityError("encoder cache: freeable slots do not add up")
        for request_id, inputs in self.request_inputs.items():
            request = requests.get(request_id)
            if request is None:
                raise IntegrityError(f"encoder cache: request {request_id!r} is gone but "
                                     "still holds references")
            for input_id in inputs:
                identifier = request.mm_features[input_id].identifier
                if request_id not in self.cached.get(identifier, ()):
                    raise IntegrityError(f"encoder cache: request {request_id!r} input "
                                         f"{input_id} is not listed by entry {identifier!r}")
