"""Observation: thread-aware spans (`tracing`), per-request metrics derived from them
(`metrics`) and PNG timelines (`timeline_plot`, matplotlib). Recording never changes a value."""
