"""Structured output for upstream's scheduler: grammars the harness compiles, step by step.

Upstream's engine compiles a request's grammar on a thread pool and stores the `Future` on the
request; the scheduler polls it. The adapter does the same with a `Future` it resolves itself
at the workload's step (`compile_grammar`): with a `StaticGrammar`, or with an exception for a
grammar that fails. `StaticGrammar` is upstream's `StructuredOutputGrammar` interface over the
workload's rule (a token range plus the request's ending tokens), so upstream's own
`StructuredOutputManager` validates drafts and fills the bitmask; its backend only allocates
the bitmask (no tokenizer, no grammar library is involved).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from workloads.model import RequestSpec


class GrammarCompileFailed(ValueError):
    """What a failing compile raises (the workload's `grammar.fails`)."""


def structured_outputs() -> Any:
    """The sampling parameters' structured-output part for a request with a grammar (a regex
    stands for any grammar: upstream's scheduler never reads the constraint itself)."""
    from vllm.sampling_params import StructuredOutputsParams

    return StructuredOutputsParams(regex=".*")  # never compiled: `finish_compile` decides


def start_compile(upstream_request: Any) -> None:
    """Put the grammar's compile in flight: the request waits until it resolves."""
    upstream_request.structured_output_request.grammar = Future()


def finish_compile(scheduler: Any, spec: RequestSpec, failed: bool) -> None:
    """Resolve `spec`'s compile: a `StaticGrammar`, or the exception a failed compile raised.
    A request aborted meanwhile is left alone."""
    request = scheduler.requests.get(spec.request_id)
    if request is None or request.structured_output_request is None:
        return
    future = request.structured_output_request._grammar
    if not isinstance(future, Future):
        return
    grammar = spec.grammar
    assert grammar is not None
    if failed:
        future.set_exception(GrammarCompileFailed(f"grammar of {spec.request_id!r}"))
    else:
        ends = {*spec.stop_token_ids, *(() if spec.eos_token_id is None
                                        else (spec.eos_token_id,))}
        future.set_result(static_grammar(grammar.allowed_lo, grammar.allowed_hi, ends))


def install_backend(scheduler: Any) -> None:
    """Give upstream's structured-output manager a backend that only allocates bitmasks."""
    import torch
    from vllm.v1.structured_output.backend_types import StructuredOutputBackend

    class BitmaskOnlyBackend(StructuredOutputBackend):  # type: ignore[misc]
        def compile_grammar(self, request_type: Any, grammar_spec: str) -> Any:
            raise AssertionError("the harness compiles grammars itself")

        def allocate_token_bitmask(self, max_num_seqs: int) -> Any:
            return torch.zeros((max_num_seqs, (vocab_size + 31) // 32), dtype=torch.int32)

        def destroy(self) -> None:
            pass

    manager = scheduler.structured_output_manager
    vocab_size = manager.vllm_config.model_config.get_vocab_size()
    manager.backend = BitmaskOnlyBackend(manager.vllm_config, None, vocab_size)


def static_grammar(lo: int, hi: int, ends: set[int]) -> Any:
    """A grammar accepting ``[lo, hi)`` and `ends` at every position (it never terminates)."""
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

    class StaticGrammar(StructuredOutputGrammar):  # type: ignore[misc]
        def _accepts(self, token: int) -> bool:
            return lo <= token < hi or token in ends

        def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
            return all(self._accepts(t) for t in tokens)

        def validate_tokens(self, tokens: list[int]) -> list[int]:
            valid: list[int] = []
            for token in tokens:
                if not self._accepts(token):
                    break
                valid.append(token)
            return valid

        def rollback(self, num_tokens: int) -> None:
            pass

        def fill_bitmask(self, bitmask: Any, batch_index: int) -> None:
            bitmask[batch_index].fill_(0)

        def is_terminated(self) -> bool:
            return False

        def reset(self) -> None:
            pass

    return StaticGrammar()
