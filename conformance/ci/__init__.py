"""What CI and the main job run around pytest: the junit report and its pages (`report`), the
Hypothesis example counts plugin (`hypothesis_counts`), the nightly KV rounds (`nightly`)."""
