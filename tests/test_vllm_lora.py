"""vLLM's --enable-lora: the adapters' stacked A and B buffers on every GPU, a line of fit's
breakdown that the KV pool loses, and the refusals where the rule is not known
(vllm_lora.py; engines.json vllm.lora)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.datafiles import load_data
from ridgeline.memory import EngineSettings, kv_pool, stage_pools
from ridgeline.vllm_lora import LoRASettings, lora_bytes, lora_modules

LLAMA_8B = ["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def llama_8b(tp: int = 1, pp: int = 1) -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100-sxm"),
                            num_gpus=tp * pp, pipeline_parallel_size=pp, engine="vllm")


def slots_bytes_from_config(config: dict[str, int], loras: int, rank: int, tp: int,
                            sharded: bool = False) -> int:
    """The tensors vLLM's create_lora_weights allocates, shape by shape, from config.json:
    (max_loras, 1, rank, in) and (max_loras, 1, out, rank) per slice, 2 bytes each."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    d = h // heads
    a_rank = rank // tp if sharded else rank  # column-parallel A, fully sharded
    row_out = h // tp if sharded else h  # row-parallel B, fully sharded
    shapes = [(loras, a_rank, h)] * 3  # qkv_proj: q, k, v slices, the whole input
    shapes += [(loras, heads // tp * d, rank), (loras, kv // tp * d, rank),
               (loras, kv // tp * d, rank)]
    shapes += [(loras, rank, heads * d // tp), (loras, row_out, rank)]  # o_proj
    shapes += [(loras, a_rank, h)] * 2 + [(loras, inter // tp, rank)] * 2  # gate_up_proj
    shapes += [(loras, rank, inter // tp), (loras, row_out, rank)]  # down_proj
    per_layer = sum(a * b * c for a, b, c in shapes)
    vocab = config["vocab_size"]
    tables = 2 * (loras * vocab * rank + loras * rank * h)  # embed_tokens and lm_head
    return 2 * (config["num_hidden_layers"] * per_layer + tables)


def llama_config() -> dict[str, int]:
    return dict(load_data("models/meta-llama--Llama-3.1-8B.json"))


def test_llama31_8b_four_rank64_slots_take_1_38_gib_of_one_h100() -> None:
    lora = LoRASettings(max_loras=4, max_lora_rank=64)
    got = lora_bytes(llama_8b(), lora)
    assert got == slots_bytes_from_config(llama_config(), 4, 64, 1)
    assert got / 2**30 == pytest.approx(1.376, abs=0.001)


def test_tp2_shards_the_column_outputs_and_row_inputs_not_the_tables() -> None:
    lora = LoRASettings(max_loras=4, max_lora_rank=64)
    assert lora_bytes(llama_8b(tp=2), lora) == slots_bytes_from_config(llama_config(), 4, 64, 2)
    sharded = replace(lora, fully_sharded_loras=True)
    assert lora_bytes(llama_8b(tp=2), sharded) \
        == slots_bytes_from_config(llama_config(), 4, 64, 2, sharded=True)
    assert lora_bytes(llama_8b(tp=2), sharded) < lora_bytes(llama_8b(tp=2), lora)
    tables = {m.name: m.bytes_each for m in lora_modules(llama_8b(tp=2), lora)}
    assert tables["lm_head"] == {m.name: m.bytes_each
                                 for m in lora_modules(llama_8b(), lora)}["lm_head"]


def test_vllm_defaults_are_one_slot_at_rank_16() -> None:
    default = LoRASettings()
    assert (default.slots, default.rank) == (1, 16)
    assert lora_bytes(llama_8b(), default) * 4 == lora_bytes(llama_8b(), LoRASettings(1, 64))


def test_the_pool_shrinks_by_exactly_the_lora_line() -> None:
    dep = llama_8b()
    plain = EngineSettings(max_model_len=8192)
    lora = LoRASettings(max_loras=4, max_lora_rank=64)
    without, with_lora = kv_pool(dep, plain), kv_pool(dep, replace(plain, lora=lora))
    assert with_lora.lora_bytes == lora_bytes(dep, lora)
    assert without.pool_bytes - with_lora.pool_bytes == pytest.approx(with_lora.lora_bytes)
    assert with_lora.blocks < without.blocks


def test_pipeline_stages_hold_their_own_layers_the_embedding_first_the_lm_head_last() -> None:
    dep, lora = llama_8b(pp=2), LoRASettings(max_loras=2, max_lora_rank=32)
    pools = stage_pools(dep, EngineSettings(max_model_len=8192, lora=lora))
    first, last = (dict((m.name, m.count) for m in lora_modules(dep, lora, p.stage))
                   for p in pools)
    assert "embed_tokens" in first and "lm_head" not in first
    assert "lm_head" in last and "embed_tokens" not in last
    assert sum(p.lora_bytes for p in pools) == pytest.approx(lora_bytes(dep, lora))


def test_fit_prints_the_lora_line_and_json_carries_it(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    flags = ("--enable-lora", "--max-loras", "4", "--max-lora-rank", "64")
    code, out, _ = run(capsys, *LLAMA_8B, *flags)
    assert code == 0
    expected = lora_bytes(llama_8b(), LoRASettings(4, 64)) / 2**30
    line = next(row for row in out.splitlines() if row.startswith("− LoRA adapters"))
    assert line.split()[-2] == f"{expected:,.2f}"
    code, out, _ = run(capsys, *LLAMA_8B, *flags, "--json")
    data = json.loads(out)
    assert data["taken_bytes_per_gpu"]["lora_adapters"] == pytest.approx(expected * 2**30)
    assert data["lora"]["max_lora_rank"] == 64
    code, out, _ = run(capsys, *LLAMA_8B, *flags, "--explain")
    assert "− LoRA adapters − activations" in out


def test_a_rank_vllm_does_not_take_exits_2_with_vllms_list(capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    code, _, err = run(capsys, *LLAMA_8B, "--enable-lora", "--max-lora-rank", "24")
    assert code == 2
    assert "1, 8, 16, 32, 64, 128, 256, 320, 512" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("extra, said", [
    (("--engine", "trtllm"), "not modelled for trtllm"),
    (("--engine-version", "0.11"), "from vLLM v0.12.0"),
])
def test_lora_where_its_rule_is_not_known_exits_2(capsys: pytest.CaptureFixture[str],
                                                 extra: tuple[str, ...], said: str) -> None:
    code, _, err = run(capsys, *LLAMA_8B, "--enable-lora", *extra)
    assert code == 2
    assert said in err


def test_an_engine_comparison_refuses_lora_rather_than_dropping_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """fit --engine vllm,sglang compares the engines at their defaults: --enable-lora (vLLM's
    alone, refused for SGLang) is one engine's setting, named in one line, not priced away."""
    code, out, err = run(capsys, *LLAMA_8B, "--engine", "vllm,sglang", "--enable-lora",
                         "--max-loras", "4")
    assert code == 2 and not out
    assert "--enable-lora, --max-loras name one engine's settings" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [
    ("decode", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "8", "--context", "4096"),
    ("prefill", "llama-3.1-8b", "--gpu", "h100-sxm", "--prompt-len", "4096")])
def test_llama_cpp_decode_and_prefill_refuse_lora_as_fit_does(
        capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    """decode and prefill give llama.cpp a slot per sequence, no pool sized with the adapters:
    --enable-lora is refused in one line, as fit refuses it, not printed as the pool's."""
    code, _, fit_err = run(capsys, *LLAMA_8B, "--engine", "llama.cpp", "--enable-lora")
    assert code == 2 and "not modelled for llama.cpp" in fit_err
    code, out, err = run(capsys, *command, "--engine", "llama.cpp", "--enable-lora")
    assert code == 2 and not out
    assert err.strip() == fit_err.strip()


def test_a_moe_class_whose_experts_are_not_sized_exits_2(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    code, _, err = run(capsys, "fit", "gpt-oss-20b", "--gpu", "h100-sxm", "--num-gpus", "2",
                       "--max-model-len", "8192", "--enable-lora")
    assert code == 2
    assert "--enable-lora with GptOssForCausalLM is not modelled" in err


def test_decode_sizes_the_same_pool_and_says_what_the_step_assumes(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    base = ("decode", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192")
    _, plain, _ = run(capsys, *base)
    code, out, _ = run(capsys, *base, "--enable-lora", "--max-loras", "8", "--max-lora-rank",
                       "128")
    assert code == 0
    assert "shrink and expand, rank 128)" in out
    seqs = [int(line.split("runs at most ")[1].split()[0].replace(",", ""))
            for line in (plain, out) for line in line.splitlines() if "runs at most" in line]
    assert seqs[1] < seqs[0]


def test_max_cpu_loras_and_lora_modules_are_read_and_ignored(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *LLAMA_8B, "--enable-lora", "--max-cpu-loras", "8",
                       "--lora-modules", "sql=/adapters/sql")
    assert code == 0
    assert "--max-cpu-loras 8" in err and "ignored" in err


def test_a_vllm_config_files_lora_keys_are_read_as_the_flags(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """vllm serve --config x.yaml with enable-lora, max-loras and max-lora-rank: the same pool
    as the flags give."""
    path = tmp_path / "lora.yaml"
    path.write_text("enable-lora: true\nmax-loras: 4\nmax-lora-rank: 64\n")
    _, from_file, _ = run(capsys, *LLAMA_8B, "--config", str(path), "--json")
    _, from_flags, _ = run(capsys, *LLAMA_8B, "--enable-lora", "--max-loras", "4",
                           "--max-lora-rank", "64", "--json")
    assert json.loads(from_file)["lora"]["bytes_per_gpu"] > 0
    assert from_file == from_flags


def test_simulate_serves_from_the_smaller_pool_with_the_adapters_in_each_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ("simulate", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
            "--rate", "2", "--num-requests", "20", "--json")
    _, plain, _ = run(capsys, *base)
    code, out, _ = run(capsys, *base, "--enable-lora", "--max-loras", "4", "--max-lora-rank",
                       "64")
    assert code == 0
    with_lora, without = json.loads(out), json.loads(plain)
    assert any("shrink and expand, rank 64)" in c for c in with_lora["cautions"])
    # the pool simulate serves from is kv_pool's, less the adapters' slots
    for run_json, lora in ((with_lora, LoRASettings(max_loras=4, max_lora_rank=64)),
                           (without, None)):
        pool = kv_pool(llama_8b(), EngineSettings(max_model_len=8192, lora=lora))
        assert run_json["settings"]["num_blocks"] * run_json["settings"]["block_size"] \
            == pool.tokens
    assert with_lora["settings"]["num_blocks"] < without["settings"]["num_blocks"]
    # the adapters' matmuls are in every step: prompts and tokens come out later
    assert with_lora["tpot_s"]["mean"] > without["tpot_s"]["mean"]
    assert with_lora["ttft_s"]["mean"] > without["ttft_s"]["mean"]


def test_lora_is_sized_from_the_release_without_the_extra_vocab_and_refused_before(
        capsys: pytest.CaptureFixture[str]) -> None:
    """engines.json vllm.lora: v0.12.0 is the first release without lora_extra_vocab_size
    (PRs #28382, #28545); v0.11.2, the newest release read that still has it, is refused."""
    data = load_data("engines.json")["vllm"]["lora"]
    since, before = data["from"], data["last_without"]
    code, out, err = run(capsys, *LLAMA_8B, "--enable-lora", "--engine-version", since, "--json")
    assert code == 0, err
    assert json.loads(out)["taken_bytes_per_gpu"]["lora_adapters"] > 0
    code, out, err = run(capsys, *LLAMA_8B, "--enable-lora", "--engine-version", before)
    assert code == 2 and out == ""
    assert f"from vLLM v{since}" in err and len(err.strip().splitlines()) == 1
