"""Prompt hashing: the four hash functions x block sizes 16 / 32 / 512 on an 8k-token prompt.

A timed call hashes every full block of the prompt, exactly what building a request does.
`setup` first checks that both systems produce identical hash values for these inputs: a
speed-up with different values would not be a speed-up of the same thing.
"""

from __future__ import annotations

from .common import SYSTEMS, memo, require, submodule

scenarios = submodule("scenarios")
systems = submodule("systems")


class HashPrompt:
    params = [SYSTEMS, list(systems.HASH_ALGOS), [16, 32, 512]]
    param_names = ["system", "algo", "block_size"]

    def setup(self, system: str, algo: str, block_size: int) -> None:
        require("impl.core.request_hasher", "impl.sched.request")
        memo(("same", algo, block_size), lambda: scenarios.same_hashes(algo, block_size))
        self.state = memo(("hash", system, algo, block_size),
                          lambda: scenarios.HashPrompt(system, algo, block_size))

    def time_hash_prompt(self, system: str, algo: str, block_size: int) -> None:
        self.state.run()
