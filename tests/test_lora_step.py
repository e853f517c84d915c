"""vLLM --enable-lora in the step: punica's shrink and expand as the step's "lora adapters"
part, reading the A and B of the adapters the batch uses (lora_step.py), through decode,
prefill and simulate via the Deployment."""

from __future__ import annotations

import json

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.cost import (
    IDEAL,
    Seq,
    StepCost,
    batch_shape,
    decode_batch,
    op_slowdown,
    shape_time_s,
    step_cost,
)
from ridgeline.engines import profile_for
from ridgeline.launches import deployment_matmuls
from ridgeline.lora_step import LORA_OP, lora_launches
from ridgeline.sim.timer import StepTimer
from ridgeline.vllm_lora import LoRAModule, LoRASettings, lora_modules

FOUR_RANK_64 = LoRASettings(max_loras=4, max_lora_rank=64)


def llama_8b(weights: str | None = None) -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100-sxm"),
                            weights, num_gpus=1, engine="vllm")


def lora_part(cost: StepCost) -> tuple[float, float, float]:
    """The step's LoRA part: FLOPs, bytes, time."""
    (op,) = [op for op in cost.ops if op.name == LORA_OP]
    return op.flops, op.bytes, op.time_s


def one_adapter_bytes(m: LoRAModule) -> float:
    """One adapter's A and B of a module, as the pool sizes its slots (one slot's share)."""
    return m.count * m.bytes_each / m.slots


def test_batch_8_reads_the_four_active_adapters_a_and_b_and_the_tensors_they_touch() -> None:
    plain, lora = llama_8b(), llama_8b().with_lora(FOUR_RANK_64)
    batch = decode_batch(8, 1024)
    extra = step_cost(lora, batch).bytes - step_cost(plain, batch).bytes
    modules = lora_modules(lora, FOUR_RANK_64)
    by_name = {m.name: m for m in modules}
    # the four adapters' A and B of every module, but the embedding's A, of which the step
    # looks up a row a token (F.embedding) rather than reads it
    embed = by_name["embed_tokens"]
    adapters = 4 * (sum(one_adapter_bytes(m) for m in modules)
                    - embed.slices * embed.a_rank * embed.input_width * embed.element_bytes)
    rows = 8 * embed.a_rank * embed.element_bytes
    # per token: x once in bf16, the fp32 buffer zeroed, written and read, the bf16 output
    # read and written back; the embedding's expand only its output
    tensors = 8 * sum(m.count * (2 * m.input_width + 3 * 4 * m.slices * m.a_rank
                                 + 2 * 2 * m.output_width)
                      for m in modules if m.name != "embed_tokens")
    tensors += 8 * 2 * 2 * embed.output_width
    assert extra == pytest.approx(adapters + rows + tensors, rel=1e-12)
    assert lora_part(step_cost(lora, batch))[1] == pytest.approx(extra, rel=1e-12)
    # the adapters are most of it at decode: 1.41 GB of a 1.48 GB part
    assert adapters / extra > 0.95


def test_four_adapters_read_four_times_one_adapters_a_and_b() -> None:
    batch = decode_batch(8, 1024)
    four = lora_part(step_cost(llama_8b().with_lora(FOUR_RANK_64), batch))[1]
    shared = LoRASettings(max_loras=4, max_lora_rank=64, active_loras=1)
    one = lora_part(step_cost(llama_8b().with_lora(shared), batch))[1]
    modules = lora_modules(llama_8b(), FOUR_RANK_64)
    embed = next(m for m in modules if m.name == "embed_tokens")
    per_adapter = sum(one_adapter_bytes(m) for m in modules) \
        - embed.a_rank * embed.input_width * embed.element_bytes
    assert four - one == pytest.approx(3 * per_adapter, rel=1e-12)


def test_batch_1_with_four_slots_reads_one_adapter() -> None:
    batch = decode_batch(1, 1024)
    slots = lora_part(step_cost(llama_8b().with_lora(FOUR_RANK_64), batch))
    one = LoRASettings(max_loras=1, max_lora_rank=64)
    assert slots == lora_part(step_cost(llama_8b().with_lora(one), batch))
    assert FOUR_RANK_64.active(1) == 1 and FOUR_RANK_64.active(8) == 4


def test_lora_flops_are_two_per_adapter_element_a_token_and_scale_with_tokens() -> None:
    lora = llama_8b().with_lora(FOUR_RANK_64)
    modules = lora_modules(lora, FOUR_RANK_64)
    # each token multiplies by its own adapter's A and B once (the embedding: B only); the
    # lm_head's on the one logits row of each sequence
    per_token = sum(2 * m.count * (m.a_elements + m.b_elements) for m in modules
                    if m.name not in ("embed_tokens", "lm_head"))
    per_token += sum(2 * m.b_elements for m in modules if m.name == "embed_tokens")
    head = next(m for m in modules if m.name == "lm_head")
    per_row = 2 * (head.a_elements + head.b_elements)
    for tokens in (512, 1024):
        flops = lora_part(step_cost(lora, [Seq(tokens, 0)]))[0]
        assert flops == pytest.approx(tokens * per_token + per_row, rel=1e-12)
    decode = [lora_part(step_cost(lora, decode_batch(b, 1024)))[0] for b in (8, 16)]
    assert decode[1] == pytest.approx(2 * decode[0], rel=1e-12)
    # Llama-3.1-8B's qkv_proj at rank 64: 2·64·(3 × 4,096 + 6,144) FLOPs a token
    qkv = next(m for m in modules if m.name == "qkv_proj")
    assert 2 * (qkv.a_elements + qkv.b_elements) == 2 * 64 * (3 * 4096 + 6144)


