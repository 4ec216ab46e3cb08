"""The KV-cache planner's differential harness: upstream's planner driven with the twin's inputs
(`upstream`), the differences named by path (`compare`), Hypothesis strategies (`strategies`)."""
