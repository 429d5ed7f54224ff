"""The distributed preparation never shares a generator with the request thread, the global RNG
included, in both of its modes.

With `host_shared_noise` a rank's draw thread (`host-noise-<seed>`) fills its streams into the
shared segments while the request thread encodes; without it every rank runs the pipeline's own
overlapped arm (worker `ref2va-prep`). Either way each stream runs on its own fresh generator.
Here the text encoder draws from the global RNG (dropout on its embeddings, discarded
`torch.randn` calls) while the draw thread is inside a draw (forced by
`rng_contention.Handshake`), on a one-rank job: every prepared field equals a single-process
serial preparation's, and the global RNG ends where that leaves it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from one_rank import OneRankContext
from prenoise.distributed import host_noise
from prenoise.distributed.request import resolve_request
from prenoise.distributed.runner import DistributedRef2VA
from prenoise.preparation import draws as draws_module
from prenoise.ref2va.config import ParallelConfig, load_recipe
from prenoise.ref2va.models import Ref2VAModels
from prenoise.ref2va.pipeline import Ref2VAPipeline
from prenoise.ref2va.verification import prepared_fields
from prenoise.verify import compare, nest_dotted
from rng_contention import Handshake, encoder_on_global_rng

TINY = Path(__file__).parents[1] / "ref2va" / "tiny-recipe.yaml"
GLOBAL_SEED = 2468


def _park(monkeypatch: pytest.MonkeyPatch, host_shared: bool) -> Handshake:
    """Park the first draw of the mode's draw thread until the encoder drew the global RNG."""
    if host_shared:
        handshake = Handshake("host-noise-")
        monkeypatch.setattr(host_noise, "fill_normal_", handshake.wrap(host_noise.fill_normal_))
    else:
        handshake = Handshake("ref2va-prep")
        monkeypatch.setattr(draws_module, "run_draw", handshake.wrap(draws_module.run_draw))
    return handshake


@pytest.mark.parametrize("host_shared", [True, False])
def test_distributed_preparation_with_an_encoder_on_the_global_rng_equals_serial(
    host_shared: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the tiny recipe's synthetic reference is written here
    recipe = load_recipe(TINY).model_copy(update={"outputs": 2})
    models = Ref2VAModels.default(recipe.model)
    handshake = _park(monkeypatch, host_shared)
    encoder_on_global_rng(monkeypatch, models, handshake)
    runner = DistributedRef2VA(OneRankContext(), models, ParallelConfig(timeout_s=30.0))
    request = resolve_request(recipe)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(GLOBAL_SEED)
        untouched = torch.get_rng_state()
        serial, _ = Ref2VAPipeline(models).prepare_outputs(request.plan, "serial", keep_noise=True)
        after_serial = torch.get_rng_state()
        torch.manual_seed(GLOBAL_SEED)
        handshake.arm()
        prepared = runner.prepare(request, keep_noise=True, host_shared=host_shared)
        after_distributed = torch.get_rng_state()
    assert handshake.met  # the encoder drew the global RNG while the draw thread was drawing
    assert prepared.host_shared is host_shared and prepared.fallbacks == []
    assert prepared.outputs[0].used_prepared_noise
    report = compare(
        nest_dotted(prepared_fields(serial)), nest_dotted(prepared_fields(prepared.outputs))
    )
    assert report.equal, report.summary()
    assert torch.equal(after_serial, after_distributed)
    assert not torch.equal(after_serial, untouched)  # the encoder really drew from it
