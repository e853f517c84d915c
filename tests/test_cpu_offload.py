"""vLLM's --cpu-offload-gb: the weights it moves to host memory free the KV pool, every step
reads them back over the host link, and where vLLM has no such flag it is refused."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import accumulate, takewhile

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cost import BatchShape, batch_shape, decode_batch, shape_time_s, step_cost
from ridgeline.cpu_offload import (
    CpuOffload,
    asked_bytes_per_gpu,
    cpu_offload_caution,
    cpu_offload_problem,
    hbm_spared_bytes,
    layer_bytes_per_gpu,
    layer_weight_bytes,
    offload_read_bytes,
    offload_read_share,
    offload_read_time_s,
    offloaded_bytes,
    offloaded_bytes_per_gpu,
    runner_problem,
    stage_layer_bytes_per_gpu,
    stage_offloads,
    stage_read_bytes,
)
from ridgeline.cpu_offload_order import layer_rank_tensors
from ridgeline.engines import profile_for
from ridgeline.floors import decode_floor
from ridgeline.memory import EngineSettings, kv_pool, stage_pools
from ridgeline.moe import expected_experts_touched
from ridgeline.offload import host_link_bytes_per_s
from ridgeline.quantization import ROUTED
from ridgeline.sim.timer import StepTimer
from ridgeline.spec_decode import SpecDecode, spec_step
from ridgeline.stages import pipeline_stages, stage_weight_bytes
from ridgeline.units import GIB
from tests.conftest import run_cli

VLLM = profile_for("vllm")
SETTINGS = EngineSettings(usage="offline", max_model_len=8192)


def _dep(model: str = "llama-3.1-8b", gpu: str = "rtx-4090", gpus: int = 1,
         pp: int = 1, weights: str | None = None) -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights,
                            num_gpus=gpus, pipeline_parallel_size=pp, engine="vllm")


def _offloaded(dep: Deployment, gib: float, link_bytes_per_s: float | None = None) -> Deployment:
    return replace(dep, cpu_offload=CpuOffload(gib * GIB, link_bytes_per_s))


def _largest_tensor_bytes(dep: Deployment) -> float:
    """The most one parameter of any layer takes on a GPU: the most the offload overshoots."""
    return max(t.bytes for layer in set(dep.model.layers) for t in layer_rank_tensors(dep, layer))


def test_the_pool_gains_the_offloaded_bytes_per_gpu() -> None:
    for dep in (_dep(), _dep("llama-3.1-70b", "h100", gpus=2, weights="fp8")):
        before = kv_pool(dep, SETTINGS)
        off = _offloaded(dep, 4)
        after = kv_pool(off, SETTINGS)
        moved = offloaded_bytes_per_gpu(off)
        assert 4 * GIB <= moved < 4 * GIB + _largest_tensor_bytes(dep)
        assert after.weight_bytes == pytest.approx(before.weight_bytes - moved)
        assert after.pool_bytes - before.pool_bytes == pytest.approx(moved)


def test_a_budget_past_the_layers_offloads_every_layer_and_no_more() -> None:
    dep = _dep("llama-3.1-70b", "h100", gpus=2, weights="fp8")
    layers = stage_layer_bytes_per_gpu(dep)[0].bytes
    big = _offloaded(dep, 1000)
    assert offloaded_bytes_per_gpu(big) == pytest.approx(layers)
    # the embeddings and the LM head stay on the GPU
    assert kv_pool(big, SETTINGS).weight_bytes > 0
    assert kv_pool(big, SETTINGS).weight_bytes == pytest.approx(
        kv_pool(dep, SETTINGS).weight_bytes - layers)


@pytest.mark.parametrize("profile", [None, VLLM])
def test_a_decode_step_grows_by_the_offloaded_bytes_over_the_cards_pcie(profile) -> None:
    dep = _dep()
    batch = decode_batch(8, 4096)
    args = () if profile is None else (profile,)
    off = _offloaded(dep, 4)
    grown = step_cost(off, batch, *args).time_s - step_cost(dep, batch, *args).time_s
    assert grown == pytest.approx(offloaded_bytes_per_gpu(off) / host_link_bytes_per_s(dep.accelerator))


def test_the_floor_reads_the_offloaded_bytes_over_the_link_not_from_hbm() -> None:
    dep = _dep()
    plain, offloaded = decode_floor(dep, 1, 4096), decode_floor(_offloaded(dep, 4), 1, 4096)
    assert offloaded.host_time_s == pytest.approx(offload_read_time_s(_offloaded(dep, 4)))
    assert plain.memory_time_s - offloaded.memory_time_s == pytest.approx(
        offloaded_bytes_per_gpu(_offloaded(dep, 4)) / dep.bandwidth_bytes_per_s)
    assert offloaded.activation_bytes == pytest.approx(plain.activation_bytes)
    assert offloaded.bound == "the host link"
    # the expectation stays above its floor
    assert step_cost(_offloaded(dep, 4), decode_batch(1, 4096), VLLM).time_s \
        > offloaded.step_time_s


def test_4_gib_of_llama_8b_on_an_h100_sxm_read_over_pcie_5_takes_about_68_ms_a_step() -> None:
    # 4.06 GiB move (the tenth layer's down_proj whole), at 64 GB/s
    assert offload_read_time_s(_offloaded(_dep(gpu="h100"), 4)) == pytest.approx(0.0682, rel=1e-3)


def test_host_link_gbs_sets_the_link_read_each_step() -> None:
    dep = _dep()
    slow = _offloaded(dep, 4, 8e9)
    assert offload_read_time_s(slow) == pytest.approx(offloaded_bytes_per_gpu(slow) / 8e9)


def test_every_pipeline_stage_reads_its_own_share_in_turn() -> None:
    dep = _dep("llama-3.1-70b", "h100", gpus=4, pp=2, weights="fp8")
    off = _offloaded(dep, 2)
    splits = stage_offloads(off)
    assert len(splits) == 2 and all(split.bytes >= 2 * GIB for split in splits)
    assert offload_read_time_s(off) == pytest.approx(
        sum(split.bytes for split in splits) / host_link_bytes_per_s(dep.accelerator))


def test_the_simulators_timer_prices_the_read_as_step_cost_does() -> None:
    dep = _offloaded(_dep(), 4)
    timer = StepTimer(dep, VLLM)
    for batch in (decode_batch(16, 2048), decode_batch(1, 100)):
        shape: BatchShape = batch_shape(dep, batch)
        assert timer.time_s(shape) == pytest.approx(shape_time_s(dep, shape, VLLM))


@pytest.mark.parametrize(("engine", "version", "said"), [
    ("sglang", None, "SGLang's --cpu-offload-gb is not modelled"),
    ("trtllm", None, "is vLLM's"),
    ("llama.cpp-cuda", None, "-ngl"),
    ("vllm", "0.5", "came in v0.5.3"),
    ("vllm", "0.8.2", "'0.8.2 V0'"),
])
def test_refused_where_vllm_has_no_such_offload(engine: str, version: str | None,
                                                said: str) -> None:
    assert said in cpu_offload_problem(engine, version, 1)


def test_accepted_from_v0_8_4_and_on_v0_before_it() -> None:
    assert not cpu_offload_problem("vllm", "0.8.4", 1)
    assert not cpu_offload_problem("vllm", "0.8.2 V0", 1)
    assert not cpu_offload_problem("vllm", "0.5.3", 1)


def test_fit_prints_the_bigger_pool_and_the_host_link_caution(capsys) -> None:
    base = ("fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "vllm",
            "--max-model-len", "8192")
    code, plain, _ = run_cli(capsys, *base)
    code_off, offloaded, _ = run_cli(capsys, *base, "--cpu-offload-gb", "4", "--host-link-gbs",
                                     "16")
    assert code == code_off == 0
    assert "--cpu-offload-gb" not in plain
    assert "every step reads them over the host link (16 GB/s" in offloaded


@pytest.mark.parametrize("argv", [
    ("decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--cpu-offload-gb", "4"),
    ("fit", "llama-3-8b", "--gpu", "h100", "--engine", "vllm", "--engine-version", "0.4",
     "--cpu-offload-gb", "4"),  # Llama 3 (3.1's rope came in vLLM 0.5.3.post1)
    ("decode", "llama-3.1-8b", "--gpu", "h100", "--cpu-offload-gb", "-1"),
    ("plan", "llama-3.1-8b", "--gpu", "h100", "--cpu-offload-gb", "4", "--slo-ttft-ms", "500",
     "--slo-tpot-ms", "50"),
    ("decode", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "2", "--data-parallel-size",
     "2", "--engine", "vllm", "--cpu-offload-gb", "4"),
])
def test_refusals_are_one_line_and_exit_2(capsys, argv: tuple[str, ...]) -> None:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and "--cpu-offload-gb" in err


def test_zero_is_vllms_default_and_changes_nothing(capsys) -> None:
    base = ("decode", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "vllm", "--context",
            "4096", "--max-model-len", "8192")
    assert run_cli(capsys, *base) == run_cli(capsys, *base, "--cpu-offload-gb", "0")


def test_the_raw_fit_and_the_pool_count_the_same_weights_on_the_gpu() -> None:
    dep = _offloaded(_dep("llama-3.1-70b", "h100"), 70)
    floor = decode_floor(dep, 1, 4096)
    assert floor.fit.weight_bytes == pytest.approx(
        _dep("llama-3.1-70b", "h100").weight_bytes - offloaded_bytes_per_gpu(dep))
    assert floor.fit.fits
    assert floor.fit.weight_bytes == pytest.approx(kv_pool(dep, SETTINGS).weight_bytes)


def test_decode_gives_an_expectation_where_vllms_pool_runs_the_batch(capsys) -> None:
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--engine",
                           "vllm", "--cpu-offload-gb", "70", "--batch", "1", "--context", "4096",
                           "--max-model-len", "8192", "--json")
    assert code == 0
    point = json.loads(out)["points"][0]
    assert point["expected"] is not None


@pytest.mark.parametrize("cmd", ["fit", "simulate"])  # decode names no release
def test_model_runner_v2_before_0_29_ignores_the_flag_so_it_is_refused(capsys, cmd) -> None:
    argv = (cmd, "llama-3.1-70b", "--gpu", "h200", "--engine", "vllm", "--engine-version",
            "0.28.0", "--cpu-offload-gb", "20", "--max-model-len", "8192")
    if cmd == "simulate":
        argv += ("--concurrency", "4", "--input-len", "512", "--output-len", "64")
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and "Model Runner V2" in err
    assert run_cli(capsys, *argv[:7], "0.29.0", *argv[8:])[0] == 0


def test_an_moe_that_v1_runs_off_model_runner_v2_is_accepted_before_0_29() -> None:
    dep = _offloaded(_dep("qwen3-30b-a3b", "h100"), 20)
    assert not runner_problem(dep, "0.28.0")
    assert runner_problem(_offloaded(_dep("llama-3.1-70b", "h200"), 20), "0.28.0")


def test_an_moe_floor_keeps_its_kv_reads_and_reads_only_the_routed_experts_in_place() -> None:
    dep = _dep("qwen3-30b-a3b", "h100")
    off = _offloaded(dep, 40)
    plain, floor = decode_floor(dep, 1, 4096), decode_floor(off, 1, 4096)
    assert floor.memory_time_s > floor.kv_bytes_read / dep.bandwidth_bytes_per_s
    assert floor.memory_time_s < plain.memory_time_s
    # one token touches 8 of 128 experts: far less than the whole offloaded share
    assert offload_read_time_s(off, 1) < 0.2 * offload_read_time_s(off)
    assert floor.host_time_s == pytest.approx(offload_read_time_s(off, 1))
    copied = replace(off, cpu_offload=replace(off.cpu_offload, in_place=False))
    assert offload_read_time_s(copied, 1) == pytest.approx(offload_read_time_s(off))
    # copied in whole, the link moves every offloaded byte; HBM still reads the cache
    copied_floor = decode_floor(copied, 1, 4096)
    assert copied_floor.memory_time_s > copied_floor.kv_bytes_read / dep.bandwidth_bytes_per_s
    for d in (off, copied):
        for batch in (1, 64):
            assert step_cost(d, decode_batch(batch, 4096), VLLM).time_s \
                >= decode_floor(d, batch, 4096).step_time_s


def test_json_carries_the_offload_and_the_deployment_line_says_it(capsys) -> None:
    base = ("decode", "llama-3.1-70b", "--gpu", "h200", "--engine", "vllm", "--batch", "1",
            "--context", "4096", "--max-model-len", "8192", "--json")
    plain = json.loads(run_cli(capsys, *base)[1])
    off = json.loads(run_cli(capsys, *base, "--cpu-offload-gb", "20")[1])
    assert plain["cpu_offload"] is None
    dep = _offloaded(_dep("llama-3.1-70b", "h200"), 20)
    assert off["cpu_offload"]["bytes_per_gpu"] == pytest.approx(offloaded_bytes_per_gpu(dep))
    assert off["cpu_offload"]["max_read_time_s"] == pytest.approx(offload_read_time_s(dep))
    assert "--cpu-offload-gb" in off["deployment"] and "--cpu-offload-gb" not in plain["deployment"]
    fit = json.loads(run_cli(capsys, "fit", *base[1:4], "--engine", "vllm", "--max-model-len",
                             "8192", "--cpu-offload-gb", "20", "--json")[1])
    assert fit["cpu_offload"]["asked_bytes_per_gpu"] == 20 * GIB


def test_a_two_die_card_offloads_the_amount_on_each_die() -> None:
    dep = _dep("llama-3.1-70b", "mi250x", gpus=2)
    off = _offloaded(dep, 8)
    moved = offloaded_bytes_per_gpu(off)
    # each die's count stops past its 8 GiB by under one of its (half-card) tensors
    assert 2 * 8 * GIB <= moved < 2 * 8 * GIB + _largest_tensor_bytes(dep)
    assert kv_pool(dep, SETTINGS).weight_bytes - kv_pool(off, SETTINGS).weight_bytes \
        == pytest.approx(moved)
    assert offload_read_time_s(off) == pytest.approx(
        moved / host_link_bytes_per_s(dep.accelerator))


def test_the_drafter_pays_no_host_link_read() -> None:
    dep = _dep("llama-3.1-70b", "h200")
    off = _offloaded(dep, 20)
    spec = SpecDecode(3, 0.7, 0.15)
    plain, offloaded = spec_step(dep, spec, 1, 4096, VLLM), spec_step(off, spec, 1, 4096, VLLM)
    # the step grows by the verify's growth alone
    assert offloaded.step_s - plain.step_s == pytest.approx(offloaded.verify_s - plain.verify_s)


def test_the_drafters_timer_leaves_out_the_host_link_read() -> None:
    from ridgeline.sim.timer import drafter_timer

    off = _offloaded(_dep("llama-3.1-70b", "h200"), 20)
    timer = StepTimer(off, VLLM)
    drafter = drafter_timer(off, VLLM, timer)
    shape = batch_shape(off, decode_batch(1, 4096))
    assert timer.time_s(shape) - drafter.time_s(shape) == pytest.approx(
        offload_read_time_s(off, 1))


def test_host_memory_gib_is_taken_and_holds_what_every_gpu_pins(capsys) -> None:
    base = ("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--cpu-offload-gb",
            "4", "--max-model-len", "8192", "--num-gpus", "2")
    assert run_cli(capsys, *base, "--host-memory-gib", "64")[0] == 0
    code, _, err = run_cli(capsys, *base, "--host-memory-gib", "6")
    assert code == 2
    assert err.count("\n") == 1 and "--host-memory-gib" in err and "-ngl" not in err


def test_simulate_prices_the_drafter_as_decode_does(capsys) -> None:
    off = ("llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--cpu-offload-gb", "4",
           "--max-model-len", "8192", "--spec-tokens", "3", "--json")
    sim = json.loads(run_cli(capsys, "simulate", *off, "--concurrency", "1", "--input-len",
                             "512", "--output-len", "64", "--num-requests", "4")[1])
    decode = json.loads(run_cli(capsys, "decode", *off, "--batch", "1", "--context", "544")[1])
    step_s = decode["points"][0]["speculative"]["step_s"]
    assert sim["itl_s"]["p50"] == pytest.approx(step_s, rel=0.01)


def test_host_memory_gib_is_each_nodes_ram(capsys) -> None:
    """405B at TP8 x PP2 on 16 H100s: each of the two hosts pins its own 8 GPUs' share
    (8 x 20.04 GiB = 160.3 GiB), which 200 GiB of RAM holds; 150 GiB does not."""
    base = ("fit", "llama-3.1-405b", "--gpu", "h100", "--engine", "vllm", "--num-gpus", "8",
            "-pp", "2", "--cpu-offload-gb", "20", "--max-model-len", "8192")
    pinned = 8 * offloaded_bytes_per_gpu(_offloaded(_dep("llama-3.1-405b", "h100", 16, 2), 20))
    assert run_cli(capsys, *base, "--host-memory-gib", "200")[0] == 0
    code, _, err = run_cli(capsys, *base, "--host-memory-gib", "150")
    assert code == 2 and f"{pinned / GIB:,.1f} GiB" in err and "each host" in err


def test_deepseek_v3_at_2_gib_reads_its_dense_first_layers_whole_not_the_models_mix() -> None:
    # vLLM offloads from layer 0 up: DeepSeek-V3's first 3 layers are dense, all read each step
    dep = _dep("deepseek-v3", "h200", gpus=8)
    off = _offloaded(dep, 2)
    tp = dep.tensor_parallel_size
    dense = [layer for layer in dep.model.layers[:3]]
    assert all(layer_weight_bytes(dep, layer, ROUTED) == 0 for layer in dense)
    dense_bytes = sum(layer_weight_bytes(dep, layer) for layer in dense) / tp
    (split,) = stage_offloads(off)
    assert split.other_bytes > dense_bytes
    assert split.bytes == pytest.approx(offloaded_bytes_per_gpu(off))
    # layer 4's 896 MiB w13 crosses the 2 GiB and moves whole
    assert split.bytes / GIB == pytest.approx(2.51, abs=0.005)
    read = stage_read_bytes(off, split, 1)
    assert read == pytest.approx(offload_read_bytes(off, 1))
    assert read > dense_bytes
    # the model-wide mix (every layer's experts share) would read far less
    moe = dep.model.moe
    assert moe is not None
    (layers,) = stage_layer_bytes_per_gpu(dep)
    routed = layers.routed_bytes / layers.bytes
    touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, 1) / moe.num_experts
    assert read > 2 * offloaded_bytes_per_gpu(off) * (1 - routed + routed * touched)
    assert decode_floor(off, 1, 4096).host_time_s == pytest.approx(offload_read_time_s(off, 1))
    for batch in (1, 8, 64):
        assert step_cost(off, decode_batch(batch, 4096), VLLM).time_s \
            >= decode_floor(off, batch, 4096).step_time_s


def test_a_dense_model_reads_every_offloaded_byte_in_layer_order_too() -> None:
    for dep in (_dep(), _dep("llama-3.1-70b", "h100", gpus=4, pp=2, weights="fp8")):
        off = _offloaded(dep, 4)
        for split in stage_offloads(off):
            assert split.routed_bytes == 0
            assert split.other_bytes == pytest.approx(offloaded_bytes_per_gpu(off))
            assert stage_read_bytes(off, split, 1) == pytest.approx(split.bytes)


def test_an_all_moe_model_offloads_its_attention_before_its_experts() -> None:
    dep = _dep("qwen3-30b-a3b", "h100")
    off = _offloaded(dep, 1)
    tensors = layer_rank_tensors(dep, dep.model.layers[0])
    before_experts = sum(t.bytes for t in takewhile(lambda t: not t.routed, tensors))
    (split,) = stage_offloads(off)
    assert split.other_bytes >= before_experts
    assert split.bytes == pytest.approx(offloaded_bytes_per_gpu(off))


def test_qwen3_30b_at_1_gib_moves_its_first_layers_w2_whole_about_1_16_gib() -> None:
    """Layer 0 holds 1.16 GiB on one H100: its attention, router and w13 (0.79 GiB) leave the
    total under 1 GiB, so vLLM moves its 384 MiB w2 too, 164 MiB past the GiB asked."""
    dep = _dep("qwen3-30b-a3b", "h100")
    tensors = layer_rank_tensors(dep, dep.model.layers[0])
    w2 = next(t for t in tensors if t.name == "experts.w2_weight")
    below = sum(t.bytes for t in takewhile(lambda t: t is not w2, tensors))
    assert below < GIB < below + w2.bytes
    moved = offloaded_bytes_per_gpu(_offloaded(dep, 1))
    assert moved == pytest.approx(below + w2.bytes)
    assert moved / GIB == pytest.approx(1.16, abs=0.005)


def _deepseek_pp2_at_40_gib() -> Deployment:
    """DeepSeek-V3 on TP8 x PP2 H200s at 40 GiB: stage 1's 31 layers hold less than 40 GiB a
    GPU, stage 2's 30 (all MoE) more."""
    return _offloaded(_dep("deepseek-v3", "h200", gpus=16, pp=2), 40)


