"""Seed 002's per-step tracer, policy-neutral: any scheduler (FCFS, priority, Continuum, a
fork) records the same step snapshots, decisions and prefix-cache events through it."""
