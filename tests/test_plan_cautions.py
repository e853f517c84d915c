"""plan on cards without fp8 units (weight-only fp8, an fp8 cache), replicas over several nodes
(the cross-node caution, one launch command a node), and a prompt speed priced with another
card group's compute share near the TTFT SLO."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline.candidate import Candidate, replica_deployment
from ridgeline.capacity import start_trim_caution
from ridgeline.catalog import resolve_model
from ridgeline.cli import main
from ridgeline.datafiles import engine_defaults
from ridgeline.disaggregated import disaggregated_candidates
from ridgeline.engines import profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.parallel import cross_node_caution, node_size
from ridgeline.plan import PlanResult, plan
from ridgeline.plan_cautions import (
    PROMPT_SHARE_UNCERTAINTY,
    borrowed_compute_group,
    candidate_cautions,
    launch_trim_caution,
    mla_unchunked_caution,
    prompt_share_caution,
)
from ridgeline.plan_checks import cheapest
from ridgeline.reports.launch_commands import node_commands
from ridgeline.reports.plan import PlanReport
from ridgeline.search_space import search_space
from ridgeline.serving_load import Load, Slo

LLAMA_405B = resolve_model("llama-3.1-405b")
LLAMA_70B = resolve_model("llama-3.1-70b")
A100 = resolve_accelerator("a100")
H100 = resolve_accelerator("h100")


def _candidate(gpu: str, tp: int, pp: int = 1, replicas: int = 1, **kw: object) -> Candidate:
    """A candidate as the search sizes one (batch 16, 40 ms a token), priced $2 a GPU-hour."""
    return replace(Candidate(gpu, tp, pp, "fp8", "bf16", None, 16, 0.04, 0.2, 1.0, replicas,
                             2.0, True, "", (0.8, 1.2)), **kw)


def _formats(gpu: str, engine: str) -> set[tuple[str, str]]:
    return {(w, kv) for _, _, _, w, kv, _, _ in search_space(LLAMA_70B, [gpu], 8, engine)}


def test_an_a100_is_searched_with_fp8_weights_and_cache_where_its_engine_runs_them() -> None:
    # vLLM and SGLang run fp8 weights on Ampere weight-only (FP8 Marlin) and keep an fp8
    # cache; TensorRT-LLM runs neither before compute capability 8.9, nor any engine fp8
    # weights on Volta
    everything = {(w, kv) for w in ("bf16", "fp8") for kv in ("bf16", "fp8")}
    assert _formats(A100.id, "vllm") == _formats(A100.id, "sglang") == everything
    assert _formats(A100.id, "trtllm") == {("bf16", "bf16")}
    # a V100 under the release that wheels Volta kernels last (0.19: vllm_gpu_floors), in
    # fp16 (no bf16 matmuls), with no fp8 cache (no backend vLLM picks there reads one)
    volta = {(w, kv) for *_, w, kv, _, _ in search_space(LLAMA_70B, ["v100-sxm-32gb"], 8,
                                                         "vllm", "0.19")}
    assert volta == {("fp16", "fp16")}
    assert not _formats("v100-sxm-32gb", "vllm")  # the newest release has none


def test_405b_fits_one_a100_node_at_fp8_where_bf16_needs_two() -> None:
    """Llama-3.1-405B's 410 GB at 1 B a weight fit one 8 x A100 node, its 810 GB at bf16 do
    not: within 8 GPUs the plan had answered NO DEPLOYMENT, never trying fp8 on the card."""
    result = plan(LLAMA_405B, Load(0.3, "1000", "250"), Slo(3.0, 0.08), [A100.id], max_gpus=8,
                  workers=1)
    win = result.winner
    assert win is not None and win.verified and win.sim_tpot_s is not None
    assert win.weights == "fp8" and win.tp == 8 and win.replica_nodes == 1
    assert win.sim_tpot_s <= 0.08
    assert not any(c.weights == "bf16" for c in result.candidates)
    # priced as decode prices it: W8A16, the matmuls at bf16 after the weights are widened
    dep = replica_deployment(LLAMA_405B, A100, win.tp, win.pp, win.weights, win.kv)
    assert dep.compute_dtype == "bf16" and dep.dequantizes


def test_an_a100_split_takes_the_lightest_weights_its_engine_runs() -> None:
    load, slo = Load(3.0, "1000", "250"), Slo(2.0, 0.06)
    prices: dict[str, float | None] = {A100.id: 1.79}
    (on_vllm,) = disaggregated_candidates(LLAMA_70B, load, slo, [A100.id], 64, prices)
    (on_trtllm,) = disaggregated_candidates(LLAMA_70B, load, slo, [A100.id], 64, prices,
                                            engine="trtllm")
    assert on_vllm.weights == "fp8" and on_trtllm.weights == "bf16"


def test_at_one_price_a_replica_on_fewer_nodes_ranks_first() -> None:
    """16 GPUs at one price three ways: two one-node TP8 replicas, then TP8 × PP2 (its
    all-reduces inside a node), then TP16 (every all-reduce on the network)."""
    tp16, pp2, tp8 = _candidate(H100.id, 16), _candidate(H100.id, 8, 2), \
        _candidate(H100.id, 8, replicas=2)
    assert tp16.cost_per_hour == pp2.cost_per_hour == tp8.cost_per_hour
    assert sorted([tp16, pp2, tp8], key=cheapest) == [tp8, pp2, tp16]
    assert (tp8.replica_nodes, pp2.replica_nodes, tp16.replica_nodes) == (1, 2, 2)
    assert tp16.tp_crosses_nodes and not pp2.tp_crosses_nodes


@pytest.mark.usefixtures("plan_once")  # one search for its text and --json
def test_tp16_runners_up_carry_the_cross_node_caution_fit_and_decode_give(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "llama-3.1-405b", "--rate", "2", "--slo-ttft-ms", "2000", "--slo-tpot-ms",
            "50", "--gpus", "h100", "--workers", "1"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    caution = cross_node_caution(16, 1, H100, "vllm")
    assert data["winner"]["tensor_parallel_size"] <= node_size(H100) and data["winner"]["cautions"] == []
    tp16 = [row for row in data["runners_up"] if row["tensor_parallel_size"] == 16]
    assert tp16 and all(row["cautions"] == [caution] for row in tp16)
    assert all(row["replica_nodes"] == 2 for row in tp16)
    # said once, naming each deployment it is said of
    line = next(x for x in text.splitlines() if x.endswith(f": {caution}"))
    assert text.count(caution) == 1 and line.startswith("  caution, ")
    assert all(row["label"] in line for row in tp16)
    assert not any(row["cautions"] for row in data["runners_up"] if row["tensor_parallel_size"] <= 8)


@pytest.mark.usefixtures("plan_once")  # one search for its text and --json
def test_a_tp16_winner_carries_the_caution_and_says_its_launch_spans_nodes(
        capsys: pytest.CaptureFixture[str]) -> None:
    """TensorRT-LLM runs no fp8 on an A100, so 405B at bf16 needs two nodes a replica."""
    args = ["plan", "llama-3.1-405b", "--rate", "1", "--slo-ttft-ms", "3000", "--slo-tpot-ms",
            "80", "--gpus", "a100", "--engine", "trtllm", "--workers", "1"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["winner"]["tensor_parallel_size"] == 16
    caution = cross_node_caution(16, 1, A100, "trtllm")
    assert caution in data["cautions"] and data["winner"]["cautions"] == [caution]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"  caution: {caution}" in text
    assert "each replica spans 2 nodes of 8 a100-sxm-80gb, a multi-node launch" in text


def test_a_replica_over_two_nodes_is_launched_one_command_a_node() -> None:
    c = _candidate(H100.id, 8, 2)
    vllm = node_commands("vllm", "meta-llama/Llama-3.1-405B", c, 131072)
    assert len(vllm) == c.replica_nodes == 2
    assert vllm[0].endswith("--nnodes 2 --node-rank 0 --master-addr HEAD_NODE_IP")
    assert vllm[1].endswith("--nnodes 2 --node-rank 1 --master-addr HEAD_NODE_IP --headless")
    assert all("--tensor-parallel-size 8 --pipeline-parallel-size 2" in v for v in vllm)
    sglang = node_commands("sglang", "meta-llama/Llama-3.1-405B", c, 131072)
    assert [s.split("--nnodes")[1] for s in sglang] == [
        f" 2 --node-rank {i} --dist-init-addr HEAD_NODE_IP:20000" for i in (0, 1)]
    assert node_commands("trtllm", "meta-llama/Llama-3.1-405B", c, 131072) == []
    assert node_commands("vllm", "meta-llama/Llama-3.1-405B", _candidate(H100.id, 8),
                         131072) == []


def test_a_two_node_winners_report_prints_and_returns_each_nodes_command() -> None:
    win = _candidate(H100.id, 8, 2)
    load, slo = Load(1.0, "1000", "250"), Slo(2.0, 0.05)
    report = PlanReport(LLAMA_405B, "meta-llama/Llama-3.1-405B",
                        PlanResult(load, slo, (win,), (), (), (), 1, 250.0, ""), 131072)
    nodes = report.launch.node_commands()["vllm"]
    assert report.launch.commands()["vllm"] == nodes[0]
    assert report.to_dict()["node_commands"] == {"vllm": nodes}
    lines = report.text_lines()
    start = next(i for i, line in enumerate(lines) if line.startswith("run it with ("))
    assert "--distributed-executor-backend ray" in lines[start]  # or on a Ray cluster
    assert lines[start + 1:start + 3] == [f"  node {i}: {cmd}" for i, cmd in enumerate(nodes)]


def test_only_a_card_whose_prompt_speed_borrows_a_share_is_cautioned_near_its_ttft_slo() -> None:
    profile = profile_for("vllm")
    # every prompt row of the bundled profile is NVIDIA's: the Instinct cards borrow theirs
    assert borrowed_compute_group(profile, resolve_accelerator("mi300x")) == "nvidia-datacenter"
    assert borrowed_compute_group(profile, H100) == ""
    slo = Slo(1.0, 0.05)
    near = _candidate("mi300x", 1, verified=True, sim_ttft_s=0.8)
    text = prompt_share_caution(near, profile, slo, "vllm")
    assert f"{0.8 * PROMPT_SHARE_UNCERTAINTY * 1e3:,.0f} ms" in text and "p90 TTFT" in text
    assert prompt_share_caution(replace(near, sim_ttft_s=0.7), profile, slo, "vllm") == ""  # 910 ms
    assert prompt_share_caution(replace(near, accelerator=H100.id), profile, slo, "vllm") == ""
    # unsimulated: judged on its analytic floor, a lower bound
    assert "analytic floor" in prompt_share_caution(
        replace(near, verified=False, ttft_floor_s=0.9), profile, slo, "vllm")
    # a profile fitted on the card's own prompt rows has a share of its own
    own = replace(profile, group_compute={"amd-instinct": 0.8})
    assert prompt_share_caution(near, own, slo, "vllm") == ""


def test_the_prompt_speed_caution_names_the_rows_own_card_and_engine() -> None:
    """It had named an MI300X and vLLM on ROCm whatever the row: an MI325X under SGLang is
    spoken of as itself, and an MI300X under vLLM as itself."""
    slo = Slo(1.0, 0.05)
    near = _candidate("mi325x", 1, verified=True, sim_ttft_s=0.8)
    sglang = prompt_share_caution(near, profile_for("sglang"), slo, "sglang")
    assert sglang.startswith("mi325x's prompt speed")
    assert f"SGLang on the {resolve_accelerator('mi325x').name}" in sglang
    assert "MI300X" not in sglang and "vLLM" not in sglang
    vllm = prompt_share_caution(replace(near, accelerator="mi300x"), profile_for("vllm"), slo,
                                "vllm")
    assert f"vLLM on the {resolve_accelerator('mi300x').name}" in vllm and "SGLang" not in vllm


# one search for its text and --json, unsimulated: no check prices an unpriced row
@pytest.mark.usefixtures("plan_once", "unsimulated")
def test_an_unpriced_rows_caution_is_printed_under_the_list(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An MI325X has no catalog price: 4,000-token prompts within a 220 ms TTFT leave it
    feasible but unpriced, its analytic TTFT floor within 1.3x of the SLO. --json had carried
    the row's caution alone; the text says it too, in the card's and engine's names."""
    args = ["plan", "llama-3.1-70b", "--rate", "0.5", "--input-len", "4000", "--output-len",
            "200", "--slo-ttft-ms", "220", "--slo-tpot-ms", "60", "--gpus", "mi325x",
            "--engine", "sglang", "--workers", "1", "--max-gpus", "8"]  # one node
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "unpriced"
    cautioned = [(row["label"], text) for row in data["unpriced"] for text in row["cautions"]]
    assert cautioned  # each row's prompt-share caution, beside its others (a batch past the
    # Instinct rows' largest: EngineProfile.batch_range_caution)
    assert all(any(f"SGLang on the {resolve_accelerator('mi325x').name}" in text
                   for text in row["cautions"]) for row in data["unpriced"])
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(f"  caution, {label}: {text}" in lines for label, text in cautioned)


