"""The Triton paged-attention kernel itself (see `attention_triton` for the launcher).

Kept apart so that triton is imported only when this backend runs: the interpreter
(TRITON_INTERPRET=1) must be chosen before triton is first imported, and CPU-only runs should not
pay for the import. Triton is optional and untyped, hence the guarded importlib import.

One program handles one (request, KV head, tile of BLOCK_M query tokens): its rows are the tile's
tokens times the query heads sharing that KV head (GQA), so each key tile is loaded once for the
whole group. Keys are visited BLOCK_N at a time with an online softmax; every key's physical
page is looked up in the block table, so BLOCK_N need not equal the cache block size. Local
attention (a sliding window, or chunked local attention: keys of the query's own chunk) starts
the key loop at the first key the tile's earliest query can see and masks the rest per row.
"""

from __future__ import annotations

import importlib
from typing import Any

try:
    triton: Any = importlib.import_module("triton")
    tl: Any = importlib.import_module("triton.language")
except ImportError:
    triton = None
    tl = None


def _paged_attention_kernel(  # type: ignore[no-untyped-def]
    q_ptr, o_ptr, k_ptr, v_ptr, block_table_ptr, query_start_loc_ptr, seq_lens_ptr, scale,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_kb, stride_kt, stride_kh, stride_bt,
    SLIDING_WINDOW: tl.constexpr, CHUNK_SIZE: tl.constexpr, PAGE_SIZE: tl.constexpr,
    QUERIES_PER_KV: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, IEEE: tl.constexpr,
):
    req = tl.program_id(0)
    kv_head = tl.program_id(1)
    tile = tl.program_id(2)
    q_start = tl.load(query_start_loc_ptr + req)
    query_len = tl.load(query_start_loc_ptr + req + 1) - q_start
    if tile * BLOCK_M < query_len:
        seq_len = tl.load(seq_lens_ptr + req)
        context = seq_len - query_len
        rows = tl.arange(0, BLOCK_M * BLOCK_G)
        token = tile * BLOCK_M + rows // BLOCK_G  # [R]: query token index within the request
        head = kv_head * QUERIES_PER_KV + rows % BLOCK_G  # [R]: query head
        row_ok = (token < query_len) & (rows % BLOCK_G < QUERIES_PER_KV)
        dims = tl.arange(0, BLOCK_D)
        dim_ok = dims < HEAD_DIM
        q = tl.load(q_ptr + (q_start + token)[:, None] * stride_qt + head[:, None] * stride_qh
                    + dims[None, :], mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
        q_pos = context + token  # [R]: absolute position of each row's token
        kv_end = tl.minimum(seq_len, context + (tile + 1) * BLOCK_M)
        kv_begin = 0
        if SLIDING_WINDOW > 0:
            kv_begin = tl.maximum(context + tile * BLOCK_M - SLIDING_WINDOW + 1, 0)
            kv_begin = (kv_begin // BLOCK_N) * BLOCK_N
        if CHUNK_SIZE > 0:  # the tile's first query's chunk: no later query sees further back
            kv_begin = (context + tile * BLOCK_M) // CHUNK_SIZE * CHUNK_SIZE
            kv_begin = (kv_begin // BLOCK_N) * BLOCK_N
        m_i = tl.full([BLOCK_M * BLOCK_G], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M * BLOCK_G], tl.float32)
        acc = tl.zeros([BLOCK_M * BLOCK_G, BLOCK_D], tl.float32)
        for kv_start in range(kv_begin, kv_end, BLOCK_N):
            keys = kv_start + tl.arange(0, BLOCK_N)  # [N]: key positions
            key_ok = keys < kv_end
            page = tl.load(block_table_ptr + req * stride_bt + keys // PAGE_SIZE,
                           mask=key_ok, other=0)
            offset = page.to(tl.int64) * stride_kb + (keys % PAGE_SIZE) * stride_kt
            kv_addr = offset[:, None] + kv_head * stride_kh + dims[None, :]  # [N, D]
            kv_mask = key_ok[:, None] & dim_ok[None, :]
            k = tl.load(k_ptr + kv_addr, mask=kv_mask, other=0.0)
            v = tl.load(v_ptr + kv_addr, mask=kv_mask, other=0.0)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            else:
                s = tl.dot(q, tl.trans(k)) * scale  # [R, N]
            visible = key_ok[None, :] & (keys[None, :] <= q_pos[:, None])
            if SLIDING_WINDOW > 0:
                visible = visible & (q_pos[:, None] - keys[None, :] < SLIDING_WINDOW)
            if CHUNK_SIZE > 0:
                visible = visible & (keys[None, :] >= (q_pos // CHUNK_SIZE * CHUNK_SIZE)[:, None])
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible
            p = tl.exp(s - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            if IEEE:
                pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(o_ptr + (q_start + token)[:, None] * stride_ot + head[:, None] * stride_oh
                 + dims[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & dim_ok[None, :])
