"""Differential checks of the engine twin: tiny local checkpoints, Hugging Face references,
upstream vLLM engines (impl's scheduler plugged in through an adapter)."""
