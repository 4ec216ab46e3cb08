"""The deterministic token model: what the "model" samples, drafts and accepts.

Both systems must see the same tokens, so a sampled token is a pure function of the workload's
token seed, the request id and the output position; no RNG state is carried between calls and
Python's `hash()` is never used (PYTHONHASHSEED must not matter). The model plays the sampler,
so it also does what upstream's sampler does around stopping:

* EOS is emitted at output index ``max(plan.eos_at, min_tokens)``: the model wants to stop at
  `eos_at`, and the min-tokens logits processor masks EOS and stop tokens until `min_tokens`
  outputs exist (upstream's scheduler does not look at min_tokens at all);
* a request with `stop_token_ids` emits one of them at a seeded index in ``[0, 2 * max_tokens)``
  (so about half never reach theirs), again no earlier than `min_tokens`;
* every other token is drawn from the vocabulary minus EOS and the request's stop tokens, or,
  for a request with a grammar, from the grammar's allowed range minus those (the grammar's
  bitmask masks the rest); the drafter does not know the grammar, so its wrong guesses come
  from the whole vocabulary.

Speculative decoding: the verifier accepts ``plan.spec_acceptance[i]`` drafts at the request's
i-th verification step (none past the end of the plan); requests without a plan get a seeded
acceptance in ``[0, k]`` per step, so generated workloads exercise rejections too.
"""

from __future__ import annotations

import hashlib

from workloads.model import PlanSpec, RequestSpec, Workload

_MASK64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread 64-bit permutation."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _key(seed: int, request_id: str, purpose: str) -> int:
    digest = hashlib.blake2b(f"{seed}/{request_id}/{purpose}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class _RequestModel:
    """Everything the model needs about one request, precomputed once."""

    __slots__ = ("acceptance", "accept_key", "eos_index", "eos_token", "forbidden", "grammar",
                 "stop_index", "stop_token", "token_key")

    def __init__(self, seed: int, request: RequestSpec, plan: PlanSpec | None) -> None:
        rid = request.request_id
        self.token_key = _key(seed, rid, "token")
        self.accept_key = _key(seed, rid, "accept")
        self.eos_token = request.eos_token_id
        self.forbidden = frozenset(request.stop_token_ids) | (
            frozenset() if request.eos_token_id is None else {request.eos_token_id})
        self.eos_index: int | None = None
        if plan is not None and plan.eos_at is not None and request.eos_token_id is not None:
            self.eos_index = max(plan.eos_at, request.min_tokens)
        self.stop_index: int | None = None
        self.stop_token: int | None = None
        if request.stop_token_ids:
            stop_key = _key(seed, rid, "stop")
            self.stop_index = max(stop_key % (2 * max(request.max_tokens, 1)),
                                  request.min_tokens)
            self.stop_token = request.stop_token_ids[(stop_key >> 32)
                                                     % len(request.stop_token_ids)]
        self.acceptance = None if plan is None else plan.spec_acceptance
        self.grammar = request.grammar


class TokenModel:
    def __init__(self, workload: Workload) -> None:
        self.seed = workload.token_seed
        self.vocab_size = workload.vocab_size
        plans = workload.plans_by_request()
        self._requests = {r.request_id: _RequestModel(self.seed, r, plans.get(r.request_id))
                          for r in workload.requests}

    def token(self, request_id: str, index: int) -> int:
        """The token sampled at output index `index` (0 is the first generated token)."""
        m = self._requests[request_id]
        if index == m.eos_index and m.eos_token is not None:
            return m.eos_token
        if index == m.stop_index and m.stop_token is not None:
            return m.stop_token
        if m.grammar is not None:
            return self._plain(m, m.token_key, index, m.grammar.allowed_lo,
                               m.grammar.allowed_hi)
        return self._plain(m, m.token_key, index)

    def draft(self, request_id: str, start: int, num_tokens: int, accepted: int) -> list[int]:
        """`num_tokens` drafts for output indices from `start`: the first `accepted` are the
        tokens the model will sample, the rest are wrong guesses (so a rejection is real)."""
        m = self._requests[request_id]
        out = []
        for j in range(num_tokens):
            true = self.token(request_id, start + j)
            if j < accepted:
                out.append(true)
            else:
                wrong = self._plain(m, m.token_key ^ 0x5DEECE66D, start + j)
                out.append(wrong if wrong != true else (wrong + 1) % self.vocab_size)
        return out

    def accepted(self, request_id: str, verify_index: int, num_spec_tokens: int) -> int:
        """Drafts the verifier accepts at the request's `verify_index`-th verification step."""
        m = self._requests[request_id]
        if m.acceptance is not None:
            plan = m.acceptance
            return plan[verify_index] if verify_index < len(plan) else 0
        return _mix(m.accept_key ^ verify_index) % (num_spec_tokens + 1)

    def _plain(self, m: _RequestModel, key: int, index: int, lo: int = 0,
               hi: int | None = None) -> int:
        """A token of ``[lo, hi)`` (the vocabulary by default) that is not EOS or a stop
        token (the workload checks that the range holds one)."""
        span = (self.vocab_size if hi is None else hi) - lo
        x = key ^ index
        while True:
            x = _mix(x)
            token = lo + x % span
            if token not in m.forbidden:
                return token
