"""A capacity planner's audit of `plan` (session 61): at one price the documented rank order
decides, not the order of the checks; vLLM 0.34's unchecked extensible KV cache is said on
plan's rows and in the check's simulate; prices name their sources; --weights, --kv-dtype
and --min-context narrow the search; splits read as what they are; the --json rows' fields
say what was computed; the check command's rate reads short and reruns the same run."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

import ridgeline.plan_checks as plan_checks
from ridgeline.candidate import Candidate, candidate_deployment
from ridgeline.catalog import resolve_model
from ridgeline.data_parallel import data_parallel_cautions
from ridgeline.disaggregated import disaggregated_candidates
from ridgeline.engines import profile_for
from ridgeline.hardware import resolve_accelerator
from ridgeline.plan import PlanResult, _card_outcomes, _cheapest_in_range
from ridgeline.plan_cautions import (
    calibration,
    data_parallel_winner_cautions,
    extensible_kv_caution,
    needs_release,
)
from ridgeline.replica_sizing import launch_length
from ridgeline.reports.plan import card_words
from ridgeline.reports.plan_commands import check_line
from ridgeline.reports.plan_lists import PlanLists
from ridgeline.serving_load import Load, Slo
from ridgeline.sim.data_parallel import dispatch_label
from ridgeline.sim.workload import Workload
from tests.conftest import run_cli

LLAMA_8B = resolve_model("llama-3.1-8b")
LLAMA_70B = resolve_model("llama-3.1-70b")
H100 = resolve_accelerator("h100")
SLO = Slo(0.5, 0.03)
LOAD_70B = ["--rate", "1", "--input-len", "lognormal:1000,0.8", "--output-len",
            "lognormal:250,0.8", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50"]
# the plans here within 2 GPUs, in one process: each claim is of rows of 1 or 2 GPUs (the
# audit's 2 x TP1 against 1 x TP2), which a search up to 64 GPUs ranks the same
NARROW = ("--max-gpus", "2", "--workers", "1")


def _sized(tp: int, replicas: int, rate: float) -> Candidate:
    """An H100 candidate of ``tp`` GPUs a replica, ``replicas`` of them (the analytic count),
    each sustaining ``rate`` req/s, at $1 a GPU-hour."""
    return Candidate(H100.id, tp, 1, "fp8", "fp8", None, 16, 0.02, 0.1, rate, replicas, 1.0,
                     True, "", (0.8, 1.2))


def test_a_tie_at_the_cheapest_price_is_checked_and_ranked_by_headroom(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """TP1 sizes at one $1 replica and holds at two ($2, 2 × 1.2 req/s); TP2 sizes at one
    replica of 2 GPUs ($2, 4.5 req/s). Checking stopped once TP1 held at $2, the price TP2
    ties, so the winner was whichever was checked first; now the tie that ranks before the
    one that held (more headroom) is checked too and wins."""
    tp1, tp2 = _sized(1, 1, 1.2), _sized(2, 1, 4.5)
    needs = {1: 2, 2: 1}
    checked: list[Candidate] = []

    def simulated(model: object, c: Candidate, *args: Any, **kwargs: Any) -> Candidate:
        checked.append(c)
        runs = args[-1]
        runs[(len(runs),) * 5] = None  # a run made
        return replace(c, replicas=needs[c.tp], verified=True, analytic_replicas=c.replicas)

    monkeypatch.setattr(plan_checks, "verify", simulated)
    priced = sorted([tp1, tp2], key=plan_checks.cheapest)
    verified, rest = plan_checks.verify_cheapest(LLAMA_8B, priced, Load(1.0, "1000", "250"),
                                                 SLO, 64, 16)
    assert checked == [tp1, tp2] and not rest
    assert verified[0].tp == 2 and verified[0].cost_per_hour == verified[1].cost_per_hour
    # a knob variant of the layout that held, tied too, is no new layout: not checked
    variant = replace(tp1, max_num_seqs=64, replica_rate_req_s=1.3, replicas=2)
    checked.clear()
    plan_checks.verify_cheapest(LLAMA_8B, sorted([tp1, variant], key=plan_checks.cheapest),
                                Load(1.0, "1000", "250"), SLO, 64, 16)
    assert checked == [tp1]


def test_70b_at_one_request_a_second_picks_tp2_and_cautions_the_tp1_row(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's example: 2 × TP1 and 1 × TP2 cost $5.98 on 2 H100s; TP2 has 4.52 req/s of
    capacity and the model's whole context, TP1 2 × 1.16 and a 34,560-token launch that
    0.33's rules would not start. TP2 wins; the TP1 row carries fit's extensible-KV caution,
    and so does TP1's own simulate check."""
    code, out, err = run_cli(capsys, "plan", "llama-3.1-70b", "--gpus", "h100", *LOAD_70B,
                             *NARROW, "--json")
    assert code == 0, err
    data = json.loads(out)
    win = data["winner"]
    assert (win["tensor_parallel_size"], win["replicas"]) == (2, 1)
    tp1 = next(r for r in data["runners_up"] if r["tensor_parallel_size"] == 1)
    assert tp1["cost_per_hour_usd"] == win["cost_per_hour_usd"]
    assert tp1["replicas"] * tp1["replica_rate_req_s"] < win["replicas"] * \
        win["replica_rate_req_s"]
    said = [c for c in tp1["cautions"] if "extensible KV cache is unchecked" in c]
    assert said and "0 conversations" in said[0]
    # the row's caution is fit's, of the same launch
    code, fit_out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus",
                               "1", "--weights", "fp8", "--kv-dtype", "fp8", "--max-num-seqs",
                               str(tp1["max_num_seqs"]), "--max-model-len",
                               str(tp1["max_model_len"]))
    fit_words = next(line for line in fit_out.splitlines() if "extensible KV" in line)
    # the same words and figures; fit then says what 0 conversations mean at start-up
    figures, refused, _ = fit_words.removeprefix("caution: ").partition(": under them")
    assert refused and said[0].startswith(figures)
    c = Candidate(H100.id, 1, 1, "fp8", "fp8", tp1["max_num_seqs"], tp1["batch"], 0.04, 0.3,
                  1.16, 2, 2.99, True, "", (0.8, 1.2), max_model_len=tp1["max_model_len"])
    load = Load(1.0, "lognormal:1000,0.8", "lognormal:250,0.8")
    assert extensible_kv_caution(c, "vllm", LLAMA_70B, load) == said[0]
    code, sim_out, err = run_cli(capsys, "simulate", "llama-3.1-70b", "--gpu", "h100",
                                 "--weights", "fp8", "--kv-dtype", "fp8", "--max-num-seqs",
                                 str(tp1["max_num_seqs"]), "--max-model-len",
                                 str(tp1["max_model_len"]), "--rate", "0.5",
                                 "--num-requests", "200", "--input-len", "lognormal:1000,0.8",
                                 "--output-len", "lognormal:250,0.8")
    assert code == 0, err
    assert "extensible KV cache is unchecked" in sim_out


