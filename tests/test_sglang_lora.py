"""SGLang's LoRA slots: the A and B buffers its LoRAMemoryPool stacks for
--max-loras-per-batch adapters at --max-lora-rank before it sizes the static pool, a line of
fit's breakdown, the adapters' matmuls in the step, and the refusals where the rule is not
known or SGLang reads the adapters' files (sglang_lora.py; engines.json sglang.lora)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.cost import IDEAL, StepCost, decode_batch, step_cost
from ridgeline.datafiles import load_data
from ridgeline.engines import profile_for
from ridgeline.lora_slots import engine_lora_problem
from ridgeline.lora_step import LORA_OP, lora_launches
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sglang_lora import SGLangLoRASettings, sglang_lora_bytes, sglang_lora_modules
from ridgeline.vllm_lora import LoRASettings, lora_modules
from tests.conftest import same_answer

FIT = ("fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "sglang", "--max-model-len",
       "8192")
EIGHT_RANK_64 = SGLangLoRASettings(max_lora_rank=64, lora_paths=2)  # the default 8 slots


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def llama_8b(tp: int = 1, engine: str = "sglang") -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100-sxm"),
                            num_gpus=tp, engine=engine)


def pool_bytes_from_config(config: dict[str, int], slots: int, rank: int, tp: int,
                           tables: bool = False) -> int:
    """The tensors LoRAMemoryPool.init_buffers allocates, shape by shape, from config.json:
    A (slots, stacked × rank, input), B (slots, output, rank) for every layer, the input of
    o_proj and down_proj and the output of the others ÷ TP; 2 bytes each."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    d = h // heads
    shapes = [(slots, 3 * rank, h), (slots, (heads + 2 * kv) * d // tp, rank),  # qkv_proj
              (slots, rank, heads * d // tp), (slots, h, rank),  # o_proj
              (slots, 2 * rank, h), (slots, 2 * inter // tp, rank),  # gate_up_proj
              (slots, rank, inter // tp), (slots, h, rank)]  # down_proj
    total = config["num_hidden_layers"] * sum(a * b * c for a, b, c in shapes)
    if tables:  # embed_tokens A (slots, rank, vocab), B (slots, hidden, rank); lm_head's
        total += 2 * (slots * rank * config["vocab_size"] + slots * h * rank)
    return 2 * total


def llama_config() -> dict[str, int]:
    return dict(load_data("models/meta-llama--Llama-3.1-8B.json"))


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_llama31_8b_eight_rank64_slots_are_sglangs_buffers_summed(tp: int) -> None:
    got = sglang_lora_bytes(llama_8b(tp), EIGHT_RANK_64)
    assert got == pool_bytes_from_config(llama_config(), 8, 64, tp)
    if tp == 1:  # 32 layers × 80 MiB: 2.5 GiB of one H100, as sglang_lora.py works it
        assert got == 32 * 80 * 2**20


def test_llama31_8b_rank64_is_10_mib_a_slot_and_layer_as_lora_shapes_works_it() -> None:
    one = SGLangLoRASettings(max_loras_per_batch=1, max_lora_rank=64, lora_paths=1)
    elements = {m.name: m.a_elements + m.b_elements
                for m in sglang_lora_modules(llama_8b(), one)}
    config = llama_config()
    h, inter = config["hidden_size"], config["intermediate_size"]
    kv_out = 2 * config["num_key_value_heads"] * h // config["num_attention_heads"]  # K and V
    assert elements == {"qkv_proj": 64 * (3 * h + h + kv_out), "o_proj": 64 * 2 * h,
                        "gate_up_proj": 64 * (2 * h + 2 * inter), "down_proj": 64 * (inter + h)}
    assert elements["qkv_proj"] == 1_179_648 and elements["gate_up_proj"] == 2_359_296
    assert 2 * sum(elements.values()) == 10 * 2**20


def test_sglangs_default_is_eight_slots_and_the_adapters_linear_layers() -> None:
    assert EIGHT_RANK_64.slots == load_data("engines.json")["sglang"]["lora"][
        "max_loras_per_batch"]
    assert EIGHT_RANK_64.describe() == "8 × rank 64"
    names = {m.name for m in sglang_lora_modules(llama_8b(), EIGHT_RANK_64)}
    assert names == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}


def test_q_and_v_alone_size_the_whole_qkv_proj_and_all_adds_both_tables() -> None:
    """SGLang normalizes q_proj and v_proj to qkv_proj, whose buffer holds all three slices;
    'all' adds the embedding's and the lm_head's tables."""
    qv = SGLangLoRASettings(max_lora_rank=64, lora_target_modules=("q_proj", "v_proj"))
    (qkv,) = sglang_lora_modules(llama_8b(), qv)
    assert qkv.name == "qkv_proj" and qkv.slices == 3
    every = replace(qv, lora_target_modules=("all",))
    assert sglang_lora_bytes(llama_8b(), every) == pool_bytes_from_config(
        llama_config(), 8, 64, 1, tables=True)


def test_the_shapes_are_vllms_for_the_same_slots_and_rank() -> None:
    sglang = {m.name: m for m in sglang_lora_modules(
        llama_8b(2), SGLangLoRASettings(max_loras_per_batch=4, max_lora_rank=64,
                                        lora_target_modules=("all",)))}
    vllm = {m.name: m for m in lora_modules(llama_8b(2, "vllm"),
                                            LoRASettings(max_loras=4, max_lora_rank=64))}
    for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        assert sglang[name] == vllm[name]


def test_the_pool_shrinks_by_exactly_the_lora_bytes() -> None:
    dep, plain = llama_8b(), EngineSettings(max_model_len=8192)
    without = kv_pool(dep, plain)
    with_lora = kv_pool(dep, replace(plain, lora=EIGHT_RANK_64))
    assert with_lora.lora_bytes == sglang_lora_bytes(dep, EIGHT_RANK_64)
    assert without.pool_bytes - with_lora.pool_bytes == pytest.approx(with_lora.lora_bytes)
    assert with_lora.tokens < without.tokens


def test_fit_prints_the_lora_line_explain_and_json_carry_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    flags = ("--enable-lora", "--max-lora-rank", "64", "--lora-paths", "sql=/a/sql", "b=/a/b")
    code, out, _ = run(capsys, *FIT, *flags)
    assert code == 0
    expected = sglang_lora_bytes(llama_8b(), EIGHT_RANK_64) / 2**30
    line = next(row for row in out.splitlines() if row.startswith("− LoRA adapters"))
    assert line.startswith("− LoRA adapters (8 × rank 64)")
    assert line.split()[-2] == f"{expected:,.2f}"
    assert "SGLang adapts the modules its adapters name" in out
    _, out, _ = run(capsys, *FIT, *flags, "--explain")
    assert "− weights − LoRA adapters − non-torch" in out
    config = llama_config()
    h, inter, layers = config["hidden_size"], config["intermediate_size"], \
        config["num_hidden_layers"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    d, slots, rank = h // heads, 8, 64
    per_layer = {  # A (slots, stacked × rank, input) + B (slots, output, rank), 2 bytes each
        "qkv_proj": 3 * rank * h + (heads + 2 * kv) * d * rank,
        "o_proj": rank * heads * d + h * rank,
        "gate_up_proj": 2 * rank * h + 2 * inter * rank,
        "down_proj": rank * inter + h * rank}
    for name, elements in per_layer.items():
        assert f"{name} {layers} × {slots * elements * 2 / 2**20:.2f} MiB" in out
    _, out, _ = run(capsys, *FIT, *flags, "--json")
    data = json.loads(out)
    assert data["taken_bytes_per_gpu"]["lora_adapters"] == pytest.approx(expected * 2**30)
    assert data["lora"]["max_loras"] == 8 and data["lora"]["max_lora_rank"] == 64
    assert data["lora"]["target_modules"] == ["down_proj", "gate_up_proj", "o_proj", "qkv_proj"]
    assert data["lora"]["target_modules_inferred"] is True


def test_lora_paths_alone_turn_lora_on_as_sglang_does(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    _, with_switch, _ = run(capsys, *FIT, "--enable-lora", "--max-lora-rank", "64",
                            "--lora-paths", "a=/a", "--json")
    code, paths_only, _ = run(capsys, *FIT, "--max-lora-rank", "64", "--lora-paths", "a=/a",
                              "--json")
    assert code == 0 and paths_only == with_switch


def test_lora_paths_without_max_lora_rank_exits_2_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *FIT, "--enable-lora", "--lora-paths", "a=/a")
    assert code == 2
    assert "give --max-lora-rank" in err and len(err.strip().splitlines()) == 1


def test_enable_lora_without_adapters_needs_rank_and_targets_in_sglangs_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *FIT, "--enable-lora", "--max-lora-rank", "64")
    assert code == 2
    assert "specify both --max-lora-rank and --lora-target-modules" in err
    code, _, _ = run(capsys, *FIT, "--enable-lora", "--max-lora-rank", "64",
                     "--lora-target-modules", "all")
    assert code == 0


def decode_lora_part(cost: StepCost) -> tuple[float, float]:
    """The step's LoRA part: bytes, time."""
    (op,) = [op for op in cost.ops if op.name == LORA_OP]
    return op.bytes, op.time_s


def test_decode_is_slower_by_exactly_the_lora_part_at_the_floor() -> None:
    batch = decode_batch(8, 8192)
    plain = step_cost(llama_8b(), batch, IDEAL)
    lora = step_cost(llama_8b().with_lora(EIGHT_RANK_64), batch, IDEAL)
    nbytes, time_s = decode_lora_part(lora)
    assert lora.time_s - plain.time_s == pytest.approx(time_s, rel=1e-9)
    # memory-bound at decode: its bytes at the H100's rated bandwidth
    assert time_s == pytest.approx(nbytes / resolve_accelerator("h100-sxm")
                                   .memory_bandwidth_bytes_per_s, rel=1e-9)
    # the engine's: the part at its shares, and a shrink and an expand a module (sgemm_lora_a,
    # then the B kernel) at its cost per weight matmul, as vLLM's
    profile = profile_for("sglang")
    engine = step_cost(llama_8b().with_lora(EIGHT_RANK_64), batch, profile)
    base = step_cost(llama_8b(), batch, profile)
    launches = lora_launches(llama_8b().with_lora(EIGHT_RANK_64))
    modules = sglang_lora_modules(llama_8b(), EIGHT_RANK_64)
    assert launches == 2 * sum(m.count for m in modules) > 0
    assert engine.time_s - base.time_s == pytest.approx(
        decode_lora_part(engine)[1] + launches * profile.matmul_overhead_s, rel=1e-9)


def test_the_step_reads_vllms_bytes_but_for_the_shrinks_bf16_buffer() -> None:
    """Same slots, rank and modules: SGLang's shrink writes a bf16 buffer its expand reads
    (2 passes × 2 bytes), vLLM's punica a float32 one zeroed, written and read (3 × 4)."""
    batch = decode_batch(8, 1024)
    sglang = SGLangLoRASettings(max_loras_per_batch=4, max_lora_rank=64,
                                lora_target_modules=("all",))
    vllm = LoRASettings(max_loras=4, max_lora_rank=64)
    got = decode_lora_part(step_cost(llama_8b(engine="vllm").with_lora(vllm), batch))[0] \
        - decode_lora_part(step_cost(llama_8b().with_lora(sglang), batch))[0]
    buffers = sum(m.count * m.slices * m.a_rank for m in sglang_lora_modules(llama_8b(), sglang)
                  if m.name != "embed_tokens")
    assert got == pytest.approx(8 * buffers * (3 * 4 - 2 * 2), rel=1e-12)


def test_decode_says_what_the_step_assumes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "decode", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine",
                       "sglang", "--context", "2048", "--batch", "16", "--max-lora-rank", "64",
                       "--lora-paths", "a=/a")
    assert code == 0
    assert "SGLang LoRA: the adapters' matmuls" in out and "min(batch, 8) a step" in out


@pytest.mark.parametrize("model, extra, said", [
    ("qwen3-30b-a3b", (), "Qwen3MoeForCausalLM is not modelled"),
    ("llama-3.1-8b", ("--engine-version", "0.4.9"), "modelled from 0.5.0"),
    ("llama-3.1-8b", ("--pp-size", "2"), "--pp-size or --dp-size is not modelled"),
    ("llama-3.1-8b", ("--num-gpus", "2", "--lora-target-modules", "all"),
     "above --tp-size 1 are not modelled"),
    ("llama-3.1-8b", ("--max-loras", "4"), "--max-loras: vLLM's"),
])
def test_sglang_lora_where_its_rule_is_not_known_exits_2(
        capsys: pytest.CaptureFixture[str], model: str, extra: tuple[str, ...],
        said: str) -> None:
    code, _, err = run(capsys, "fit", model, "--gpu", "h100-sxm", "--engine", "sglang",
                       "--max-model-len", "8192", "--max-lora-rank", "64", "--lora-paths",
                       "a=/a", *extra)
    assert code == 2
    assert said in err and len(err.strip().splitlines()) == 1


def test_sglangs_lora_flags_under_vllm_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--enable-lora",
                       "--max-loras-per-batch", "4")
    assert code == 2
    assert "--max-loras-per-batch: SGLang's; vllm has no such setting" in err


def test_sglangs_host_and_kernel_lora_flags_are_read_and_ignored(
        capsys: pytest.CaptureFixture[str]) -> None:
    flags = ("--max-lora-rank", "64", "--lora-paths", "a=/a")
    _, plain, _ = run(capsys, *FIT, *flags, "--json")
    code, out, err = run(capsys, *FIT, *flags, "--max-loaded-loras", "16", "--lora-backend",
                         "triton", "--lora-eviction-policy", "fifo", "--json")
    assert code == 0 and same_answer(out, plain)
    assert "--max-loaded-loras 16" in err and "ignored" in err


def test_simulate_serves_from_the_smaller_pool_with_the_adapters_in_each_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ("simulate", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "sglang",
            "--max-model-len", "8192", "--rate", "2", "--num-requests", "20", "--json")
    _, plain, _ = run(capsys, *base)
    code, out, _ = run(capsys, *base, "--max-lora-rank", "64", "--lora-paths", "a=/a")
    assert code == 0
    with_lora, without = json.loads(out), json.loads(plain)
    assert any(c.startswith("SGLang LoRA:") for c in with_lora["cautions"])
    # the pool simulate serves from is kv_pool's, less the adapters' buffers
    one = SGLangLoRASettings(max_lora_rank=64, lora_paths=1)
    for run_json, lora in ((with_lora, one), (without, None)):
        pool = kv_pool(llama_8b(), EngineSettings(max_model_len=8192, lora=lora))
        assert run_json["settings"]["num_blocks"] * run_json["settings"]["block_size"] \
            == pool.tokens
    assert with_lora["settings"]["num_blocks"] < without["settings"]["num_blocks"]
    assert with_lora["tpot_s"]["mean"] > without["tpot_s"]["mean"]


def test_lora_is_refused_where_engines_are_compared_and_each_engines_record_in_its_own(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine",
                       "vllm,sglang", "--max-model-len", "8192", "--max-lora-rank", "64",
                       "--lora-paths", "a=/a")
    # --max-lora-rank is one engine's knob too (cli_fit.ENGINE_KNOBS), named first
    assert code == 2 and "--max-lora-rank, --lora-paths name one engine's settings" in err
    vllms = LoRASettings(max_loras=4, max_lora_rank=64)
    assert "read as vLLM's" in engine_lora_problem(llama_8b(), vllms, None)
    assert "are SGLang's" in engine_lora_problem(llama_8b(engine="vllm"), EIGHT_RANK_64, None)