def test_each_stage_offloads_its_own_layers_or_the_asked_gib_and_part_of_a_tensor_more() -> None:
    off = _deepseek_pp2_at_40_gib()
    layers = stage_layer_bytes_per_gpu(off)
    offloads = stage_offloads(off)
    assert layers[0].bytes < 40 * GIB < layers[1].bytes
    assert offloads[0].bytes == pytest.approx(layers[0].bytes)  # every layer of stage 1
    # what was asked on stage 2, and the rest of the tensor that crossed it
    assert 40 * GIB <= offloads[1].bytes < 40 * GIB + _largest_tensor_bytes(off)
    assert offloads[1].bytes / GIB == pytest.approx(40.23, abs=0.005)  # a w13 crossed it
    assert offloaded_bytes_per_gpu(off) == offloads[1].bytes  # the most of any GPU
    assert offloaded_bytes(off) == pytest.approx(8 * (offloads[0].bytes + offloads[1].bytes))


@pytest.mark.parametrize(("model", "gpus", "pp", "gib"), [
    ("deepseek-v3", 16, 2, 40), ("qwen3-30b-a3b", 5, 5, 100), ("llama-3.1-70b", 3, 3, 500)])
def test_no_stage_keeps_negative_weights_and_each_pool_loses_its_own_offload(
        model: str, gpus: int, pp: int, gib: float) -> None:
    dep = _dep(model, "h200" if model == "deepseek-v3" else "h100", gpus=gpus, pp=pp)
    off = _offloaded(dep, gib)
    for stage, pool, before, split in zip(pipeline_stages(off), stage_pools(off, SETTINGS),
                                          stage_pools(dep, SETTINGS), stage_offloads(off)):
        assert pool.weight_bytes >= 0
        assert before.weight_bytes - pool.weight_bytes == pytest.approx(split.bytes)
        assert split.bytes <= stage_weight_bytes(off, stage, 0.0)


