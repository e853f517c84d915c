"""Data-parallel attention (vLLM --data-parallel-size, SGLang --dp-size --enable-dp-attention):
each rank its own requests, KV pool and copy of the attention weights; a MoE's experts spread
over every rank's GPUs. DeepSeek-V3 as stored (fp8) on 8 x H200, TP8 against DP8 + EP8."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import engine_seat_limit, held_conversations, max_batch
from ridgeline.cost import DP_EXCHANGE, decode_batch, step_cost
from ridgeline.data_parallel import table_copies_bytes
from ridgeline.expert_ranks import busiest_rank_experts
from ridgeline.floors import decode_floor
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.moe import expected_experts_touched
from ridgeline.parallel import exchange_time_s
from ridgeline.quantization import (
    ATTENTION,
    EMBEDDING,
    EXPERTS,
    LM_HEAD,
    MLP,
    OTHER,
    ROUTER,
    SHARED_EXPERTS,
)
from ridgeline.units import GIB
from tests.conftest import run_cli

CONTEXT = 32000
SETTINGS = EngineSettings(max_model_len=CONTEXT)


def deepseek(tp: int, dp: int = 1, engine: str = "vllm", ep: bool = False) -> Deployment:
    return Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"), None,
                            None, tp, 1, engine, ep, data_parallel_size=dp)


def test_deepseek_v3_dp8_holds_eight_pools_of_the_same_latent_per_gpu() -> None:
    """TP8 keeps every request's MLA latent on each GPU (one head, not split): 803,584 tokens
    in the deployment (vLLM 0.34). DP8 + EP8 keeps a rank's own requests on its GPU: the same
    68.62 KiB a token a GPU, but eight pools. Each GPU's pool is smaller (the replicated
    attention weights take room), so the tokens grow 8 × the pool ratio, about 5.81×, not the
    bare 8×."""
    tp8, dp8 = deepseek(8), deepseek(1, 8, ep=True)
    p_tp, p_dp = kv_pool(tp8, SETTINGS), kv_pool(dp8, SETTINGS)
    assert p_dp.kv_bytes_per_token == pytest.approx(p_tp.kv_bytes_per_token)
    assert p_dp.kv_bytes_per_token / 1024 == pytest.approx(68.62, abs=0.01)
    ratio = 8 * p_dp.tokens / p_tp.tokens
    assert ratio == pytest.approx(8 * p_dp.pool_bytes / p_tp.pool_bytes, rel=2e-3)
    assert ratio == pytest.approx(5.81, abs=0.02)
    per_rank = held_conversations(p_dp, replace(dp8, data_parallel_size=1), CONTEXT)
    assert held_conversations(p_dp, dp8, CONTEXT) == 8 * per_rank
    assert held_conversations(p_dp, dp8, CONTEXT) > 5 * held_conversations(p_tp, tp8, CONTEXT)


def test_deepseek_v3_dp8_weights_per_gpu_are_all_but_the_experts_and_an_eighth_of_them() -> None:
    """vLLM DP8 × TP1: each GPU keeps the whole model but the routed experts (attention, 11.4
    GB of it; dense and shared MLPs, router, embedding, LM head) and 32 of the 256 experts:
    93.9 GiB against TP8's 79.3 GiB."""
    dp8, tp8 = deepseek(1, 8, ep=True), deepseek(8)
    rank = kv_pool(dp8, SETTINGS).weight_bytes
    assert rank == pytest.approx(dp8.weight_bytes - dp8.expert_bytes + dp8.expert_bytes / 8)
    assert rank / GIB == pytest.approx(93.92, abs=0.01)
    assert dp8.bytes_by_category[ATTENTION] / 1e9 == pytest.approx(11.4, abs=0.05)  # docs/fit.md
    assert kv_pool(tp8, SETTINGS).weight_bytes / GIB == pytest.approx(79.29, abs=0.01)