def test_decode_is_slower_by_exactly_the_lora_part_at_the_floor() -> None:
    batch = decode_batch(8, 8192)
    plain = step_cost(llama_8b(), batch, IDEAL)
    lora = step_cost(llama_8b().with_lora(FOUR_RANK_64), batch, IDEAL)
    _, nbytes, time_s = lora_part(lora)
    assert lora.time_s - plain.time_s == pytest.approx(time_s, rel=1e-9)
    # memory-bound at decode: its bytes at the H100's rated bandwidth
    assert time_s == pytest.approx(nbytes / resolve_accelerator("h100-sxm")
                                   .memory_bandwidth_bytes_per_s, rel=1e-9)
    # in the engine's expectation, the part at its bandwidth share, and its kernels in the
    # overhead at the profile's cost per weight matmul
    profile = profile_for("vllm")
    engine = step_cost(llama_8b().with_lora(FOUR_RANK_64), batch, profile)
    base = step_cost(llama_8b(), batch, profile)
    launches_s = lora_launches(llama_8b().with_lora(FOUR_RANK_64)) * profile.matmul_overhead_s
    assert engine.time_s - base.time_s == pytest.approx(lora_part(engine)[2] + launches_s,
                                                        rel=1e-9)
    assert overhead_s(engine) - overhead_s(base) == pytest.approx(launches_s, rel=1e-9)


def overhead_s(cost: StepCost) -> float:
    return sum(op.time_s for op in cost.ops if op.name == "overhead")


def test_llama_8b_launches_a_shrink_and_an_expand_a_module_259_a_step() -> None:
    """Each adapted linear is one shrink and one expand whatever its slices (a grid axis);
    the embedding's A is looked up, so one expand: from the shapes, every layer's four
    linears twice, the lm_head twice, the embedding once."""
    plain, lora = llama_8b(), llama_8b().with_lora(FOUR_RANK_64)
    modules = lora_modules(lora, FOUR_RANK_64)
    linears = [m for m in modules if m.name not in ("embed_tokens", "lm_head")]
    assert {m.count for m in linears} == {plain.model.num_layers}
    want = 2 * sum(m.count for m in linears) + 2 + 1  # the lm_head's, the embedding's expand
    assert lora_launches(lora) == want == plain.model.num_layers * 4 * 2 + 3 == 259
    assert deployment_matmuls(lora) - deployment_matmuls(plain) == want
    assert lora_launches(plain) == 0


def test_llama_8b_decode_at_batch_1_is_3_7_ms_later_under_vllms_launch_cost() -> None:
    """The 259 kernels at vLLM's 14.3 µs a weight matmul, graphed as the decode is: the
    priced part itself is a fraction of that at batch 1 (rank 8, one adapter)."""
    profile = profile_for("vllm")
    one = LoRASettings(max_loras=1, max_lora_rank=8)
    batch = decode_batch(1, 1024)
    base = step_cost(llama_8b(), batch, profile)
    lora = step_cost(llama_8b().with_lora(one), batch, profile)
    launches_s = lora_launches(llama_8b().with_lora(one)) * profile.matmul_overhead_s
    assert launches_s == pytest.approx(3.7e-3, rel=0.01)
    assert lora.time_s - base.time_s == pytest.approx(launches_s + lora_part(lora)[2], rel=1e-9)
    assert lora_part(lora)[2] < launches_s / 50


def test_active_loras_0_launches_no_kernels_as_vllm_skips_them() -> None:
    none = LoRASettings(max_loras=4, max_lora_rank=64, active_loras=0)
    assert lora_launches(llama_8b().with_lora(none)) == 0
    assert deployment_matmuls(llama_8b().with_lora(none)) == deployment_matmuls(llama_8b())


@pytest.mark.parametrize("rows", [1, 3, 8, 300])
def test_the_simulators_timer_prices_the_adapters_of_the_steps_own_rows(rows: int) -> None:
    """StepTimer equals shape_time_s under LoRA: the adapters read (min(rows, slots)) and the
    lm_head's columns are the step's rows, not the one row its per-token terms assume."""
    profile = profile_for("vllm")
    for lora in (FOUR_RANK_64, LoRASettings(max_loras=4, max_lora_rank=64, active_loras=2)):
        dep = llama_8b().with_lora(lora)
        shape = batch_shape(dep, decode_batch(rows, 1024))
        timer = StepTimer(dep, profile)
        assert timer.time_s(shape) == pytest.approx(shape_time_s(dep, shape, profile),
                                                    rel=1e-12)
        assert timer.decode_time_s(rows, rows * 1024) == pytest.approx(
            shape_time_s(dep, shape, profile), rel=1e-12)