def test_fit_on_deepseek_pp2_at_40_gib_prints_no_negative_weights(capsys) -> None:
    code, out, _ = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                           "-pp", "2", "--cpu-offload-gb", "40", "--max-model-len", "8k",
                           "--explain")
    assert code == 0
    weights = next(line for line in out.splitlines() if line.startswith("− weights"))
    assert "-" not in weights.split()[-2]
    by_stage = next(line for line in out.splitlines() if "weights per GPU by stage" in line)
    assert "-" not in by_stage.split("=")[1]


def test_a_step_reads_each_stages_own_offload_in_turn() -> None:
    off = _deepseek_pp2_at_40_gib()
    link = host_link_bytes_per_s(off.accelerator)
    assert offload_read_time_s(off) == pytest.approx(
        sum(split.bytes for split in stage_offloads(off)) / link)
    # an 8,000-token prompt touches every expert: it reads every offloaded byte
    assert offload_read_share(off, 8000) == pytest.approx(1.0, abs=1e-6)


def test_the_caution_says_every_layer_only_of_the_stages_where_that_is_true() -> None:
    caution = cpu_offload_caution(_deepseek_pp2_at_40_gib())
    assert "the layers of stage 1 hold" in caution and "stage 2" not in caution
    assert "offloads every layer there" in caution
    assert "offloads every layer" not in cpu_offload_caution(
        _offloaded(_dep("deepseek-v3", "h200", gpus=16, pp=2), 2))


