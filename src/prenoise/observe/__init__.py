"""Observation: thread-aware spans (`tracing`), per-request metrics derived from them
(`metrics`), what a serial-vs-overlapped difference is credited to (`attribution`) and PNG
timelines (`timeline_plot`, matplotlib). Recording never changes a value."""