def test_fp8_weights_leave_the_adapters_at_bf16s_rate() -> None:
    fp8 = llama_8b("fp8")
    assert op_slowdown(fp8, LORA_OP) == pytest.approx(
        fp8.accelerator.peak("fp8") / fp8.accelerator.peak("bf16"))
    assert op_slowdown(llama_8b(), LORA_OP) == 1.0


def test_no_lora_leaves_the_step_and_its_deployment_as_they_were() -> None:
    dep = llama_8b()
    assert dep.with_lora(None) is dep
    assert all(op.name != LORA_OP for op in step_cost(dep, decode_batch(8, 1024)).ops)
    assert hash(dep.with_lora(FOUR_RANK_64)) != hash(dep)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


DECODE = ("decode", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192", "--batch", "8",
          "--enable-lora", "--max-loras", "4", "--max-lora-rank", "64")


def test_decode_reads_the_adapters_and_explain_names_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *DECODE, "--explain")
    assert code == 0
    step = step_cost(llama_8b().with_lora(FOUR_RANK_64), decode_batch(8, 8192))
    gb = lora_part(step)[1] / 1e9
    assert f"+ {gb:,.2f} GB of LoRA adapters" in out
    assert "of which LoRA adapters" in out
    assert "min(batch, 4) a step" in out


def test_active_loras_one_reads_less_than_four(capsys: pytest.CaptureFixture[str]) -> None:
    _, four, _ = run(capsys, *DECODE)
    code, one, _ = run(capsys, *DECODE, "--active-loras", "1")
    assert code == 0
    read = [float(line.split("+ ")[-1].split(" GB of LoRA")[0])
            for text in (four, one) for line in text.splitlines() if "GB of LoRA" in line]
    assert read[1] < read[0] / 3
    assert "at most 1 adapter a step" in one


def test_active_loras_past_the_slots_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *DECODE, "--active-loras", "5")
    assert code == 2
    assert "between 0 and --max-loras (4" in err and len(err.strip().splitlines()) == 1


def test_active_loras_0_is_the_base_models_step_as_vllm_skips_the_kernels(
        capsys: pytest.CaptureFixture[str]) -> None:
    """No request names an adapter: lora_shrink and lora_expand return on no_lora_flag_cpu,
    so the step is the base model's; the pool still loses the slots."""
    base = LoRASettings(max_loras=4, max_lora_rank=64, active_loras=0)
    batch = decode_batch(8, 1024)
    assert step_cost(llama_8b().with_lora(base), batch) == step_cost(llama_8b(), batch)
    code, out, _ = run(capsys, *DECODE, "--active-loras", "0")
    assert code == 0
    assert "GB of LoRA adapters" not in out and "skips the adapters' kernels" in out


def test_active_loras_without_enable_lora_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100-sxm",
                       "--active-loras", "2")
    assert code == 2
    assert "needs --enable-lora" in err


def test_prefill_is_later_by_the_lora_part_of_its_one_step_and_its_launches(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ("prefill", "llama-3.1-8b", "--gpu", "h100-sxm", "--prompt-len", "2048", "--json")
    code, plain, _ = run(capsys, *base)
    _, lora, _ = run(capsys, *base, "--enable-lora", "--max-loras", "4", "--max-lora-rank",
                     "64")
    assert code == 0
    times = [json.loads(text)["expected"]["time_s"] for text in (plain, lora)]
    profile = profile_for("vllm")
    step = step_cost(llama_8b().with_lora(FOUR_RANK_64), [Seq(2048, 0)], profile)
    launches_s = lora_launches(llama_8b().with_lora(FOUR_RANK_64)) * profile.matmul_overhead_s
    assert times[1] - times[0] == pytest.approx(lora_part(step)[2] + launches_s, rel=1e-6)
    assert any("'lora adapters'" in c for c in json.loads(lora)["cautions"])


def test_llama_cpp_with_enable_lora_exits_2_before_any_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine",
                       "llama.cpp-cuda", "--enable-lora")
    assert code == 2
    assert "--enable-lora is not modelled for llama.cpp-cuda" in err


def test_the_caution_sets_the_priced_part_against_vllms_measured_loss() -> None:
    """engines.json's measured loss is the one its setup's two throughputs give (1 − 1,787.78 ÷
    2,693.62), and the caution decode prints quotes it as the bound the priced part sits under."""
    import re

    from ridgeline.vllm_lora import LoRASettings, lora_step_caution
    from ridgeline.vllm_memory import vllm_data

    measured = vllm_data()["lora"]["measured"]
    without, with_lora = (float(x.replace(",", "")) for x in
                          re.findall(r"([\d,]+\.\d+) (?:output tok/s|with)", measured["setup"]))
    assert round(1 - with_lora / without, 2) == measured["throughput_loss"]
    line = lora_step_caution(LoRASettings())
    assert f"lost {measured['throughput_loss']:.0%}" in line and "lower bound" in line