@pytest.mark.parametrize(("gib", "fits"), [(315, False), (330, True)])
def test_the_host_check_counts_what_each_hosts_gpus_pin(capsys, gib: int, fits: bool) -> None:
    """Stage 2's host pins 8 x 40.23 GiB = 321.8 GiB, more than the average over stages would."""
    code, _, err = run_cli(capsys, "decode", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                           "-pp", "2", "--cpu-offload-gb", "40", "--host-memory-gib", str(gib),
                           "--batch", "1")
    assert (code == 0) == fits
    if not fits:
        pinned = 8 * stage_offloads(_deepseek_pp2_at_40_gib())[1].bytes
        assert f"{pinned / GIB:,.1f} GiB" in err and err.count("\n") == 1


def test_a_host_spanning_two_stages_pins_both_stages_shares(capsys) -> None:
    """Llama-3.1-70B over PP3 on one 3-GPU host: it pins every layer of the three stages."""
    dep = _offloaded(_dep("llama-3.1-70b", "h100", gpus=3, pp=3), 500)
    pinned = sum(split.bytes for split in stage_offloads(dep))
    argv = ("fit", "llama-3.1-70b", "--gpu", "h100", "-pp", "3", "--cpu-offload-gb", "500",
            "--max-model-len", "8192", "--host-memory-gib")
    assert run_cli(capsys, *argv, str(pinned / GIB + 1))[0] == 0
    code, _, err = run_cli(capsys, *argv, str(pinned / GIB - 1))
    assert code == 2 and f"{pinned / GIB:,.1f} GiB" in err


