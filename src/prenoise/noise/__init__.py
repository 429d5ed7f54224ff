"""How noise values are made: CPU standard normals bit-identical to torch, in named streams.

Imports go one way, from the entry points down to the C extension:

- `normal`: `fill_normal_`, `randn`, `randn_keep_prefix` — the one entry per torch call, in the
  `"native"` stream (local torch's values) or a named one (`"x86"`, `"libm"`);
- `streams`: the named streams, their self-checks against `stream_goldens.json`, `stream_digest`;
- `stream_mode`: `draws_in_stream`, which draws the torch calls of code prenoise does not own in
  a named stream;
- `kernel`: the binding of the optional C extension (`_noise_kernel`, built from `csrc/`) and
  the native draws it serves, falling back to torch without it;
- `chunks`: the flat-chunk rule under which a chunked fill equals a one-shot draw;
- `layouts`: value-preserving rearrangements (patchify) of a drawn tensor.

Nothing here touches the global RNG or imports anything above `prenoise.guards`.
"""