def test_the_cautions_of_unpriced_and_cheaper_unverified_rows_sit_under_them() -> None:
    """Beside a winner, an unpriced card's caution follows its own line, and a cheaper
    deployment a measured caution leaves unverified has its own cautions under that list."""
    slo, load = Slo(1.0, 0.05), Load(1.0, "1000", "250")
    profile = profile_for("vllm")
    win = _candidate(H100.id, 1, replicas=2, verified=True, sim_ttft_s=0.2, sim_tpot_s=0.03)
    cheaper = _candidate("mi300x", 1, verified=True, sim_ttft_s=0.9, sim_tpot_s=0.03)
    unpriced = _candidate("mi325x", 1, price_per_gpu_hour=None, ttft_floor_s=0.9)
    own = {c.accelerator: candidate_cautions(c, "vllm", profile, slo, LLAMA_70B)
           for c in (cheaper, unpriced)}
    assert all(own.values())
    result = PlanResult(load, slo, (win, cheaper), (unpriced,), (), (), 2, 250.0, "",
                        measured_cautions=((cheaper, "CDNA3's FP8 MoE paths"),),
                        deployment_cautions=((cheaper, own["mi300x"]),
                                             (unpriced, own["mi325x"])))
    assert result.cheaper_unverified == (cheaper,)
    report = PlanReport(LLAMA_70B, "meta-llama/Llama-3.1-70B", result, 131072)
    lines = report.text_lines()
    header = next(i for i, line in enumerate(lines) if line.startswith("cheaper, unverified"))
    blank = lines.index("", header)
    assert [f"  caution, {report.lists.label(cheaper)}: {text}" for text in own["mi300x"]] == [
        line for line in lines[header:blank] if line.startswith("  caution")]
    row = next(i for i, line in enumerate(lines) if line.startswith(report.lists.label(unpriced)))
    assert lines[row + 1:row + 1 + len(own["mi325x"])] == [
        f"  caution: {text}" for text in own["mi325x"]]