@pytest.mark.parametrize(("gpu", "gib", "host_gib"), [
    ("gb200", "60", "400"),  # a GB200 compute tray: 4 GPUs x 60 = 240 GiB, not 8 x 60
    ("mi250x", "10", "100"),  # a 4-card MI250X node: 4 x 15.94 GiB of 70B's layers
])
def test_a_host_holds_its_own_gpus_not_the_nvlink_domain(capsys, gpu, gib, host_gib) -> None:
    model = "deepseek-v3" if gpu == "gb200" else "llama-3.1-70b"
    code, _, err = run_cli(capsys, "decode", model, "--gpu", gpu, "--num-gpus", "8",
                           "--cpu-offload-gb", gib, "--host-memory-gib", host_gib, "--batch", "1")
    assert code == 0, err


def test_host_gpus_come_from_the_catalog_or_a_dgx_boards_eight() -> None:
    from ridgeline.parallel import host_gpus, node_size

    gb200 = resolve_accelerator("gb200")
    assert host_gpus(gb200) == 4 < node_size(gb200)
    assert host_gpus(resolve_accelerator("mi250x")) == 4
    assert host_gpus(resolve_accelerator("h100")) == node_size(resolve_accelerator("h100"))
    assert host_gpus(resolve_accelerator("gh200")) == node_size(resolve_accelerator("gh200"))