@pytest.mark.usefixtures("unsimulated")
def test_constraints_narrow_the_search_and_name_themselves(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--weights, --kv-dtype (decode's spellings, comma lists) and --min-context were refused
    ("plan takes no --weights"); now every row keeps them, --json echoes them, the header
    says them, and a format plan does not search is refused in one line. The TensorRT-LLM
    header names the releases its defaults span."""
    argv = ["plan", "llama-3.1-8b", "--gpus", "h100", "--rate", "1", "--slo-ttft-ms", "1000",
            "--slo-tpot-ms", "50", "--weights", "BF16", "--kv-dtype", "fp8_e4m3,bf16",
            "--min-context", "100000", *NARROW]
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["constraints"] == {"weights": ["bf16"], "kv_dtypes": ["fp8", "bf16"],
                                   "min_max_model_len": 100000, "max_model_len": None,
                                   "max_cost_per_hour_usd": None,
                                   "disable_hybrid_kv_cache_manager": None,
                                   "vllm_allow_chunked_local_attn_with_hybrid_kv_cache": None}
    rows = [data["winner"], *data["runners_up"], *data["disaggregated"]]
    assert all(r["weights"] == "bf16" and r["kv_dtype"] in ("fp8", "bf16")
               and r["max_model_len"] >= 100000 for r in rows)
    code, text, err = run_cli(capsys, *argv, "--engine", "trtllm")
    assert code == 0, err
    head = text.splitlines()[0]
    assert "only weights bf16, KV fp8, bf16, launches of 100,000 tokens or more" in head
    assert "TensorRT-LLM 1.0–1.2" in head
    code, _, err = run_cli(capsys, "plan", "llama-3.1-8b", "--gpus", "h100", "--rate", "1",
                           "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--weights",
                           "awq-int4")
    assert code == 2 and err.count("\n") == 1 and "plan searches bf16, fp8" in err


@pytest.mark.usefixtures("unsimulated")
def test_the_prices_line_names_every_searched_cards_source(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The default text named no price's source; now one line names each searched card's
    price, source and date (undated where the catalog gives none), a --price as such."""
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--gpus", "h100,mi300x",
                             "--rate", "1", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50",
                             "--price", "h100=2.5", *NARROW)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("prices per GPU-hour:"))
    assert "h100-sxm $2.50 (--price)" in line
    dated = resolve_accelerator("mi300x").price_date  # the catalog's, or "undated"
    assert "mi300x $1.85 (Vultr on-demand" in line and (dated or "undated") in line


