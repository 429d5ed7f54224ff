"""`draws_in_stream`: torch's own normal draws, served in a named stream, bit for bit.

On this x86 host local torch draws the x86 stream, so `x86` must equal plain torch here; `libm`
must equal torch's scalar path (`ATEN_CPU_CAPABILITY=default`, aarch64 torch's arithmetic),
run in a subprocess. `served` proves each call was intercepted rather than passed through.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
import torch

from prenoise.noise import streams as noise_streams
from prenoise.noise.stream_mode import StreamDrawMode, draws_in_stream
from prenoise.noise.streams import NoiseStreamError
from waits import READY_CEILING_S

pytestmark = pytest.mark.skipif(
    noise_streams.local_torch_stream() != "x86", reason="these comparisons need an x86 host"
)


def _gen(seed: int = 7) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# Each case draws with plain torch calls; the same source runs here and in the subprocess.
CASES: dict[str, str] = {
    "randn_varargs": "torch.randn(3, 40, generator=g)",
    "randn_sequence": "torch.randn((2, 5, 9), generator=g)",
    "randn_size_kw": "torch.randn(size=torch.Size([130]), generator=g)",
    "randn_bf16": "torch.randn(77, generator=g, dtype=torch.bfloat16)",
    "randn_f16": "torch.randn(64, generator=g, dtype=torch.float16)",
    "randn_f64": "torch.randn(50, generator=g, dtype=torch.float64)",
    "randn_small": "torch.randn(5, generator=g)",
    "randn_out": "torch.randn(33, generator=g, out=torch.empty(33))",
    "randn_like": "torch.randn_like(torch.empty(4, 25), generator=g)",
    "randn_like_strided": "torch.randn_like(torch.empty(20, 6).t(), generator=g)",
    "normal_": "torch.empty(100).normal_(generator=g)",
    "normal_view": "torch.empty(30, 8)[:, :5].normal_(generator=g)",
    "default_generator": "(torch.manual_seed(3), torch.randn(48))[1]",
    # generator=None (a VAE posterior's `torch.randn(mean.shape, generator=None)`): the default
    # generator left where torch leaves it
    "default_generator_state": "(torch.manual_seed(42), torch.randn(torch.Size([1, 24, 1, 4, 6]),"
    " generator=None), torch.default_generator.get_state())[2]",
    "then_uniform": "(torch.randn(20, generator=g), torch.rand(20, generator=g))[1]",
}

_DRAW_SOURCE = """
import hashlib, json, torch
def digest(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
out = {}
for name, expr in CASES.items():
    g = torch.Generator().manual_seed(7)
    value = eval(expr)
    out[name] = [digest(value), list(value.shape), list(value.stride()), str(value.dtype),
                 hashlib.sha256(g.get_state().numpy().tobytes()).hexdigest()]
"""


def _draw_all() -> dict[str, list[object]]:
    scope: dict[str, object] = {"CASES": CASES}
    exec(_DRAW_SOURCE, scope)
    return scope["out"]  # type: ignore[return-value]


def _torch_scalar_path() -> dict[str, list[object]]:
    code = f"CASES = {CASES!r}\n{_DRAW_SOURCE}\nprint(json.dumps(out))"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + code],
        env=env,
        capture_output=True,
        text=True,
        timeout=READY_CEILING_S,
        check=True,
    )
    result: dict[str, list[object]] = json.loads(done.stdout)
    return result


def test_x86_stream_equals_local_torch_on_x86_and_every_call_is_served() -> None:
    plain = _draw_all()
    with draws_in_stream("x86"):
        mode = torch.overrides._get_current_function_mode()
        assert isinstance(mode, StreamDrawMode)
        streamed = _draw_all()
    assert streamed == plain
    # exactly one normal draw per case (torch.rand and torch.manual_seed are not served)
    assert mode.served == len(CASES)


def test_libm_stream_equals_torch_scalar_path_field_by_field() -> None:
    with draws_in_stream("libm"):
        streamed = _draw_all()
    reference = _torch_scalar_path()
    assert streamed == reference
    # and the streams really differ here: a pass-through would have failed the line above
    plain = _draw_all()
    assert plain["randn_varargs"][0] != streamed["randn_varargs"][0]
    # the scalar path (< 16 values, non-contiguous outputs) and uniform draws are host-independent
    for name in ("randn_small", "normal_view", "then_uniform"):
        assert plain[name] == streamed[name]


def test_native_installs_nothing() -> None:
    with draws_in_stream("native"):
        assert torch._C._len_torch_function_stack() == 0


def test_other_threads_draw_local_torch() -> None:
    seen: list[torch.Tensor] = []
    with draws_in_stream("libm"):
        worker = threading.Thread(target=lambda: seen.append(torch.randn(64, generator=_gen())))
        worker.start()
        worker.join()
        here = torch.randn(64, generator=_gen())
    local = torch.randn(64, generator=_gen())
    assert torch.equal(seen[0].view(torch.int32), local.view(torch.int32))
    assert not torch.equal(here.view(torch.int32), local.view(torch.int32))


REFUSED: dict[str, Callable[[], object]] = {
    "another device": lambda: torch.randn(20, device="meta"),
    "torch.normal": lambda: torch.normal(0.0, 1.0, (20,), generator=_gen()),
    "log_normal_": lambda: torch.empty(20).log_normal_(generator=_gen()),
    "exponential_": lambda: torch.empty(20).exponential_(generator=_gen()),
    "cauchy_": lambda: torch.empty(20).cauchy_(generator=_gen()),
    "other mean": lambda: torch.empty(20).normal_(1.0, 1.0, generator=_gen()),
    "other std": lambda: torch.empty(20).normal_(0.0, 2.0, generator=_gen()),
    "integer dtype": lambda: torch.randn(20, dtype=torch.int32, generator=_gen()),
    "sparse layout": lambda: torch.randn(20, layout=torch.sparse_coo, generator=_gen()),
    "kaiming_normal_": lambda: torch.nn.init.kaiming_normal_(torch.empty(4, 5)),
    "grad leaf": lambda: torch.zeros(20, requires_grad=True).normal_(generator=_gen()),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_draws_the_stream_cannot_serve_raise_never_native(case: str) -> None:
    with draws_in_stream("x86"), pytest.raises(NoiseStreamError):
        REFUSED[case]()


def test_requires_grad_and_no_grad_parameters() -> None:
    with draws_in_stream("libm"):
        leaf = torch.randn(32, generator=_gen(), requires_grad=True)
        param = torch.nn.Parameter(torch.empty(40))
        torch.nn.init.normal_(param, generator=_gen())  # under no_grad, as nn.init does
    assert leaf.requires_grad and leaf.is_leaf
    expected = noise_streams.randn(40, generator=_gen(), stream="libm")
    assert torch.equal(param.detach().view(torch.int32), expected.view(torch.int32))


def test_a_refused_stream_raises_before_the_block_runs() -> None:
    bad = noise_streams.load_goldens()
    case = next(c for c in bad["streams"]["libm"]["cases"] if c["dtype"] == "float32")
    case["sha256"] = hashlib.sha256(b"not the stream").hexdigest()
    noise_streams._resolve("libm", goldens=bad)  # this process now refuses libm float32
    ran = []
    try:
        with pytest.raises(NoiseStreamError, match="self-check"), draws_in_stream("libm"):
            ran.append(True)
    finally:
        noise_streams._reset()
    assert not ran
