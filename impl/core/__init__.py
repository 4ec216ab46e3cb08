"""KV-cache core: blocks, free queue, hashing, block pool, managers, coordinators."""