def test_the_copies_each_tp_rank_keeps_whole_are_offloaded_and_read_as_spared() -> None:
    """DeepSeek-V3 at TP8: its routers and MLA down-projections, whole on every rank, move
    with their layers; the floor spares of HBM what the link reads."""
    from ridgeline.step_work import step_work

    dep = _dep("deepseek-v3", "h200", gpus=8)
    assert dep.tp_copies_bytes > 0
    big = _offloaded(dep, 1000)
    layers = sum(layer_weight_bytes(dep, layer) for layer in dep.model.layers)
    assert offloaded_bytes(big) == pytest.approx(layers + dep.tp_copies_bytes)
    off = _offloaded(dep, 2)
    for batch in (1, 8, 64):
        work = step_work(off, decode_batch(batch, 4096))
        assert work.hbm_spared_bytes == pytest.approx(work.link_bytes, rel=2e-3)


def test_v0_copies_the_offload_into_hbm_so_the_floor_spares_none() -> None:
    dep = _dep("qwen3-30b-a3b", "h100")
    off = _offloaded(dep, 20)
    copied = replace(off, cpu_offload=replace(off.cpu_offload, in_place=False))
    assert hbm_spared_bytes(copied, 1e9, 1e9) == 0
    assert hbm_spared_bytes(off, 1e9, 1e9) > 0
    plain = decode_floor(dep, 8, 4096)
    assert decode_floor(copied, 8, 4096).memory_time_s == pytest.approx(plain.memory_time_s)


