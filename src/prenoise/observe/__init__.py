"""Observation: thread-aware spans (`tracing`), per-request metrics derived from them
(`metrics`), what a serial-vs-overlapped difference is credited to (`attribution`), PNG
timelines (`timeline_plot`, matplotlib) and the progress long commands show (`progress`).
Recording never changes a value."""
