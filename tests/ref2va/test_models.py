"""Model bundle: deterministic init without the global RNG, text encoder, transformer, audio."""

from __future__ import annotations

import pytest
import torch

from prenoise.ref2va import (
    AudioVAE,
    AudioVAEConfig,
    ByteTokenizer,
    ModelConfig,
    Ref2VAModels,
    latents_from_rows,
    latents_to_rows,
)


def _params(models: Ref2VAModels) -> dict[str, torch.Tensor]:
    return {
        f"{name}.{k}": v
        for name, mod in models.modules().items()
        for k, v in mod.state_dict().items()
    }


def test_building_models_leaves_global_rng_untouched(tiny_config: ModelConfig) -> None:
    before = torch.get_rng_state()
    a = Ref2VAModels.default(tiny_config, seed=3)
    assert torch.equal(before, torch.get_rng_state())
    a.text_encoder.encode(["hello"])
    assert torch.equal(before, torch.get_rng_state())
    b = Ref2VAModels.default(tiny_config, seed=3)
    c = Ref2VAModels.default(tiny_config, seed=4)
    pa, pb, pc = _params(a), _params(b), _params(c)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not torch.equal(pa["transformer.video_in.weight"], pc["transformer.video_in.weight"])


def test_t5_embeddings_stay_tied(tiny_models: Ref2VAModels) -> None:
    t5 = tiny_models.text_encoder.t5
    assert t5.encoder.embed_tokens.weight is t5.shared.weight


def test_tokenizer_pads_and_truncates() -> None:
    tok = ByteTokenizer(8)
    ids, mask = tok(["ab", "a much longer prompt"])
    assert ids[0].tolist() == [ord("a") + 3, ord("b") + 3, 1, 0, 0, 0, 0, 0]
    assert mask.sum(1).tolist() == [3, 8]
    assert ids[1, -1] == tok.eos_id
    assert tok.decode(ids[1].tolist()) == "a much "


def test_text_encoder_shape_and_padding(tiny_models: Ref2VAModels) -> None:
    emb = tiny_models.text_encoder.encode(["a red fox", "x"])
    assert emb.shape == (2, 64, 32) and emb.dtype == torch.float32
    assert torch.count_nonzero(emb[1, 2:]) == 0
    assert torch.isfinite(emb).all()


def test_transformer_shapes_and_row_equivariance(tiny_models: Ref2VAModels) -> None:
    model = tiny_models.transformer
    gen = torch.Generator().manual_seed(0)
    video, audio = torch.randn(40, 96, generator=gen), torch.randn(10, 32, generator=gen)
    text = tiny_models.text_encoder.encode(["prompt"])
    cond = model.summarize_conditions(torch.randn(12, 96, generator=gen), audio[:4])
    v, a = model(video, audio, text, 0.7, 0.4, condition=cond)
    assert v.shape == (40, 96) and a.shape == (10, 32)
    perm = torch.randperm(40, generator=gen)
    v_perm, _ = model(video[perm], audio, text, 0.7, 0.4, condition=cond)
    torch.testing.assert_close(v_perm, v[perm], rtol=1e-5, atol=1e-5)
    v_other, _ = model(video, audio, text, 0.2, 0.4, condition=cond)
    assert not torch.allclose(v_other, v)
    v_again, a_again = model(video, audio, text, 0.7, 0.4, condition=cond)
    assert torch.equal(v_again, v) and torch.equal(a_again, a)


def test_audio_vae_shapes_and_row_order() -> None:
    vae = AudioVAE.build(AudioVAEConfig(hidden=16), seed=1)
    assert vae.config.hop == 400
    wav = torch.linspace(-0.5, 0.5, 2 * 16000).reshape(2, 16000)
    lat = vae.encode(wav)
    assert lat.shape == (1, 2, 40, 32)
    assert vae.encode(wav, audio_t=43).shape == (1, 2, 43, 32)
    rows = latents_to_rows(lat)
    assert rows.shape == (80, 32)
    assert torch.equal(rows[:40], lat[0, 0]) and torch.equal(rows[40:], lat[0, 1])
    assert torch.equal(latents_from_rows(rows), lat)
    out = vae.decode(lat)
    assert out.shape == (2, 16000) and out.abs().max() <= 1.0
    mono = vae.encode(wav[0])
    assert torch.equal(mono[0, 0], mono[0, 1])
    with pytest.raises(ValueError, match="multiple of 40"):
        _ = AudioVAEConfig(sample_rate=16010).hop
