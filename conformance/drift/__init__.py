"""Drift: every difference class between two systems over workloads.

`diff` compares two runs and groups differences by field, `classes` names each class and its
kind, `run` drives both systems over workloads (what `vtwin drift` calls), `html` renders the
page."""