def test_sglang_dp_attention_splits_the_dense_layers_over_every_gpu() -> None:
    """SGLang --tp 8 --dp 8 --enable-dp-attention: attention, router and norms whole on each
    GPU, the embedding whole too (enable_tp off), the dense and shared MLPs, LM head and
    experts over all 8."""
    d = deepseek(1, 8, engine="sglang")
    by = d.bytes_by_category
    whole = by[ATTENTION] + by[ROUTER] + by[OTHER] + by[EMBEDDING]
    spread = by[MLP] + by[SHARED_EXPERTS] + by[LM_HEAD] + by[EXPERTS]
    assert kv_pool(d, SETTINGS).weight_bytes == pytest.approx(whole + spread / 8)


def test_table_copies_are_seven_more_embeddings_and_lm_heads() -> None:
    """DeepSeek-V3 on vLLM DP8: 7 × 2 × 129,280 × 7,168 × 2 B = 26 GB, 3.2 GB a GPU."""
    d = deepseek(1, 8)
    assert table_copies_bytes(d) == pytest.approx(7 * 2 * 129280 * 7168 * 2)
    assert table_copies_bytes(d) / 8 / 1e9 == pytest.approx(3.24, abs=0.01)


def test_a_dp8_step_is_one_ranks_share_with_the_experts_of_every_rank() -> None:
    """Batch 512 over 8 ranks: the attention is a TP1 deployment's at batch 64; the experts
    are read as the whole batch's 512 tokens touch them, the busiest GPU's 32; the exchange
    is one all-reduce-sized collective of 512 tokens a MoE layer."""
    dp8, one = deepseek(1, 8, ep=True), deepseek(1)
    cost = step_cost(dp8, decode_batch(512, 4000))
    ops = {op.name: op for op in cost.ops}
    alone = {op.name: op for op in step_cost(one, decode_batch(64, 4000)).ops}
    assert cost.sequences == 64
    assert ops["attention"].bytes == pytest.approx(alone["attention"].bytes)
    assert ops["attention projections"].bytes == pytest.approx(alone["attention projections"].bytes)
    moe = dp8.model.moe
    assert moe is not None
    touched = expected_experts_touched(moe.num_experts, moe.experts_per_token, 512)
    busiest = busiest_rank_experts(moe.num_experts, 8, touched)
    assert ops["experts"].bytes == pytest.approx(dp8.bytes_by_category[EXPERTS]
                                                 * busiest / moe.num_experts)
    moe_layers = sum(1 for layer in dp8.model.layers if layer.ffn == "moe")
    exchange = exchange_time_s(512 * 7168 * 2, 8, dp8.accelerator)
    assert ops[DP_EXCHANGE].time_s == pytest.approx(moe_layers * exchange)
    assert exchange * 1e6 == pytest.approx(37, abs=1)


def test_dp8_decode_floor_reads_a_ranks_cache_and_counts_the_whole_batch() -> None:
    """The floor's KV read is one rank's 64 sequences; its aggregate the whole 512."""
    dp8, tp1 = deepseek(1, 8, ep=True), deepseek(1)
    f = decode_floor(dp8, 512, 4000)
    assert f.kv_bytes_read == pytest.approx(decode_floor(tp1, 64, 4000).kv_bytes_read)
    assert f.aggregate_tok_s == pytest.approx(512 / f.step_time_s)


def test_seats_are_each_ranks() -> None:
    """vLLM's max_num_seqs is a rank's: 8 ranks run 8 × it; SGLang's --max-running-requests
    is the server's, each rank taking its // dp_size."""
    dp8 = deepseek(1, 8, ep=True)
    pool = kv_pool(dp8, EngineSettings(max_model_len=4000, max_num_seqs=16))
    assert pool.max_num_seqs == 16
    assert engine_seat_limit(pool, dp8) == 128
    assert max_batch(dp8, 4000, EngineSettings(max_model_len=4000, max_num_seqs=16)) == 128
    sg = deepseek(1, 8, engine="sglang")
    assert kv_pool(sg, EngineSettings(max_model_len=4000, max_num_seqs=64)).max_num_seqs == 8