def test_an_mi300x_winner_near_its_ttft_slo_is_cautioned() -> None:
    """Llama-3.1-70B, 4,000-token prompts at 5 req/s and a 360 ms p90 TTFT: the MI300X
    winner's simulated p90 is within 1.3x of the SLO, which the H100s' share decides. (At
    600 ms the variant ranked first at its price, the most headroom, an fp8 cache, reads
    311 ms: 1.3x of it keeps the SLO.) Searched within one node, where the winner is (TP8)."""
    slo = Slo(0.36, 0.06)
    result = plan(LLAMA_70B, Load(5.0, "4000", "200"), slo, ["mi300x"], max_gpus=8, workers=1)
    win = result.winner
    assert win is not None and win.verified and win.sim_ttft_s is not None
    assert win.sim_ttft_s * PROMPT_SHARE_UNCERTAINTY > slo.ttft_s
    caution = prompt_share_caution(win, profile_for("vllm"), slo, "vllm")
    assert caution and caution in result.cautions
    past_rows = profile_for("vllm").batch_range_caution(resolve_accelerator("mi300x"), win.batch)
    assert result.cautions_for(win) == tuple(c for c in (caution, past_rows) if c)


def test_utilization_past_one_node_carries_the_cross_node_caution(
        capsys: pytest.CaptureFixture[str]) -> None:
    caution = cross_node_caution(16, 1, H100, "vllm")
    for extra in ([], ["--model", "llama-3.1-405b", "--context", "8000"]):
        assert main(["utilization", "--gpu", "h100", "--num-gpus", "16", "--running", "32",
                     *extra, "--json"]) == 0
        assert caution in json.loads(capsys.readouterr().out)["cautions"]
    assert main(["utilization", "--gpu", "h100", "--num-gpus", "16", "--running", "32",
                 "--model", "llama-3.1-405b", "--context", "8000"]) == 0
    assert f"caution: {caution}" in capsys.readouterr().out
    assert main(["utilization", "--gpu", "h100", "--num-gpus", "8", "--running", "32",
                 "--model", "llama-3.1-70b", "--context", "8000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cautions"] == []


def test_the_mla_caution_says_no_prompt_reaches_past_a_budget_the_samples_stay_under() -> None:
    """DeepSeek-V3 on L40Ss under TensorRT-LLM, its check's draws holding prompts past
    max_num_tokens (sim_over_budget) that the sizing's samples, all 4,000 tokens, do not
    reach: the caution may not say the load's prompts reach 4,000 tokens past 8,192."""
    v3 = resolve_model("deepseek-v3", fetchable=False)
    load = Load(0.5, "4000", "100")
    win = _candidate("l40s", 16, max_model_len=16384, sim_over_budget=3)
    budget = int(engine_defaults("trtllm")["max_num_tokens"])
    assert load.longest_prompt(win.max_model_len) < budget
    said = mla_unchunked_caution(win, "trtllm", load, v3)
    assert f"longer than max_num_tokens {budget:,}" in said and "reach" not in said
    assert not mla_unchunked_caution(replace(win, sim_over_budget=0), "trtllm", load, v3)
    longer = Load(0.5, "12000", "100")  # the samples past the budget: their longest said
    assert f"reach 12,000 tokens, past max_num_tokens {budget:,}" in mla_unchunked_caution(
        win, "trtllm", longer, v3)


def test_a_trtllm_replica_whose_pool_is_shorter_than_its_max_seq_len_says_it_trims_it() -> None:
    """Llama-3.1-70B in fp8 on one H100 under trtllm: the launch line's --max_seq_len 131,072
    is reduced to the tokens the pool holds, as simulate says it; `fit` calls that pool too
    short for one 131,072-token conversation, so a candidate launched there must say so (the
    search itself launches at the 27,648 the pool holds: test_plan_launch_fits)."""
    c = _candidate("h100", 1, max_model_len=131072)
    dep = replica_deployment(LLAMA_70B, H100, 1, 1, "fp8", "bf16", engine="trtllm")
    settings = EngineSettings(max_model_len=131072)
    pool_tokens = kv_pool(dep, settings).tokens
    assert pool_tokens < 131072  # the pool is short of one max_seq_len sequence
    caution = launch_trim_caution(c, "trtllm", LLAMA_70B)
    assert caution == start_trim_caution(dep, settings, 131072)
    assert f"reducing it to the {pool_tokens:,} tokens" in caution
    profile = profile_for("trtllm")
    slo = Slo(ttft_s=2.0, tpot_s=0.05)
    assert caution in candidate_cautions(c, "trtllm", profile, slo, LLAMA_70B)
    # vLLM refuses to start there instead (launch_length keeps its line short of the pool)
    assert launch_trim_caution(c, "vllm", LLAMA_70B) == ""
    # a pool that holds the whole context trims nothing
    assert launch_trim_caution(replace(c, tp=4), "trtllm", LLAMA_70B) == ""


def test_a_tail_share_of_refused_requests_is_not_printed_as_none() -> None:
    """A lognormal load's tail past the context is a few requests in a million: the winner's
    line had printed it "0.0%" of the requests, beside "the engine refuses them", then
    "3.0e-06"; it reads as one in so many (units.share_of_requests)."""
    from ridgeline.units import share_of_requests

    for tail in (3e-6, 4.9e-5, 1e-4):
        text = share_of_requests(tail)
        assert "0.0" not in text and "e-0" not in text and text.startswith("about 1 in ")
    assert share_of_requests(0.25).startswith("25.0%")
