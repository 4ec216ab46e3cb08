"""The OffloadingConnector's scheduler-side cache: which KV chunks sit in the CPU tier.

`--kv-offloading-size` runs upstream's OffloadingConnector, whose scheduler side keeps an
*offloading manager*: a catalogue of offloaded chunks (one per GPU block hash and KV-cache
group), each in a slot of a fixed CPU buffer, with a replacement policy (LRU or ARC) choosing
what to evict when a store needs room. This package twins that manager with the CPU backend:
`keys` (what a chunk is called, what the manager answers), `chunks` (the slot pool),
`lru` and `arc` (the policies) and `manager` (lookups, loads, stores, request accounting,
events, stats).
"""