def test_a_dense_model_on_vllm_dp_is_replicas() -> None:
    """Llama-3.1-70B, DP2 × TP4 on 8 H100s: each rank a TP4 replica, twice its
    conversations, the same step for half the batch."""
    model, acc = resolve_model("llama-3.1-70b"), resolve_accelerator("h100")
    tp4 = Deployment.build(model, acc, None, None, 4, 1, "vllm")
    dp2 = Deployment.build(model, acc, None, None, 4, 1, "vllm", data_parallel_size=2)
    s = EngineSettings(max_model_len=8000)
    assert held_conversations(kv_pool(dp2, s), dp2, 8000) \
        == 2 * held_conversations(kv_pool(tp4, s), tp4, 8000)
    assert step_cost(dp2, decode_batch(32, 2000)).time_s \
        == pytest.approx(step_cost(tp4, decode_batch(16, 2000)).time_s)


def test_fit_cli_reports_every_ranks_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "h200",
                           "--data-parallel-size", "8", "--enable-expert-parallel",
                           "--max-model-len", "32k", "--json")
    assert code == 0
    report = json.loads(out)
    dp = report["data_parallel"]
    assert dp["data_parallel_size"] == 8 and dp["expert_ranks"] == 8 and dp["gpus_per_rank"] == 1
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           data_parallel_size=8, expert_parallel=True)
    pool = kv_pool(dep, EngineSettings(max_model_len=32_000))  # one rank's, built apart
    assert dp["tokens_all_ranks"] == 8 * pool.tokens
    assert report["conversations"] == held_conversations(pool, dep, 32_000)  # every rank's
    code, text, _ = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "h200", "-dp", "8",
                            "--ep", "--max-model-len", "32k")
    assert code == 0
    assert "attention DP8 × TP1, experts EP8" in text
    assert f"{dp['tokens_all_ranks']:,} tokens in all" in text


def test_decode_and_kv_take_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "decode", "deepseek-v3", "--gpu", "h200", "-dp", "8",
                           "--enable-expert-parallel", "--batch", "512", "--context", "4000",
                           "--json")
    assert code == 0
    point = json.loads(out)["points"][0]
    assert point["aggregate_tok_s"] == pytest.approx(512 / point["step_time_s"])
    code, dp_kv, _ = run_cli(capsys, "kv", "deepseek-v3", "--context", "32k", "--gpu", "h200",
                             "--data-parallel-size", "8", "--json")
    code_tp, tp_kv, _ = run_cli(capsys, "kv", "deepseek-v3", "--context", "32k", "--gpu",
                                "h200", "--num-gpus", "8", "--json")
    assert code == code_tp == 0
    assert json.loads(dp_kv)["tp_replication"] == 1
    assert json.loads(tp_kv)["tp_replication"] == 8


@pytest.mark.parametrize("argv, words", [
    (["fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--engine", "sglang",
      "--dp-size", "3", "--enable-dp-attention", "--max-model-len", "8k"], "do not divide"),
    (["fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "8", "--engine", "sglang",
      "--dp-size", "4", "--enable-dp-attention", "--max-model-len", "8k"], "is dense"),
    (["fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--engine", "sglang",
      "--dp-size", "8", "--max-model-len", "8k"], "8 whole replicas"),
    (["decode", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--engine", "sglang",
      "--data-parallel-size", "8", "--batch", "64"], "8 whole replicas"),
    (["fit", "deepseek-v3", "--gpu", "h200", "--dp", "8", "--max-model-len", "8k"],
     "--dp is SGLang's flag"),
    (["decode", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--dp-size", "8",
      "--batch", "64"], "--dp-size is SGLang's flag"),
    (["kv", "deepseek-v3", "--gpu", "h200", "--dp-size", "8", "--context", "32k"],
     "--dp-size is SGLang's flag"),
    (["fit", "deepseek-v3", "--gpu", "h200", "--dp", "8", "--enable-dp-attention",
      "--max-model-len", "8k"], "SGLang's switch"),
    (["fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--enable-dp-attention",
      "--max-model-len", "8k"], "give --dp-size"),
    (["fit", "deepseek-v3", "--gpu", "h200", "--dp", "2", "--num-gpus", "4", "--engine",
      "trtllm", "--max-model-len", "8k"],
     "attention data parallelism (enable_attention_dp) is not modelled"),
    (["fit", "deepseek-v3", "--gpu", "h200", "-dp", "2", "--num-gpus", "4", "-pp", "2",
      "--max-model-len", "8k"], "pipeline stages"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "-dp", "2", "--enable-expert-parallel",
      "--max-model-len", "8k"], "is dense"),
    (["fit", "llama-3.1-8b", "--gpu", "h100", "--dp", "2", "--engine", "llama.cpp-cuda",
      "--max-model-len", "8k"], "no data parallelism"),
    (["kv", "deepseek-v3", "--context", "8k", "--dp", "8"], "give --gpu"),
    (["simulate", "deepseek-v3", "--gpu", "h200", "--dp", "8", "--rate", "1"],
     "--dp is SGLang's flag"),
    (["plan", "deepseek-v3", "--rate", "1", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50",
      "--data-parallel-size", "8"], "searches a MoE's data-parallel attention layouts"),
])
def test_bad_data_parallel_input_is_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and err.startswith("ridgeline: error:")
    assert words in err