def test_a_winner_priced_past_its_fitted_batches_names_the_cheapest_within_them() -> None:
    """An MI300X priced at batch 466, past the Instinct rows' 16: the first candidate priced
    within its own card's fitted range is named beside it; none where the winner is within."""
    profile = profile_for("vllm")
    mi = replace(_sized(1, 1, 30.0), accelerator="mi300x", batch=466, price_per_gpu_hour=1.85)
    h100 = replace(_sized(1, 1, 25.0), batch=357, price_per_gpu_hour=2.99)
    assert profile.batch_range_caution(resolve_accelerator("mi300x"), mi.batch)
    assert _cheapest_in_range(mi, [mi, h100], profile) is h100
    assert _cheapest_in_range(h100, [h100, mi], profile) is None


def _result(**fields: Any) -> PlanResult:
    """A plan's result holding ``fields`` (the rest empty), for the lists' words alone."""
    empty: dict[str, Any] = {"candidates": (), "unpriced": (), "disaggregated": (),
                             "pareto": ()}
    return PlanResult(Load(1.0, "1000", "250"), SLO, searched=0, mean_output_tokens=250.0,
                      closest_miss="", **(empty | fields))


def test_splits_read_as_what_they_are() -> None:
    """A split cheaper than the winner that no check reached says so on its own line; a
    hybrid's split under vLLM's NixlConnector is a held split, its pools sized beside the
    connector (disaggregated.pool_connector); a card
    whose layouts fit but missed every check says so, not "no layout fits"; a split-only
    card whose split is analytic says so."""
    win = replace(_sized(1, 2, 1.0), verified=True)
    cheap = replace(_sized(1, 1, 1.0), disaggregated="1P1D", prefill_replicas=1, replicas=2,
                    price_per_gpu_hour=0.5)
    lines = PlanLists(LLAMA_8B, _result(candidates=(win,), disaggregated=(cheap,))
                      ).alternative_lines(win, "output", 250.0)
    assert any(x.startswith("  not checked in simulation: it costs less than the winner")
               for x in lines)
    oss = resolve_model("gpt-oss-120b")
    held = replace(cheap, verified=True, weights="as stored")
    assert PlanLists(oss, _result(disaggregated=(held,))).held_splits() == [held]
    assert PlanLists(LLAMA_8B, _result(disaggregated=(held,))).held_splits() == [held]
    a100 = replace(_sized(1, 1, 1.0), accelerator="a100-sxm-80gb")
    (missed,) = _card_outcomes(["a100-sxm-80gb"], [], [], [], [a100], 1)
    assert card_words(missed) == ("a100-sxm-80gb: layouts fit, none held in simulation "
                                  "within --max-gpus")
    (split,) = _card_outcomes(["a100-sxm-80gb"], [], [], [replace(a100, disaggregated="1P1D")],
                              [], 1)
    assert "analytic only: not simulated" in card_words(split)


