"""An MI250 under vLLM is two tensor-parallel ranks, its dies: a step on one card reads what
each die keeps, twice — the MLA latent whole on each, a GQA head copied where the dies
outnumber the KV heads, the router and MLA's down-projections whole on each — as fit's pool
(vllm_pool.vllm_deployment, a rank a die) already holds them."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import attention_rates
from ridgeline.floors import decode_floor
from ridgeline.kvcache import attention_kv_bytes_per_token
from ridgeline.params import layer_params
from ridgeline.quantization import ROUTER
from ridgeline.vllm_pool import vllm_deployment
from tests.conftest import run_cli


def card(model: str, gpu: str, gpus: int, weights: str | None = None, dcp: int = 1) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights, None, gpus,
                            engine="vllm", decode_context_parallel_size=dcp)


def kv_read_per_token(dep: Deployment) -> float:
    """Bytes of cache one GPU reads per token of context, per attention layer."""
    return attention_rates(dep)[2]


def test_an_mi250x_reads_deepseeks_latent_once_per_die_twice_per_card() -> None:
    """MLA keeps the whole latent on every rank: 8 x MI250X run 16 ranks, so each card holds
    and reads two latents a token, where 8 x H200 read one each."""
    mi250 = card("deepseek-v3", "mi250x", 8, "awq-int4")
    h200 = card("deepseek-v3", "h200", 8, "awq-int4")
    latent = attention_kv_bytes_per_token(mi250.model, mi250.kv.bytes_per_element)
    assert mi250.engine_tensor_parallel_size == 16
    assert kv_read_per_token(mi250) == pytest.approx(2 * latent)
    assert kv_read_per_token(h200) == pytest.approx(latent)
    # the card is its two dies, as fit's pool runs them
    assert kv_read_per_token(mi250) == pytest.approx(
        mi250.devices_per_gpu * kv_read_per_token(vllm_deployment(mi250)))
    # the decode floor's cache read doubles with it
    assert decode_floor(mi250, 32, 8000).kv_bytes_read == pytest.approx(
        2 * decode_floor(h200, 32, 8000).kv_bytes_read)


def test_llama_70bs_8_kv_heads_over_16_dies_are_copied_on_each_card() -> None:
    """Llama-3.1-70B has 8 KV heads: on 8 x MI250X (16 dies) each die keeps one, so a card
    holds two heads of eight, where 8 x MI300X (one head a GPU) hold one."""
    mi250 = card("llama-3.1-70b", "mi250x", 8)
    mi300 = card("llama-3.1-70b", "mi300x", 8)
    full = attention_kv_bytes_per_token(mi250.model, mi250.kv.bytes_per_element)
    assert mi250.kv_replication == 2  # 16 head slots over 8 heads
    assert kv_read_per_token(mi250) == pytest.approx(full * 2 / 8)
    assert kv_read_per_token(mi300) == pytest.approx(full / 8)


def test_an_mi250x_card_holds_deepseeks_router_on_each_die() -> None:
    """Each die keeps the router whole: a card holds two; its weights a GPU are its dies'."""
    mi250 = card("deepseek-v3", "mi250x", 8, "awq-int4")
    run = vllm_deployment(mi250)
    moe_layer = mi250.model.layers[-1]
    router = layer_params(mi250.model, moe_layer)[ROUTER]
    assert mi250.gpu_params(moe_layer, ROUTER) == 2 * router
    assert card("deepseek-v3", "h200", 8, "awq-int4").gpu_params(moe_layer, ROUTER) == router
    per_card = (mi250.weight_bytes + mi250.tp_copies_bytes) / mi250.num_gpus
    per_die = (run.weight_bytes + run.tp_copies_bytes) / run.num_gpus
    assert per_card == pytest.approx(mi250.devices_per_gpu * per_die)


def test_dcp_over_every_die_leaves_one_copy_of_the_latent() -> None:
    """-dcp 16 deals each sequence's latent over all 16 dies of 8 x MI250X: one copy in all,
    where counting cards would have left half of one."""
    assert card("deepseek-v3", "mi250x", 8, "awq-int4", dcp=16).kv_replication == 1


def test_decode_explain_on_an_mi250x_names_the_dies_ranks(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The explanation counts the copies over the engine's 16 ranks, and says they are dies."""
    code, out, _ = run_cli(capsys, "decode", "deepseek-v3", "--gpu", "mi250x", "--num-gpus", "8", "--weights",
                  "awq-int4", "--batch", "32", "--context", "8000", "--explain")
    assert code == 0
    assert "×16 for the copies the TP16 ranks (2 dies × 8 GPUs)" in out
    assert "15 more copies of what each of the 16 tensor-parallel ranks (2 dies × 8 GPUs)" in out


def test_the_deployment_line_names_the_dies_vllm_runs_as_its_ranks(
        capsys: pytest.CaptureFixture[str]) -> None:
    """4 x MI250X under vLLM are 8 ranks (--tensor-parallel-size 8); with a pipeline of two
    stages, 16 dies; llama.cpp runs each card whole, and another card has no dies to name."""
    four = card("llama-3.1-70b", "mi250x", 4)
    assert four.engine_tensor_parallel_size == 8
    assert four.gpus_label == f"4 x mi250x ({four.engine_tensor_parallel_size} dies: TP8)"
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "mi250x", "--num-gpus", "4",
                           "--max-model-len", "8192")
    assert code == 0 and "on 4 x mi250x (8 dies: TP8), vLLM" in out
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-70b", "--gpu", "mi250x", "--num-gpus",
                           "4", "-pp", "2")
    assert code == 0 and "on 8 x mi250x (16 dies: TP8 × PP2)" in out
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "mi250x", "--num-gpus", "4",
                           "--max-model-len", "8192", "--engine", "llama.cpp")
    assert code == 0 and "on 4 x mi250x, llama.cpp" in out
    assert card("llama-3.1-70b", "h100", 4).gpus_label == "4 x h100-sxm"