def test_a_data_parallel_shortfall_is_one_ranks_share_of_the_target() -> None:
    """Each rank holds its own conversations, so a target one past what DP8 holds (144 of
    DeepSeek-V3's 32K conversations on 8 H200s, 18 a rank) puts one rank a conversation
    short, not the whole target's worth on every GPU (the review's 398.8 GiB)."""
    from ridgeline.reports.fit import fit_report

    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           data_parallel_size=8, expert_parallel=True)
    held = fit_report(dep, 32_000, EngineSettings())
    assert held.conversations == 144
    enough = fit_report(dep, 32_000, EngineSettings(), target=144)
    over = fit_report(dep, 32_000, EngineSettings(), target=145)
    assert enough.shortfall_bytes == 0 and over.rank_target == 19
    assert 0 < over.shortfall_bytes <= 2 * over.per_conversation_bytes


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_sglangs_dp_attention_switch_is_refused_elsewhere_even_with_one_rank(
        capsys: pytest.CaptureFixture[str], engine: str) -> None:
    from ridgeline.data_parallel import TRTLLM_ATTENTION_DP

    code, _, err = run_cli(capsys, "fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8",
                           "--engine", engine, "--max-model-len", "4k", "--dp-size", "1",
                           "--enable-dp-attention")
    # TensorRT-LLM's own attention DP gets the one answer it gets however it is asked for
    said = TRTLLM_ATTENTION_DP if engine == "trtllm" else "--enable-dp-attention is SGLang's switch"
    assert code == 2 and said in err
    assert len(err.strip().splitlines()) == 1


