"""KV-cache bytes by layer kind."""

from __future__ import annotations

import json
import re

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.errors import InputError
from ridgeline.hardware import device_memory_bytes, resolve_accelerator
from ridgeline.kvcache import conversations_that_fit, kv_footprint, kv_replication
from ridgeline.units import GIB, KIB
from tests.conftest import run_cli


def test_llama_3_1_70b_caches_320_kib_per_token_in_bf16() -> None:
    assert kv_footprint(resolve_model("llama-3.1-70b"), 1, 2).bytes_per_token_growing == 320 * KIB


def test_gpt_oss_120b_grows_36_kib_per_token_not_72() -> None:
    kv = kv_footprint(resolve_model("gpt-oss-120b"), 4096, 2)
    assert kv.bytes_per_token_growing == 36 * KIB
    assert kv.bytes_per_token_naive == 72 * KIB
    assert kv.windowed_bytes == 18 * 128 * 2 * KIB  # 18 sliding layers stop at 128 tokens


def test_llama_3_1_70b_at_128k_needs_40_gib_per_conversation() -> None:
    kv = kv_footprint(resolve_model("llama-3.1-70b"), 131072, 2)
    assert kv.bytes_per_sequence / GIB == pytest.approx(40)


def test_deepseek_v3_mla_caches_one_576_wide_latent_per_layer() -> None:
    kv = kv_footprint(resolve_model("deepseek-v3"), 1, 2)
    assert kv.bytes_per_token_growing == 61 * (512 + 64) * 2


def test_linear_attention_and_ssm_state_is_constant_in_context() -> None:
    for model in ("qwen3-next-80b-a3b", "jamba-1.5-mini", "nemotron-h-56b"):
        spec = resolve_model(model)
        short, long = kv_footprint(spec, 1000, 2), kv_footprint(spec, 100_000, 2)
        assert short.state_bytes == long.state_bytes > 0
        growth = long.bytes_per_sequence - short.bytes_per_sequence
        assert growth == pytest.approx(99_000 * short.bytes_per_token_growing)


def test_sliding_window_stops_growing_at_the_window() -> None:
    spec = resolve_model("mistral-7b")
    assert kv_footprint(spec, 4096, 2).bytes_per_sequence == kv_footprint(spec, 32768, 2).bytes_per_sequence


def test_a_fraction_of_a_token_is_refused_as_decode_floor_refuses_it() -> None:
    """A cache holds whole tokens: 2000.5 is refused in one line; 2000.0 is 2000."""
    spec = resolve_model("llama-3.1-70b")
    with pytest.raises(InputError, match=re.escape("context length must be a whole number "
                                                   "of tokens, got 2000.5")):
        kv_footprint(spec, 2000.5, 2)  # type: ignore[arg-type]
    whole = kv_footprint(spec, 2000.0, 2)  # type: ignore[arg-type]
    assert whole == kv_footprint(spec, 2000, 2) and type(whole.context) is int


def test_kv_heads_replicate_when_tp_exceeds_them() -> None:
    falcon = resolve_model("falcon-7b")  # one KV head
    assert kv_replication(falcon, 4) == 4
    llama = resolve_model("llama-3.1-70b")  # eight KV heads
    assert kv_replication(llama, 8) == 1
    assert kv_replication(llama, 16) == 2
    assert kv_replication(resolve_model("deepseek-v3"), 8) == 8  # the MLA latent is not split


def test_conversations_that_fit_are_whole_and_never_negative() -> None:
    assert conversations_that_fit(10.5, 2) == 5
    assert conversations_that_fit(-1, 2) == 0