def test_split_rows_carry_their_calibration_and_their_check() -> None:
    """A split's row read calibrated false on an H100, whose single pools read true, and a
    simulated split no requests or window; now both come from its profile and its decode
    pool's check."""
    load, slo = Load(2.0, "1000", "250"), Slo(1.0, 0.05)
    profile = profile_for("vllm")
    splits = disaggregated_candidates(LLAMA_8B, load, slo, ["h100"], 8, {H100.id: 2.99})
    assert splits and all(c.calibrated == calibration(profile, H100, "vllm")[0] is True
                          for c in splits)
    from ridgeline.disaggregated import verify_disaggregated

    held = verify_disaggregated(LLAMA_8B, splits[0], load, slo, 8)
    assert held is not None and held.sim_requests > 0 and held.sim_window_s is not None
    assert held.analytic_replicas == splits[0].replicas


def test_the_winners_data_parallel_cautions_are_its_checks() -> None:
    """DeepSeek-V3 in attention DP4 × TP2 on H200s: plan said two of the three cautions its
    printed simulate check gives; the third, the ranks' exchange priced as vLLM's default
    all-to-all backend, is now said too, from the same source."""
    ds = resolve_model("deepseek-v3")
    c = replace(_sized(2, 1, 1.0), accelerator="h200-sxm", data_parallel=4,
                expert_parallel=True)
    dep = candidate_deployment(ds, c, "vllm")
    simulate_says = data_parallel_cautions(dep, True, dispatch_label("vllm"))
    assert any("exchange between the ranks" in w for w in simulate_says)
    assert data_parallel_winner_cautions(c, "vllm", ds) == simulate_says


def test_the_check_commands_rate_is_short_and_reruns_the_same_requests() -> None:
    """5 req/s over 3 replicas printed --rate 1.6666666666666667; the share is now 6
    significant digits, the check runs at it, and the printed command's Workload draws the
    check's very requests."""
    load = Load(5.0, "lognormal:1000,0.8", "lognormal:250,0.8")
    assert load.share_rate(3) == 1.66667
    work, window = load.steady(3, 10.0, percentile=90)
    c = replace(_sized(1, 3, 2.0), verified=True, sim_requests=len(work), sim_window_s=window,
                sim_ttft_s=0.1, sim_tpot_s=0.02)
    line = check_line("llama-3.1-8b", load, SLO, "vllm", None, c, 131072)
    assert " --rate 1.66667 " in line
    rerun = list(Workload(len(work), load.input_len, load.output_len, 1.66667, seed=0))
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in rerun] == \
        [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in work]


