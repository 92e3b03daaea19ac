"""Workload physics: FLOPs, parameter counts and activation memory against published figures."""

from __future__ import annotations

import pytest

from palm.workload import MODEL_PRESETS, TransformerLayer, build_workload

GPT_PRESETS = ["t-18b", "t-39b", "t-76b", "t-145b", "t-310b", "t-530b", "t-1t", "gpt3-175b"]


def _training_flops_full_recompute(name: str, batch: int) -> float:
    """Forward + backward + recompute matrix FLOPs of one iteration, summed over operators."""
    w = build_workload(MODEL_PRESETS[name])
    total = 0.0
    for op in w.ops:
        fwd = op.forward_flops(batch=batch)
        re = sum(g.flops for g in op.recompute_gemms(batch=batch, tp=1, recompute="full"))
        total += 3 * fwd + re
    return total


@pytest.mark.parametrize("name", GPT_PRESETS)
def test_gpt_flops_match_megatron_eq3(name: str) -> None:
    # Narayanan et al. SC21 eq. (3): F = 96 B s L h^2 (1 + s/(6h) + V/(16 L h)), full recompute
    m = MODEL_PRESETS[name]
    b, s, layers, h, v = 64, m.seq_len, m.layers, m.hidden, m.vocab
    expected = 96 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))
    assert _training_flops_full_recompute(name, b) == pytest.approx(expected, rel=1e-3)


def test_gpt3_parameter_count_within_1pct_of_published() -> None:
    # Brown et al. 2020, Table 2.1: 175.0B parameters
    assert build_workload(MODEL_PRESETS["gpt3-175b"]).params == pytest.approx(175.0e9, rel=0.01)


def test_llama2_70b_parameter_count_within_1pct_of_published() -> None:
    # Touvron et al. 2023 name it 70B; the released checkpoint holds 68,976,648,192 parameters
    params = build_workload(MODEL_PRESETS["llama2-70b"]).params
    assert params == pytest.approx(68_976_648_192, rel=0.01)
    assert params == pytest.approx(70e9, rel=0.02)


def test_llama2_7b_and_bert_large_parameter_counts() -> None:
    assert build_workload(MODEL_PRESETS["llama2-7b"]).params == pytest.approx(
        6_738_415_616, rel=0.01
    )
    # Devlin et al. 2019: BERT-large 340M (they count the pooler and token-type embeddings)
    assert build_workload(MODEL_PRESETS["bert-large"]).params == pytest.approx(340e6, rel=0.02)


def test_resnet50_layers_parameters_and_macs() -> None:
    w = build_workload(MODEL_PRESETS["resnet50"])
    assert w.params == 25_557_032  # torchvision resnet50 (v1.5)
    assert w.forward_flops(batch=1) / 2 == pytest.approx(4.09e9, rel=0.01)  # ~4.1 GMACs
    kinds = [type(op).__name__ for op in w.ops]
    assert kinds.count("Conv2d") == 53 and kinds.count("Pool") == 2 and kinds[-1] == "Linear"


def test_grouped_query_attention_shrinks_qkv_only() -> None:
    mha = TransformerLayer(
        name="l",
        hidden=8192,
        heads=64,
        kv_heads=64,
        ffn_hidden=28672,
        seq_len=4096,
        mlp="swiglu",
        bias=False,
        norm="rmsnorm",
        dropout=False,
    )
    gqa = TransformerLayer(
        name="l",
        hidden=8192,
        heads=64,
        kv_heads=8,
        ffn_hidden=28672,
        seq_len=4096,
        mlp="swiglu",
        bias=False,
        norm="rmsnorm",
        dropout=False,
    )
    h, s = 8192, 4096
    # K and V projections go from h x h to h x (kv_heads * head_dim) each
    assert mha.params - gqa.params == 2 * h * (h - 8 * 128)
    assert mha.forward_flops(batch=1) - gqa.forward_flops(batch=1) == 2 * s * 2 * h * (h - 1024)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_activation_memory_matches_korthikanti(tp: int) -> None:
    # Korthikanti et al. 2022, sec. 4: per layer, 16-bit activations with dropout
    m = MODEL_PRESETS["gpt3-175b"]
    layer = build_workload(m).ops[1]
    s, b, h, a = m.seq_len, 1, m.hidden, m.heads
    sbh = s * b * h

    def act(**kw: object) -> float:
        return layer.activation_bytes(batch=b, tp=tp, act_bytes=2, **kw)  # type: ignore[arg-type]

    assert act(sp=False, recompute="none") == pytest.approx(
        sbh * (10 + 24 / tp + 5 * a * s / (h * tp))
    )
    assert act(sp=True, recompute="none") == pytest.approx(sbh / tp * (34 + 5 * a * s / h))
    assert act(sp=True, recompute="selective") == pytest.approx(34 * sbh / tp)
    assert act(sp=False, recompute="selective") == pytest.approx(sbh * (10 + 24 / tp))
    assert act(sp=False, recompute="full") == pytest.approx(2 * sbh)


def test_tensor_parallel_collectives_are_megatron() -> None:
    layer = build_workload(MODEL_PRESETS["t-18b"]).ops[1]
    nbytes = 4 * 2048 * 6144 * 2
    fwd = layer.forward_collectives(batch=4, tp=8, sp=False, act_bytes=2)
    assert [(c.kind, c.nbytes) for c in fwd] == [("all-reduce", nbytes)] * 2
    sp = layer.forward_collectives(batch=4, tp=8, sp=True, act_bytes=2)
    assert sorted(c.kind for c in sp) == [
        "all-gather",
        "all-gather",
        "reduce-scatter",
        "reduce-scatter",
    ]
    assert layer.forward_collectives(batch=4, tp=1, sp=False, act_bytes=2) == ()