def test_json_and_the_deployment_line_give_each_stages_offload(capsys) -> None:
    argv = ("decode", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "-pp", "2",
            "--cpu-offload-gb", "40", "--batch", "1")
    off = json.loads(run_cli(capsys, *argv, "--json")[1])
    by_stage = [split.bytes for split in stage_offloads(_deepseek_pp2_at_40_gib())]
    assert off["cpu_offload"]["bytes_per_gpu_by_stage"] == pytest.approx(by_stage)
    assert off["cpu_offload"]["bytes_per_gpu"] == pytest.approx(max(by_stage))
    labels = ", ".join(f"{b / GIB:,.2f}" for b in by_stage)
    assert f"{labels} GiB a GPU by stage" in off["deployment"]


def test_llama_70b_at_40_gib_on_one_h100_moves_layer_25s_qkv_whole_0_78_mib_past_the_ask() -> None:
    """25 of Llama-3.1-70B's bf16 layers (1.59 GiB each) hold 159 MiB less than 40 GiB, so
    vLLM moves the 26th's 160 MiB qkv_proj whole and stops: 40 GiB + 0.78 MiB leave the GPU."""
    dep = _dep("llama-3.1-70b", "h100")
    tensors = layer_rank_tensors(dep, dep.model.layers[0])
    layer = sum(t.bytes for t in tensors)
    whole_layers = int(40 * GIB // layer)
    assert whole_layers == 25
    assert 40 * GIB - whole_layers * layer < tensors[0].bytes  # the qkv_proj crosses the ask
    off = _offloaded(dep, 40)
    moved = offloaded_bytes_per_gpu(off)
    assert moved == pytest.approx(whole_layers * layer + tensors[0].bytes)
    assert (moved - 40 * GIB) / 2**20 == pytest.approx(0.78, abs=0.01)
    # the GPU keeps that much less, and its pool gains it
    assert kv_pool(dep, SETTINGS).weight_bytes - kv_pool(off, SETTINGS).weight_bytes \
        == pytest.approx(moved)


@pytest.mark.parametrize(("model", "gpu", "gpus", "pp", "gib"), [
    ("llama-3.1-8b", "rtx-4090", 1, 1, 4), ("llama-3.1-70b", "h100", 2, 1, 7),
    ("qwen3-30b-a3b", "h100", 1, 1, 3), ("deepseek-v3", "h200", 8, 1, 2),
    ("deepseek-v3", "h200", 16, 2, 40), ("gpt-oss-120b", "h100", 1, 1, 10),
    ("qwen3-next-80b-a3b-thinking", "h200", 1, 1, 5), ("jamba-1.5-mini", "h100", 1, 1, 6),
    ("nemotron-h-56b-base-8k", "h100", 2, 1, 9)])
def test_each_stage_moves_whole_tensors_until_the_total_reaches_the_ask(
        model: str, gpu: str, gpus: int, pp: int, gib: float) -> None:
    """vLLM checks the total before each parameter and moves it whole: a stage's offload is
    the first running total of its tensors (in vLLM's order) at or past the ask, or all."""
    dep = _dep(model, gpu, gpus=gpus, pp=pp)
    off = _offloaded(dep, gib)
    for stage, split in zip(pipeline_stages(off), stage_offloads(off)):
        own = dep.model.layers[stage.start:stage.start + stage.layers]
        totals = list(accumulate(t.bytes for layer in own for t in layer_rank_tensors(dep, layer)))
        expected = next((total for total in totals if total >= gib * GIB), totals[-1])
        assert split.bytes == pytest.approx(expected)


@pytest.mark.parametrize(("model", "gpu", "gpus"), [
    ("llama-3.1-70b", "h100", 1), ("llama-3.1-70b", "h100", 16), ("deepseek-v3", "h200", 8),
    ("deepseek-v3", "h200", 1), ("qwen3-30b-a3b", "h100", 4), ("gpt-oss-120b", "h100", 2),
    ("qwen3-next-80b-a3b-thinking", "h200", 4), ("jamba-1.5-mini", "h100", 2),
    ("nemotron-h-56b-base-8k", "h100", 4), ("kimi-k2-instruct", "h200", 8),
    ("falcon-7b-instruct", "h100", 1)])
def test_a_layers_tensors_add_up_to_its_bytes_on_a_gpu(model: str, gpu: str, gpus: int) -> None:
    """The parameters the walk moves are the layer's weights one GPU holds, split by shape:
    together the layer's bytes there, the routed experts' among them, each a positive size."""
    dep = _dep(model, gpu, gpus=gpus)
    for layer in set(dep.model.layers):
        tensors = layer_rank_tensors(dep, layer)
        whole = layer_bytes_per_gpu(dep, layer)
        assert all(t.bytes > 0 for t in tensors)
        assert sum(t.bytes for t in tensors) == pytest.approx(whole.bytes)
        assert sum(t.bytes for t in tensors if t.routed) == pytest.approx(whole.routed_bytes)


def test_llama_8b_at_4_gib_on_a_4090_moves_4_06_gib_and_adds_136_ms_a_decode_step() -> None:
    """docs/answers.md's figures: nine layers and the tenth's qkv, o and gate_up hold under 4 GiB,
    so its 112 MiB down_proj moves whole; 4.06 GiB read at the 4090's 32 GB/s each step."""
    dep = _dep()
    tensors = layer_rank_tensors(dep, dep.model.layers[0])
    assert tensors[3].name == "down_proj" and tensors[3].bytes / 2**20 == pytest.approx(112)
    off = _offloaded(dep, 4)
    moved = offloaded_bytes_per_gpu(off)
    assert moved / GIB == pytest.approx(4.06, abs=0.005)
    assert kv_pool(off, SETTINGS).pool_bytes - kv_pool(dep, SETTINGS).pool_bytes \
        == pytest.approx(moved)
    assert offload_read_time_s(off) * 1e3 == pytest.approx(136, abs=0.5)


def test_the_caution_says_why_more_than_the_ask_moved_only_where_it_did() -> None:
    assert "moves each parameter whole" in cpu_offload_caution(_offloaded(_dep(), 4))
    # every layer, under the ask: nothing crossed it
    assert "moves each parameter whole" not in cpu_offload_caution(_offloaded(_dep(), 40))


def test_an_mi250s_two_dies_each_move_their_own_tensors_whole_copies_and_all() -> None:
    """vLLM runs an MI250X as two devices, each walking its own shards against the flag's GiB,
    routers and MLA's down-projections whole on each: the card moves what two such dies move
    (one die priced as a rank of a 16-GPU TP group), and a budget past the layers moves every
    layer the card holds, copies and all."""
    card = _dep("deepseek-v3", "mi250x", gpus=8, weights="bf16")
    die = _dep("deepseek-v3", "mi300x", gpus=16, weights="bf16")
    for gib in (2, 20):
        assert offloaded_bytes_per_gpu(_offloaded(card, gib)) == pytest.approx(
            2 * offloaded_bytes_per_gpu(_offloaded(die, gib)))
    for layer in dict.fromkeys(card.model.layers):
        assert sum(t.bytes for t in layer_rank_tensors(card, layer)) == pytest.approx(
            layer_bytes_per_gpu(card, layer).bytes)
    (layers,) = stage_layer_bytes_per_gpu(card)
    assert offloaded_bytes_per_gpu(_offloaded(card, 1000)) == pytest.approx(layers.bytes)


def test_an_mi250s_ask_in_the_caution_says_its_two_dies_are_added() -> None:
    """The flag's GiB is each die's: a card's ask is twice it, and the caution says why the
    figure is not the one typed."""
    card = _offloaded(_dep("deepseek-v3", "mi250x", gpus=8, weights="bf16"), 200)
    text = cpu_offload_caution(card)
    assert f"{asked_bytes_per_gpu(card) / GIB:g} GiB asked (2 dies added) is more than" in text
    assert "(2 dies added)" not in cpu_offload_caution(_offloaded(_dep(), 4)).split("asked")[1]


def test_a_drafter_that_sends_vllm_to_the_v1_runner_offloads_before_0_29() -> None:
    """Before v0.29 Model Runner V2 ignores --cpu-offload-gb, but vLLM falls back to the V1
    runner, which installs the offloader, for ngram or a draft model, and in 0.27 and 0.28 for
    EAGLE-3 under pipeline parallelism: those are accepted where an EAGLE head is refused."""
    from ridgeline.vllm_memory import vllm_data

    one = _offloaded(_dep("llama-3.1-70b", "h200"), 20)
    assert runner_problem(one, "0.28.0", "eagle")
    for method in vllm_data()["mrv2_spec_fallback"]["until"]:  # V1 before 0.31 and 0.32
        assert not runner_problem(one, "0.28.0", method)
    two = _offloaded(_dep("llama-3.1-70b", "h200", gpus=2, pp=2), 20)
    assert runner_problem(two, "0.28.0", "eagle")
    assert not runner_problem(two, "0.28.0", "eagle", "eagle3")
    assert runner_problem(two, "0.26", "eagle", "eagle3")  # 0.26 not read: MRV2, refused


@pytest.mark.parametrize("drafter", [("--spec-tokens", "3", "--spec-method", "ngram"),
                                     ("--speculative-config",
                                      '{"method": "ngram", "num_speculative_tokens": 3, '
                                      '"prompt_lookup_max": 4}')])
def test_fit_offloads_on_the_v1_runner_an_ngram_drafter_keeps(capsys, drafter) -> None:
    argv = ("fit", "llama-3.1-8b", "--gpu", "h100", "--engine-version", "0.27.1",
            "--cpu-offload-gb", "4", "--max-model-len", "8192", "--json")
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and "Model Runner V2" in err
    code, out, _ = run_cli(capsys, *argv, *drafter)
    assert code == 0
    fit = json.loads(out)
    assert fit["model_runner"] == "V1"
    assert fit["cpu_offload"]["bytes_per_gpu"] >= 4 * GIB