def test_unsimulated_rows_leave_analytic_replicas_null(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--json gave analytic_replicas 0 on a row no check reached (its analytic count is its
    replicas); now null there, the count where a check moved from it."""
    code, out, err = run_cli(capsys, "plan", "llama-3.1-8b", "--gpus", "h100", "--rate", "1",
                             "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", *NARROW, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["winner"]["analytic_replicas"] >= 1
    rows = [*data["runners_up"], *data["disaggregated"]]
    assert all(r["analytic_replicas"] is None for r in rows if not r["verified"])
    assert all(r["sim_requests"] is None for r in rows if not r["verified"])


def _caution_row(max_model_len: int) -> Candidate:
    """The audit's TP1 row of Llama-3.1-70B (fp8, KV fp8, 64 seats) at ``max_model_len``."""
    return Candidate(H100.id, 1, 1, "fp8", "fp8", 64, 17, 0.04, 0.3, 0.86, 1, 2.99, True, "",
                     (0.8, 1.2), max_model_len=max_model_len)


def test_the_extensible_caution_names_the_release_the_row_needs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A row whose pool only vLLM 0.34's extensible KV cache makes says what the release
    before it does with the same launch, by that release's own accounting (`fit
    --engine-version 0.33`: it does not start at the row's length), and that the row needs
    0.34 or later; where 0.33 does start, it says what that pool holds instead."""
    load = Load(0.3, "lognormal:1000,0.8", "lognormal:250,0.8")
    words = extensible_kv_caution(_caution_row(34_560), "vllm", LLAMA_70B, load)
    code, fit_out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--weights",
                               "fp8", "--kv-dtype", "fp8", "--max-num-seqs", "64",
                               "--max-model-len", "34560", "--engine-version", "0.33",
                               "--json")
    prior = json.loads(fit_out)
    assert prior["conversations"] == 0  # vLLM 0.33 does not start this launch
    assert "so it needs vLLM 0.34 or later" in words
    assert (f"vLLM 0.33 sizes {prior['pool_bytes_per_gpu'] / 2**30:,.2f} GiB per GPU and does not "
            "start at --max-model-len 34,560") in words
    # a shorter launch that 0.33 starts: its pool's requests, fewer than the batch counted
    code, fit_out, _ = run_cli(capsys, "fit", "llama-3.1-70b", "--gpu", "h100", "--weights",
                               "fp8", "--kv-dtype", "fp8", "--max-num-seqs", "64",
                               "--max-model-len", "8192", "--engine-version", "0.33", "--json")
    assert code == 0
    assert json.loads(fit_out)["conversations"] > 0  # 0.33 starts at 8,192
    shorter = extensible_kv_caution(_caution_row(8_192), "vllm", LLAMA_70B, load)
    assert "does not start" not in shorter
    assert "so it needs vLLM 0.34 or later, its extensible KV cache on: vLLM 0.33 sizes " \
        "1.64 GiB per GPU and holds 6 requests of 1,720 tokens" in shorter


def test_a_row_launched_short_of_the_context_says_the_length_is_its_own() -> None:
    """The audit's L4/A10G/L40S plan: the winner launched at 131,072 while an A10G row's
    caution spoke of 55,808 tokens, each row's launch being the longest its own pool starts
    at. The caution now says so where the length is the planner's (``launch_length``), and
    not of a length `plan --max-model-len` fixed shorter."""
    load = Load(0.3, "lognormal:1000,0.8", "lognormal:250,0.8")
    row = _caution_row(34_560)
    dep = candidate_deployment(LLAMA_70B, row, "vllm", None)
    assert launch_length(dep, replace(row.engine_settings(), max_model_len=None)) == 34_560
    own = extensible_kv_caution(row, "vllm", LLAMA_70B, load)
    assert ("0 conversations of 34,560 tokens (this row's own --max-model-len: the longest "
            "its pool starts at, short of llama-3.1-70b's 131,072)") in own
    fixed = extensible_kv_caution(_caution_row(32_768), "vllm", LLAMA_70B, load)
    assert "32,768 tokens" in fixed and "this row's own" not in fixed


def test_a_winner_that_needs_the_newer_release_says_so_beside_its_launch_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B at 0.3 req/s wins on one H100 at --max-model-len 34,560, a pool only
    vLLM 0.34's extensible KV cache makes: the launch line's header names the release it
    needs, as its caution says, and the length the caution names is the launch line's."""
    code, out, err = run_cli(capsys, "plan", "llama-3.1-70b", "--gpus", "h100", "--rate",
                             "0.3", *LOAD_70B[2:], *NARROW)
    assert code == 0, err
    lines = out.splitlines()
    caution = next(line for line in lines if "extensible KV cache is unchecked" in line)
    assert "so it needs vLLM 0.34 or later" in caution
    header = next(i for i, line in enumerate(lines) if line.startswith("run it with"))
    assert "needs vLLM 0.34 or later: see the caution" in lines[header]
    launch = lines[header + 1]
    length = int(launch.split("--max-model-len ")[1].split()[0])
    assert f"of {length:,} tokens" in caution and f"--max-model-len {length:,}" in caution


def test_needs_release_reads_the_caution_it_repeats() -> None:
    """The header's words come from a caution that says them, and only from one."""
    assert needs_release(("a caution of something else",)) == ""
    said = "...; so it needs vLLM 0.34 or later, its extensible KV cache on: ..."
    assert needs_release(("other", said)) == "needs vLLM 0.34 or later: see the caution"
