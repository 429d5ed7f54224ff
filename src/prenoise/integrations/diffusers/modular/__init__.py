"""Overlapped, bit-identical noise for diffusers' modular pipelines (`ModularPipeline`).

`enable(pipe)` / `overlapped_call(pipe, ...)` accept a modular pipeline (e.g. what
`MiniMaxH3Blocks().init_pipeline()` or `ModularPipeline.from_pretrained` return) with the classic
contract: `pipe(...)` and `pipe(state, output=...)` calls return exactly what the plain call
returns, and the caller's generator ends where the plain call leaves it. The draws are planned
when the call's first encoder block starts (`hook.py`), drawn on a worker from clones of the
request's generator while the encoders run, and served only on an exact match (`queue.py`).
Planned classes: `registry.supported()`.
"""
