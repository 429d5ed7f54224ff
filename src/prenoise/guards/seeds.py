"""The seed range every prenoise entry point accepts (CLI, recipes, serve, `Stream`).

`torch.Generator.manual_seed` takes 0 … 2^64 − 1 (it also takes negative values down to −2^63,
but maps `s < 0` to `2^64 + s`: an alias of another seed, so negative seeds are refused). A
request with `n` outputs uses seeds `seed … seed + n − 1`, so the whole run is checked before
any work starts instead of failing on output `k` after output 0 was written.
"""

from __future__ import annotations

__all__ = ["SEED_MAX", "SEED_MIN", "check_seed_range"]

SEED_MIN = 0
SEED_MAX = 2**64 - 1


def check_seed_range(seed: int, count: int = 1) -> int:
    """Return `seed` if `seed … seed + count − 1` all lie in `SEED_MIN … SEED_MAX`.

    Raises `ValueError` (one line, naming the seed and the range) otherwise; `count` ≥ 1.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {type(seed).__name__}")
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if seed < SEED_MIN:
        raise ValueError(f"seed must be >= 0 (torch aliases seed s < 0 to 2^64 + s), got {seed}")
    last = seed + count - 1
    if last > SEED_MAX:
        uses = f"seed + outputs - 1 = {last}" if count > 1 else f"seed {seed}"
        raise ValueError(f"{uses} exceeds the generator's seed range 0..2^64-1 ({SEED_MAX})")
    return seed
