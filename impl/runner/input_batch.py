"""`InputBatch`: the persistent, row-per-request state the runner builds each step from.

Requests keep their row across steps, so a decode step only writes one new token per row
instead of rebuilding every request's token list. Removing a request leaves a hole; `condense`
fills holes with the last rows so rows [0, num_reqs) are dense; `swap_rows` / `reorder` permute
rows (with their block-table rows). Token ids beyond `num_tokens` hold this step's drafts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from impl.runner.block_table import MultiGroupBlockTable
from impl.runner.request_state import RequestState


class InputBatch:
    def __init__(self, max_num_reqs: int, max_model_len: int, block_sizes: Sequence[int]) -> None:
        self.max_num_reqs = max_num_reqs
        self.max_model_len = max_model_len
        self.token_ids = np.zeros((max_num_reqs, max_model_len), dtype=np.int64)
        self.num_tokens = np.zeros(max_num_reqs, dtype=np.int64)
        self.num_computed_tokens = np.zeros(max_num_reqs, dtype=np.int64)
        self.block_table = MultiGroupBlockTable(max_num_reqs, max_model_len, block_sizes)
        self.states: list[RequestState | None] = []  # per row; None is a hole
        self.req_id_to_index: dict[str, int] = {}

    # -- membership -------------------------------------------------------------------------
    @property
    def num_reqs(self) -> int:
        return len(self.req_id_to_index)

    @property
    def req_ids(self) -> list[str]:
        """Request ids in row order (the batch must be condensed)."""
        return [state.req_id for state in self.states if state is not None]

    def __contains__(self, req_id: str) -> bool:
        return req_id in self.req_id_to_index

    def add_request(self, state: RequestState) -> int:
        if state.req_id in self.req_id_to_index:
            raise ValueError(f"request {state.req_id!r}: already in the batch")
        holes = [row for row, s in enumerate(self.states) if s is None]
        row = holes[0] if holes else len(self.states)
        if row >= self.max_num_reqs:
            raise ValueError(f"input batch is full ({self.max_num_reqs} requests)")
        if state.num_tokens > self.max_model_len:
            raise ValueError(f"request {state.req_id!r}: {state.num_tokens} tokens exceed "
                             f"max_model_len {self.max_model_len}")
        if row == len(self.states):
            self.states.append(state)
        else:
            self.states[row] = state
        self.req_id_to_index[state.req_id] = row
        tokens = state.all_token_ids
        self.token_ids[row, :len(tokens)] = tokens
        self.num_tokens[row] = len(tokens)
        self.num_computed_tokens[row] = state.num_computed_tokens
        self.block_table.add_row(state.block_ids, row)
        return row

    def remove_request(self, req_id: str) -> int | None:
        row = self.req_id_to_index.pop(req_id, None)
        if row is not None:
            self.states[row] = None
            self.block_table.clear_row(row)
        return row

    # -- row moves --------------------------------------------------------------------------
    def condense(self) -> None:
        """Move the last rows into the holes: only the moved rows change place."""
        self._trim()
        hole = 0
        while hole < len(self.states):
            if self.states[hole] is None:  # the last row is not a hole: trimmed
                self._move_row(len(self.states) - 1, hole)
                self._trim()
            hole += 1

    def _trim(self) -> None:
        while self.states and self.states[-1] is None:
            self.states.pop()

    def _move_row(self, src: int, dst: int) -> None:
        state = self.states[src]
        assert state is not None and self.states[dst] is None
        count = int(self.num_tokens[src])
        self.token_ids[dst, :count] = self.token_ids[src, :count]
        self.num_tokens[dst] = count
        self.num_computed_tokens[dst] = self.num_computed_tokens[src]
        self.block_table.move_row(src, dst)
        self.states[dst], self.states[src] = state, None
        self.req_id_to_index[state.req_id] = dst

    def swap_rows(self, a: int, b: int) -> None:
        if a == b:
            return
        for array in (self.token_ids, self.num_tokens, self.num_computed_tokens):
            array[[a, b]] = array[[b, a]]
        self.block_table.swap_rows(a, b)
        self.states[a], self.states[b] = self.states[b], self.states[a]
        for row in (a, b):
            state = self.states[row]
            if state is not None:
                self.req_id_to_index[state.req_id] = row

    def reorder(self, req_ids: Sequence[str]) -> None:
        """Put the given requests in rows 0, 1, ... in this order (the batch is condensed)."""
        for target, req_id in enumerate(req_ids):
            self.swap_rows(target, self.req_id_to_index[req_id])

    # -- tokens -----------------------------------------------------------------------------
    def append_tokens(self, row: int, token_ids: Sequence[int]) -> None:
        start = int(self.num_tokens[row])
        end = start + len(token_ids)
        if end > self.max_model_len:
            raise ValueError(f"batch row {row}: {end} tokens exceed max_model_len")
        self.token_ids[row, start:end] = token_ids
        self.num_tokens[row] = end

    def write_drafts(self, row: int, draft_token_ids: Sequence[int]) -> None:
        """Drafts go after the known tokens without counting as tokens: they are only inputs."""
        start = int(self.num_tokens[row])
        if start + len(draft_token_ids) > self.max_model_len:
            raise ValueError(f"batch row {row}: drafts exceed max_model_len")
        self.token_ids[row, start:start + len(draft_token_ids)] = draft_token_ids
