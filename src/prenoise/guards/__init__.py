"""Checks every command shares, run before heavy work: each refusal is one line naming the fix.

Memory budgets (`budget`), cancel points (`cancel`), SIGTERM/SIGHUP as Ctrl-C (`signals`), the
seed range (`seeds`), `PRENOISE_*` variables (`env`), device names (`devices`), optional extras
(`extras`), integer sizes (`sizes`), path names (`path_checks`), untrusted YAML/JSON
(`documents`), usage errors and output paths (`usage`), writing a file whole or not at all
(`atomic`), torchrun's variables (`torchrun_env`), the heap's free pages handed back
(`heap`). The lowest layer: nothing here imports another part of prenoise.
"""