def test_kv_cautions_a_context_past_the_trained_one(capsys: pytest.CaptureFixture[str]) -> None:
    from ridgeline.cli import main

    assert main(["kv", "llama-2-7b", "--context", "8000", "--json"]) == 0
    assert "4,096-token context" in json.loads(capsys.readouterr().out)["cautions"][0]
    assert main(["kv", "llama-2-7b", "--context", "4000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cautions"] == []


def test_kv_says_does_not_fit_where_the_weights_fit_but_no_conversation_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B on 2 H100s at 128K: the weights fit (141.1 of the 170.0 GB the runtime
    reports, 2 × 79.18 GiB) and one conversation needs 42.9 GB of the 28.9 left, as decode's
    DOES NOT FIT says."""
    from ridgeline.cli import main

    argv = ["kv", "llama-3.1-70b", "--context", "131072", "--gpu", "h100", "--num-gpus", "2"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith(  # line 1, as the other commands' verdicts
        "DOES NOT FIT: one 131,072-token conversation needs 42.9 GB")
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is False and data["conversations"] == 0
    assert data["shortfall_bytes"] == pytest.approx(
        data["bytes_per_sequence"] - data["budget_bytes"])
    runtime = 2 * device_memory_bytes(resolve_accelerator("h100"))  # fit's memory per GPU
    assert data["budget_bytes"] == pytest.approx(runtime - 141.1e9, abs=0.05e9)
    assert data["shortfall_bytes"] / 1e9 == pytest.approx(42.95 - (runtime - 141.1e9) / 1e9,
                                                          abs=0.1)
    assert data["shortfall_bytes"] / 1e9 == pytest.approx(14.0, abs=0.05)
    assert main(["kv", "llama-3.1-70b", "--context", "8192", "--gpu", "h100", "--num-gpus",
                 "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["shortfall_bytes"] == 0.0


def test_below_its_window_every_layer_of_gemma_3_grows() -> None:
    """At 512 tokens Gemma-3-27B's 1,024-token windows are still filling: the next token
    adds 62 layers' K and V (496 KiB), not the 10 full layers' 80 KiB of a long context."""
    from ridgeline.precision import kv_dtype
    from ridgeline.reports.kv import kv_report

    model = resolve_model("gemma-3-27b")
    short, long = (kv_report(model, c, kv_dtype("bf16")) for c in (512, 8192))
    assert short.bytes_per_token_now == short.footprint.bytes_per_token_naive == 496 * 1024
    assert long.bytes_per_token_now == long.footprint.bytes_per_token_growing == 80 * 1024
    assert "496 KiB a token at 512" in "\n".join(short.text_lines())


def test_nemotron_h_state_is_conv_at_bf16_plus_ssm_at_the_dtype_given() -> None:
    """Nemotron-H-56B, a Mamba-2 layer: conv (kernel 4 − 1)·(16,384 + 2·8·256) = 61,440
    elements, SSM 256 heads·64·256 = 4,194,304. At the checkpoint's bf16: 8,511,488 B; with
    the SSM state in fp32, as vLLM keeps it from v0.20: 61,440·2 + 4,194,304·4 = 16,900,096 B."""
    from dataclasses import replace

    from ridgeline.kvcache import state_bytes_per_sequence, state_elements

    spec = resolve_model("nemotron-h-56b")
    mamba = next(layer for layer in spec.layers if layer.mixer == "mamba")
    assert state_elements(spec, mamba) == (3 * (16_384 + 2 * 8 * 256), 256 * 64 * 256)
    assert state_bytes_per_sequence(spec, mamba) == (61_440 + 4_194_304) * 2
    fp32 = replace(spec, state_dtype="fp32")
    assert state_bytes_per_sequence(fp32, mamba) == 61_440 * 2 + 4_194_304 * 4
    assert kv_footprint(fp32, 1, 2).state_bytes == 54 * (61_440 * 2 + 4_194_304 * 4)
    # llama.cpp's f32 for both, as fit and decode size it on a llama.cpp engine
    assert kv_footprint(spec, 1, 2, 4.0).state_bytes == 54 * (61_440 + 4_194_304) * 4


def test_a_vllm_decode_step_reads_nemotron_h_state_at_fp32() -> None:
    """The step cost reads and writes the SSM state at the dtype vLLM keeps it in, as fit
    and kv size it: Nemotron-H-56B's 61,440 conv elements at bf16 and 4,194,304 SSM
    elements at fp32 a Mamba layer, per sequence; llama.cpp keeps both at f32."""
    from ridgeline import Deployment, resolve_accelerator
    from ridgeline.cost import Seq, batch_shape, state_work

    spec = resolve_model("nemotron-h-56b")
    mamba = next(layer for layer in spec.layers if layer.mixer == "mamba")
    vllm = Deployment.build(spec, resolve_accelerator("h200"))
    _, nbytes = state_work(vllm, mamba, batch_shape(vllm, [Seq(1, 1000)] * 4))
    assert nbytes == 2 * 4 * (61_440 * 2 + 4_194_304 * 4)
    cpp = Deployment.build(spec, resolve_accelerator("h200"), "q8_0", engine="llama.cpp")
    _, nbytes = state_work(cpp, mamba, batch_shape(cpp, [Seq(1, 1000)] * 4))
    assert nbytes == 2 * 4 * (61_440 + 4_194_304) * 4


def test_kv_budget_names_the_weights_tensor_parallel_ranks_copy(
        capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 at TP8: model and moe say 673.2 GB of weights; kv's budget takes 681.1,
    because each of the 8 ranks keeps its routers and MLA down-projections whole. The budget
    line now says so, and its two parts add up to the figure it subtracts."""
    import re

    from ridgeline.cli import main

    assert main(["kv", "deepseek-v3", "--context", "8192", "--gpu", "h200", "--num-gpus",
                 "8"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("budget:"))
    total, stored, copies = (float(x.replace(",", "")) for x in re.findall(
        r"([\d,.]+) GB of weights \(as stored: ([\d,.]+) GB, and ([\d.]+) GB more", line)[0])
    assert stored == pytest.approx(673.2) and total == pytest.approx(stored + copies, abs=0.15)
    assert main(["kv", "llama-3.1-70b", "--context", "8192", "--gpu", "h100", "--num-gpus",
                 "2"]) == 0
    assert "GB more" not in capsys.readouterr().out  # no weight kept whole on both ranks


def test_kv_names_the_copies_of_the_cache_kind_it_has(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The per-GPU line and --explain said 'KV heads (an MLA latent: all of it) copied where
    tensor parallelism outnumbers them' for every model: a GQA model's copies are its KV
    heads', an MLA model's the whole latent on every rank, whatever the rank count."""
    from ridgeline.cli import main

    assert main(["kv", "llama-3.1-70b", "--context", "8192", "--gpu", "h100", "--num-gpus",
                 "16", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "×2: KV heads copied where tensor parallelism outnumbers them" in out
    assert "MLA" not in out
    assert main(["kv", "deepseek-v3", "--context", "8192", "--gpu", "h200", "--num-gpus",
                 "8", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "×8: the MLA latent is not split by head: every tensor-parallel rank keeps all" in out
    assert "TP copies = 8  [the MLA latent is not split by head" in out
    assert "KV heads copied" not in out


def test_a_budget_given_for_the_cache_alone_is_not_called_the_room_beside_the_weights(
        capsys: pytest.CaptureFixture[str]) -> None:
    """kv --memory-gib 1 at 128K: one conversation's 17.2 GB against the 1 GiB given, which
    the verdict called "the memory beside the weights" though no weights were counted; on a
    card it still is."""
    from ridgeline.cli import main

    assert main(["kv", "llama-3.1-8b", "--context", "131072", "--memory-gib", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("DOES NOT FIT: one 131,072-token conversation needs 17.2 GB, "
                            f"the budget given holds {GIB / 1e9:,.1f} GB")
    assert "weights" not in first
    assert main(["kv", "llama-3.1-70b", "--context", "131072", "--gpu", "h100",
                 "--num-gpus", "2"]) == 0
    assert "the memory beside the weights holds" in capsys.readouterr().out.splitlines()[0]


def test_kv_leads_with_the_refusal_for_a_context_past_the_model(
        capsys: pytest.CaptureFixture[str]) -> None:
    """200,000 tokens on llama-3.1-8b (131,072 positions) printed '2 fit' with the caution
    last; engines refuse that max_model_len, so line 1 says so and the count is arithmetic."""
    base = ["kv", "llama-3.1-8b", "--gpu", "h100", "--context"]
    code, out, _ = run_cli(capsys, *base, "200k")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("DOES NOT FIT: 200,000 tokens exceed")
    assert "131,072" in lines[0] and "arithmetic only" in lines[0]
    assert not any(line.startswith("caution: 200,000") for line in lines)  # said once
    assert any("arithmetic only" in line for line in lines if line.startswith("conversations"))
    assert not any(" that fit:" in line for line in lines)
    code, out, _ = run_cli(capsys, *base, "200k", "--json")
    data = json.loads(out)
    assert data["conversations"] > 0 and data["fits"] is False and data["context_refused"]
    # within the model's context the count is a fit, as before
    code, out, _ = run_cli(capsys, *base, "100k", "--json")
    data = json.loads(out)
    assert data["fits"] is True and data["context_refused"] is False


def test_kv_says_the_memory_shortfall_after_the_context_refusal(
        capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(capsys, "kv", "llama-3.1-70b", "--gpu", "h100", "--context", "200k")
    first, second = out.splitlines()[:2]
    assert first.startswith("DOES NOT FIT: 200,000 tokens exceed")
    assert second.startswith("nor does the memory hold one: the weights alone exceed")
