"""Observation: thread-aware spans (`tracing`), per-request metrics derived from them
(`metrics`), what a serial-vs-overlapped difference is credited to (`attribution`), PNG
timelines (`timeline_plot`, matplotlib), the progress long commands show (`progress`) and
run-time text for rich output, printed as it is (`console_text`), and the opt-in record of
the noise digests a sampler draws (`noise_record`, read by `prenoise rollout-check`).
Recording never changes a value."""
