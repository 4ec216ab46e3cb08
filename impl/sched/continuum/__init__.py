"""The `continuum` scheduling policy: KV pinning across agent tool calls (seed 002).

`policy.ContinuumPolicy` is what the scheduler calls (expire pins at the start of a step,
choose victims, pin a finished turn instead of freeing it); `estimator` predicts tool-call
times; `queue` orders the waiting queue warm jobs first; `tracer` records seed 002's per-step
trace. Under `fcfs` and `priority` none of it exists, so those paths are exactly upstream's.
"""