def test_kv_holds_each_ranks_conversations_in_its_own_memory(
        capsys: pytest.CaptureFixture[str]) -> None:
    """kv -dp 8: the budget is dealt to the ranks, each holding whole conversations, so
    DeepSeek-V3 at 32K on 8 H200s holds 8 × 21 = 168, where one pool of all the memory
    would read 175 (the review's count)."""
    code, out, _ = run_cli(capsys, "kv", "deepseek-v3", "--gpu", "h200", "-dp", "8",
                           "--context", "32k", "--json")
    assert code == 0
    kv = json.loads(out)
    per, budget = kv["bytes_per_sequence"], kv["budget_bytes"]
    assert kv["conversations"] == 8 * int(budget / 8 // per) == 168
    assert int(budget // per) == 175  # the pooled count it no longer gives


def test_decode_fits_a_batch_where_its_busiest_rank_holds_its_share(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each data-parallel rank holds its own sequences in its own memory: kv -dp 8 counts 168
    DeepSeek-V3 conversations of 32K in 8 H200s' raw memory (8 × 21), and decode's fits
    judgement agrees: 168 fit, 169 put 22 on one rank and do not, though 169 caches would
    fit all eight GPUs' memory pooled (the check it made before). The busiest rank's share
    is the one fit's target is dealt by."""
    from ridgeline.reports.fit import fit_report

    code, out, _ = run_cli(capsys, "kv", "deepseek-v3", "--gpu", "h200", "-dp", "8",
                           "--context", "32000", "--json")
    assert code == 0
    kv = json.loads(out)
    held, per = kv["conversations"], kv["bytes_per_sequence"]
    assert (held + 1) * per <= kv["budget_bytes"]  # pooled, one more would have fit
    dep = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                           data_parallel_size=8)
    for batch, fits in ((held, True), (held + 1, False)):
        code, out, _ = run_cli(capsys, "decode", "deepseek-v3", "--gpu", "h200", "-dp", "8",
                               "--batch", str(batch), "--context", "32000", "--json")
        assert code == 0
        point = json.loads(out)["points"][0]
        assert point["fits"] is fits
        busiest = fit_report(dep, 32_000, EngineSettings(), target=batch).rank_target
        assert point["fit_rank"] == {"data_parallel_size": 8, "sequences": busiest,
                                     "gpus_per_rank": 1}
        assert point["capacity_bytes"] * 8 == pytest.approx(kv["budget_bytes"]
                                                            + point["weight_bytes"] * 8)
    code, text, _ = run_cli(capsys, "decode", "deepseek-v3", "--gpu", "h200", "-dp", "8",
                            "--batch", str(held + 1), "--context", "32000")
    assert text.startswith("DOES NOT FIT") and "busiest of 8 data-parallel ranks" in text


def test_a_decode_without_data_parallelism_judges_the_whole_memory() -> None:
    """Without data parallelism the memory check is every GPU's, and names no rank."""
    fit = decode_floor(deepseek(8), 64, 4000).fit
    assert fit.rank is None and "data-parallel" not in fit.headline()


LAYOUT = r"(\d+) GPUs(?: \(| as )(?:attention )?DP(\d+) × TP(\d+)"


@pytest.mark.parametrize("engine, flags", [
    ("vllm", ["-dp", "2", "--num-gpus", "16"]),
    ("sglang", ["--num-gpus", "32", "--dp-size", "2", "--enable-dp-attention"]),
])
def test_data_parallel_levers_are_layouts_the_flags_take_and_hold_what_they_say(
        capsys: pytest.CaptureFixture[str], engine: str, flags: list[str]) -> None:
    """DeepSeek-V3 at DP2 × TP16 on H100s (each rank over two nodes): no lever or caution
    offers pipeline stages, which data-parallel attention refuses; the same 32 GPUs as DP4 ×
    TP8 (a rank a node) and twice the ranks are offered, and each, given as flags in the
    engine's words, holds the conversations its lever says."""
    import re

    base = ["fit", "deepseek-v3", "--gpu", "h100", "--engine", engine, "--max-model-len",
            "32k"]
    code, out, _ = run_cli(capsys, *base, *flags, "--json")
    assert code == 0
    report = json.loads(out)
    names = [lever["name"] for lever in report["levers"]]
    assert not [n for n in names if "PP" in n] and not [c for c in report["cautions"]
                                                        if "-pp" in c or "× PP" in c]
    assert any("the same 32 GPUs as attention DP4 × TP8" in n for n in names)
    layouts = [(lever, re.search(LAYOUT, lever["name"])) for lever in report["levers"]]
    tried = [(lever, m) for lever, m in layouts if m]
    assert len(tried) >= 2
    for lever, m in tried:
        gpus, ranks, tp = (int(g) for g in m.groups())
        assert gpus == ranks * tp
        as_flags = (["-dp", str(ranks), "--num-gpus", str(tp)] if engine == "vllm" else
                    ["--num-gpus", str(gpus), "--dp-size", str(ranks), "--enable-dp-attention"])
        code, out, err = run_cli(capsys, *base, *as_flags, "--json")
        assert code == 0, err
        assert json.loads(out)["conversations"] == lever["conversations"]


def test_cross_node_caution_under_data_parallelism_names_ranks_not_stages() -> None:
    from ridgeline.parallel import cross_node_caution

    h100 = resolve_accelerator("h100")
    assert "-pp 2" in cross_node_caution(16, 1, h100, "vllm")
    ranked = cross_node_caution(16, 1, h100, "vllm", ranks=2)
    assert "-pp" not in ranked and "--data-parallel-size 4 --tensor-parallel-size 8" in ranked
    assert "--dp-size 4" in cross_node_caution(16, 1, h100, "sglang", ranks=2)


def qwen3_next_dp4(running: int) -> tuple[Deployment, EngineSettings]:
    """Qwen3-Next on 4 H100s, SGLang DP attention over 4 ranks, its radix cache off: the
    state pool is set at --max-running-requests ÷ 4 requests on each rank."""
    dep = Deployment.build(resolve_model("qwen3-next-80b-a3b"), resolve_accelerator("h100"),
                           None, None, 1, 1, "sglang", data_parallel_size=4)
    return dep, EngineSettings(prefix_caching=False, max_num_seqs=running)


def test_sglang_most_running_requests_under_dp_attention_is_the_servers_flag() -> None:
    """SGLang divides --max-running-requests over the DP-attention ranks (max_running_requests
    // dp_size), so the largest flag leaving room for 40 conversations is each rank's most
    (room for its 10) × 4: with it the target fits, a rank's next request more does not."""
    from ridgeline.reports.fit import fit_report

    dep, s = qwen3_next_dp4(4000)
    s = replace(s, engine_version="0.5.9")  # 444 below: before the prefill CUDA graphs' reserve
    over = fit_report(dep, 32_000, s, target=40)
    assert over.conversations < 40
    most = over.most_running_requests
    assert most % 4 == 0 and most // 4 >= over.rank_target == 10
    assert most == 444  # most_running_requests' worked number: 111 a rank
    assert f"--max-running-requests {most:,} or fewer leaves room for 40" in over.text_lines()[0]
    assert any(lever.name == f"--max-running-requests {most:,}" and lever.conversations >= 40
               for lever in over.levers)
    held = fit_report(dep, 32_000, replace(s, max_num_seqs=most), target=40)
    assert held.conversations >= 40 and held.pool.state_slots == most // 4
    assert fit_report(dep, 32_000, replace(s, max_num_seqs=most + 4), target=40) \
        .conversations < 40
    state = over.to_dict()["state_pool"]
    assert state["per"] == "data-parallel rank" and state["most_running_requests"] == most
    assert state["data_parallel_size"] == dep.data_parallel_size == 4
    assert state["slots_all_ranks"] == 4 * state["slots"]


def test_sglang_state_slots_under_dp_attention_are_each_ranks() -> None:
    """--max-running-requests 20 over 4 DP-attention ranks sets 5 state slots a rank (Qwen3-Next
    on 4 H200s, radix cache off): 30 conversations need 8 on the busiest rank, so the flag
    that holds them starts at 4 × 8 = 32, not 30 (which leaves each rank 7)."""
    from ridgeline.reports.fit import fit_report

    dep = Deployment.build(resolve_model("qwen3-next-80b-a3b"), resolve_accelerator("h200"),
                           None, None, 1, 1, "sglang", data_parallel_size=4)
    s = EngineSettings(prefix_caching=False, max_num_seqs=20)
    short = fit_report(dep, 4000, s, target=30)
    assert short.pool.state_slots == 20 // 4 and short.conversations < 30
    least = 4 * short.rank_target
    assert f"--max-running-requests {least} to {short.most_running_requests:,} holds them" \
        in short.text_lines()[0]
    assert "5 requests' states on each of the 4 data-parallel ranks" in short.text_lines()[0]
    assert fit_report(dep, 4000, replace(s, max_num_seqs=least), target=30).conversations >= 30
    assert fit_report(dep, 4000, replace(s, max_num_seqs=least - 1), target=30) \
        .conversations < 30


def test_dense_dp2_explain_says_each_rank_keeps_the_whole_model_not_routed_experts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B under vLLM --data-parallel-size 2: each GPU holds a whole copy (the pool's
    weights equal the checkpoint's), so --explain's weights step must not speak of routed
    experts split over the ranks, which a dense model has none of."""
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("l4"), None, None,
                           1, 1, "vllm", False, data_parallel_size=2)
    assert kv_pool(dep, EngineSettings(max_model_len=8192)).weight_bytes == \
        pytest.approx(dep.weight_bytes)
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "l4",
                           "--data-parallel-size", "2", "--max-model-len", "8192", "--explain")
    assert code == 0
    step = next(line for line in out.splitlines() if "weights per GPU =" in line)
    assert f"{dep.weight_bytes / GIB:.2f} GiB" in step
    assert "routed experts (those split" not in step
    assert "each data-parallel rank's own copy" in step
