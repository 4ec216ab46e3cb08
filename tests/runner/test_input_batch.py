"""Block tables and the persistent input batch: add, remove, condense, swap, reorder."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the model runner needs torch")
np = pytest.importorskip("numpy", reason="the model runner needs numpy")

from impl.runner.block_table import BlockTable, MultiGroupBlockTable  # noqa: E402
from impl.runner.input_batch import InputBatch  # noqa: E402
from impl.runner.request_state import RequestState  # noqa: E402
from impl.runner.sampling_params import SamplingParams  # noqa: E402


def _state(req_id: str, prompt: list[int], blocks: list[int], computed: int = 0,
           groups: int = 1) -> RequestState:
    return RequestState(req_id, prompt, [], tuple(list(blocks) for _ in range(groups)),
                        computed, SamplingParams(), None)


def test_block_table_rows_and_slots() -> None:
    table = BlockTable(max_num_reqs=3, max_num_blocks_per_req=4, block_size=4)
    table.add_row([5, 2], 0)
    table.append_row([9], 0)
    table.add_row([7], 1)
    assert table.row(0) == [5, 2, 9] and table.row(1) == [7]
    slots = table.slot_mapping(np.array([0, 0, 0, 1]), np.array([0, 5, 9, 3]))
    assert slots.tolist() == [20, 9, 37, 31]
    table.swap_rows(0, 1)
    assert table.row(0) == [7] and table.row(1) == [5, 2, 9]
    table.move_row(1, 2)
    assert table.row(2) == [5, 2, 9] and table.row(1) == []
    with pytest.raises(ValueError, match="position 4 of batch row 0 has no block"):
        table.slot_mapping(np.array([0]), np.array([4]))
    with pytest.raises(ValueError, match="exceed the maximum 4"):
        table.append_row([1, 2, 3, 4], 2)


def test_resumed_row_replaces_instead_of_appending() -> None:
    tables = MultiGroupBlockTable(2, max_model_len=16, block_sizes=[4, 4])
    tables.add_row([[1, 2], [3]], 0)
    tables.append_row([[4], []], 0)
    assert tables[0].row(0) == [1, 2, 4] and tables[1].row(0) == [3]
    tables.add_row([[8], [9]], 0)
    assert tables[0].row(0) == [8] and tables[1].row(0) == [9]
    with pytest.raises(ValueError, match="block ids for 1 groups, the cache has 2"):
        tables.add_row([[1]], 0)


def test_add_remove_condense_fills_holes_from_the_end() -> None:
    batch = InputBatch(max_num_reqs=4, max_model_len=16, block_sizes=[4])
    for i, name in enumerate("abcd"):
        assert batch.add_request(_state(name, [i] * (i + 1), [10 + i])) == i
    batch.remove_request("a")
    batch.remove_request("c")
    assert batch.add_request(_state("e", [7, 7], [20])) == 0  # first hole is reused
    batch.condense()
    assert batch.req_ids == ["e", "b", "d"]
    assert batch.req_id_to_index == {"e": 0, "b": 1, "d": 2}
    assert batch.token_ids[2, :4].tolist() == [3, 3, 3, 3] and int(batch.num_tokens[2]) == 4
    assert batch.block_table[0].row(2) == [13]
    batch.remove_request("d")
    batch.remove_request("e")
    batch.condense()
    assert batch.req_ids == ["b"] and batch.req_id_to_index == {"b": 0}
    assert batch.block_table[0].row(0) == [11]


def test_swap_and_reorder_move_everything_together() -> None:
    batch = InputBatch(max_num_reqs=3, max_model_len=8, block_sizes=[4, 4])
    batch.add_request(_state("a", [1], [1], computed=0, groups=2))
    batch.add_request(_state("b", [2, 2], [2], computed=1, groups=2))
    batch.add_request(_state("c", [3, 3, 3], [3], computed=2, groups=2))
    batch.reorder(["c", "a", "b"])
    assert batch.req_ids == ["c", "a", "b"]
    assert batch.num_computed_tokens[:3].tolist() == [2, 0, 1]
    assert batch.num_tokens[:3].tolist() == [3, 1, 2]
    assert [batch.block_table[1].row(r) for r in range(3)] == [[3], [1], [2]]
    assert batch.token_ids[0, :3].tolist() == [3, 3, 3]


def test_tokens_and_drafts() -> None:
    batch = InputBatch(max_num_reqs=1, max_model_len=6, block_sizes=[4])
    batch.add_request(_state("a", [1, 2], [0]))
    batch.append_tokens(0, [3])
    batch.write_drafts(0, [4, 5])
    assert int(batch.num_tokens[0]) == 3
    assert batch.token_ids[0, :5].tolist() == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="already in the batch"):
        batch.add_request(_state("a", [1], [0]))
    with pytest.raises(ValueError, match="input batch is full"):
        batch.add_request(_state("b", [1], [0]))
