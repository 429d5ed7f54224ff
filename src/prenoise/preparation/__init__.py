"""What a request draws, and how it is prepared ahead, taken once and mixed exactly.

- `draws`: `Draw`, `Stream`, `NoisePlan` and `run_*` — declarative CPU normal draws that equal
  the serial torch code bit for bit;
- `executor`: `PreparationExecutor` — request-owned workers that run the draws while encoding runs;
- `prediction`: predicted keys, checked against the encoded shapes before prepared work is used;
- `mixing`: `mix_condition`, `tau·clean + (1 − tau)·noise` with CPU float32 coefficients on any
  device.

Imports: `prenoise.noise`, `prenoise.verify.rng_guard`, `prenoise.guards`, `prenoise.observe`.
"""
