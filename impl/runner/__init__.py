"""The model runner twin: a Llama-family model over a paged KV cache, the persistent input batch,
attention backends (torch reference, Triton), sampling and spec-decode verification.

Needs torch (and Triton for the GPU kernel); the rest of `impl` does not.
"""
