"""Lockstep differential testing of the KV-cache manager: impl and upstream, same operations."""
