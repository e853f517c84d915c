"""Workload inputs a user can get wrong: traces, length specs, shared prefixes, arrivals.

Each is refused with a one-line InputError naming the problem, never a hang or a crash.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from ridgeline.cli import main
from ridgeline.errors import InputError
from ridgeline.sim.workload import MAX_LENGTH_TOKENS, Workload, gaps, length_sampler, read_trace

HEADER = "arrival_s,prompt_tokens,output_tokens\n"


@pytest.mark.parametrize("row", ["nan,100,10", "inf,200,20", "-inf,200,20", "-5,100,10",
                                 "tomorrow,100,10"])
def test_a_trace_time_that_is_not_finite_or_is_negative_is_refused_naming_its_line(
        tmp_path: Path, row: str) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "0,100,10\n" + row + "\n")
    with pytest.raises(InputError, match=r"t\.csv, line 3: arrival time"):
        read_trace(str(trace))


def test_trace_rows_at_one_instant_keep_the_files_order(tmp_path: Path) -> None:
    """Requests are numbered by arrival time, and rows arriving at the same instant in the
    order the file gives them (an export's ids replay as its rows), not by their lengths."""
    rows = [(1.0, 10, 10), (0.0, 8000, 20), (0.0, 100, 50), (0.0, 100, 5)]
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{t},{p},{o}\n" for t, p, o in rows))
    read = [(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in read_trace(str(trace))]
    in_time = sorted(rows, key=lambda row: row[0])
    assert read == [(i, t, p, o) for i, (t, p, o) in enumerate(in_time)]
    assert read[0][2:] == (8000, 20)  # the file's first row at t = 0 is request 0


@pytest.mark.parametrize("row", ["0,0,10", "0,-100,10", "0,100,0", "0,1e12,10", "0,100.5,10",
                                 "0,inf,10", "0,nan,10", "0,x,10", "0,100"])
def test_a_trace_token_count_that_is_not_a_sane_whole_number_is_refused(
        tmp_path: Path, row: str) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "0,100,10\n\n" + row + "\n")  # a blank line still counts
    with pytest.raises(InputError, match=r"line 4: ((prompt|output) tokens|no output_tokens)"):
        read_trace(str(trace))


def test_a_trace_row_with_more_values_than_the_header_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + "0,100,10,7\n")
    with pytest.raises(InputError, match=r"line 2: more values than the 3 columns"):
        read_trace(str(trace))
    trace.write_text(HEADER + "0,100,10,\n0.5,200,20,\n")  # a spreadsheet's trailing comma
    assert [r.prompt_tokens for r in read_trace(str(trace))] == [100, 200]


def test_a_jsonl_trace_with_nan_or_infinity_is_refused_naming_its_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}\n'
                     '{"arrival_s": NaN, "prompt_tokens": 10, "output_tokens": 2}\n')
    with pytest.raises(InputError, match="line 2: arrival time"):
        read_trace(str(trace))
    trace.write_text('{"arrival_s": 0, "prompt_tokens": Infinity, "output_tokens": 2}\n')
    with pytest.raises(InputError, match="line 1: prompt tokens"):
        read_trace(str(trace))


def test_simulate_refuses_a_nan_trace_in_one_line_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "nan.csv"
    trace.write_text(HEADER + "nan,100,10\ninf,200,20\n")
    code = main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", str(trace)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "line 2: arrival time must be seconds from 0 to 1e+11" in err


@pytest.mark.parametrize("spec", [
    "zipf:1.1,1000000000", "zipf:nan,100", "zipf:0,100", "zipf:1e9,100", "zipf:1.1,inf",
    "uniform:1,1e12", "uniform:nan,5", "uniform:-5,5", "uniform:5,1",
    "normal:512,inf", "normal:nan,1", "normal:-5,3", "normal:1e300,1", "normal:512,-1",
    "normal:100,500",
    "lognormal:512,1e300", "lognormal:inf,1", "lognormal:0.5,1", "lognormal:512,-1",
    "0", "-3", "99999999999", "foo:1,2", "uniform:1,2,3"])
def test_a_length_spec_with_a_bad_parameter_is_refused(spec: str) -> None:
    with pytest.raises(InputError, match="input length"):
        length_sampler(spec, "input length")


@pytest.mark.parametrize("line", ["nan", "inf", "-4", "0", "99999999999"])
def test_a_lengths_file_with_a_bad_number_is_refused(tmp_path: Path, line: str) -> None:
    lengths = tmp_path / "lengths.txt"
    lengths.write_text(f"100\n{line}\n")
    with pytest.raises(InputError, match="lengths"):
        length_sampler(f"file:{lengths}", "input length")


@pytest.mark.parametrize(("s", "n"), [(1.2, 4096), (1.0, 50), (2.0, 5), (0.5, 20)])
def test_zipf_draws_follow_k_to_the_minus_s(s: float, n: int) -> None:
    """zipf:1.2,4096 draws 1 with probability 1 ÷ Σ k^−1.2 = 0.215 (the docstring's number)."""
    draw = length_sampler(f"zipf:{s},{n}", "x")
    rng = random.Random(7)
    count = 50_000
    seen = Counter(draw(rng) for _ in range(count))
    total = sum(k**-s for k in range(1, n + 1))
    assert min(seen) >= 1 and max(seen) <= n
    for k in range(1, min(n, 10) + 1):
        assert seen[k] / count == pytest.approx(k**-s / total, abs=0.01)


def test_zipf_up_to_ten_million_tokens_draws_at_once() -> None:
    draw = length_sampler(f"zipf:1.05,{MAX_LENGTH_TOKENS}", "x")  # no 10-million-entry table
    rng = random.Random(0)
    drawn = [draw(rng) for _ in range(2000)]
    assert min(drawn) == 1 and max(drawn) <= MAX_LENGTH_TOKENS
    assert max(drawn) > 1000  # the tail is there


@pytest.mark.parametrize("spec", ["lognormal:512,10", "normal:9000000,5000000"])
def test_wide_distributions_are_clipped_to_the_length_cap(spec: str) -> None:
    draw = length_sampler(spec, "x")
    rng = random.Random(1)
    drawn = [draw(rng) for _ in range(5000)]
    assert min(drawn) >= 1 and max(drawn) == MAX_LENGTH_TOKENS


def test_a_shared_prefix_is_part_of_the_prompt_never_added_to_it() -> None:
    """--input-len 500 --prefix-len 1000: prompts stay 500 tokens, sharing all but the last."""
    fixed = list(Workload(30, "500", "10", prefix_groups=3, prefix_len=1000))
    assert {(r.prompt_tokens, r.prefix_tokens) for r in fixed} == {(500, 499)}
    drawn = list(Workload(300, "uniform:100,2000", "10", prefix_groups=3, prefix_len=1000))
    assert max(r.prompt_tokens for r in drawn) <= 2000
    assert all(r.prefix_tokens == min(1000, r.prompt_tokens - 1) for r in drawn)
    assert any(r.prefix_tokens == 1000 for r in drawn) and any(r.prefix_tokens < 1000
                                                               for r in drawn)


def test_a_one_token_prompt_shares_nothing() -> None:
    (r,) = Workload(1, "1", "5", prefix_groups=2, prefix_len=64)
    assert (r.prompt_tokens, r.prefix_group, r.prefix_tokens) == (1, -1, 0)


@pytest.mark.parametrize(("groups", "length", "message"), [
    (0, 1000, "needs groups"), (3, 0, "need the length"), (3, 20_000_000, "at most")])
def test_a_prefix_length_without_groups_or_groups_without_one_is_refused(
        groups: int, length: int, message: str) -> None:
    with pytest.raises(InputError, match=message):
        next(iter(Workload(5, prefix_groups=groups, prefix_len=length)))


@pytest.mark.parametrize(("kind", "rate", "burstiness"), [
    ("gamma", 1.0, 1e-200), ("gamma", 1.0, 1e300), ("gamma", 1.0, float("nan")),
    ("poisson", 1e-300, 1.0), ("poisson", float("nan"), 1.0), ("constant", 0.0, 1.0)])
def test_arrivals_with_absurd_rates_or_burstiness_are_refused(
        kind: str, rate: float, burstiness: float) -> None:
    with pytest.raises(InputError, match=r"rate|burstiness"):
        gaps(kind, rate, burstiness)


def test_a_trace_header_with_spaces_after_its_commas_is_read(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s, prompt_tokens, output_tokens\n0, 100, 10\n")
    assert [r.prompt_tokens for r in read_trace(str(trace))] == [100]
    trace.write_text("when,prompt,out\n0,100,10\n")
    with pytest.raises(InputError, match="its columns: when, prompt, out"):
        read_trace(str(trace))


@pytest.mark.parametrize("burstiness", [0.5, 4.0])
def test_burstiness_is_the_gamma_shape_vllm_bench_serve_takes(burstiness: float) -> None:
    """A value copied from `vllm bench serve --burstiness` gives the same traffic: below 1
    burstier than Poisson (coefficient of variation 1/√b), at the same mean rate."""
    import random
    import statistics

    draw, rng = gaps("gamma", 5.0, burstiness), random.Random(7)
    sample = [draw(rng) for _ in range(40_000)]
    mean = statistics.fmean(sample)
    assert mean == pytest.approx(1 / 5.0, rel=0.03)
    assert statistics.pstdev(sample) / mean == pytest.approx(burstiness ** -0.5, rel=0.05)


def test_a_header_only_trace_names_the_columns_it_lacks_or_its_missing_rows(
        tmp_path: Path) -> None:
    """A header alone said only "no trace rows" (an audit found it): with wrong columns it
    names them, as a trace with one row does; with the right ones it says the rows are
    missing."""
    wrong, right = tmp_path / "wrong.csv", tmp_path / "right.csv"
    wrong.write_text("a,b,c\n")
    right.write_text("arrival_s,prompt_tokens,output_tokens\n")
    with pytest.raises(InputError, match=r"no column among arrival_s.*its columns: a, b, c"):
        read_trace(str(wrong))
    with pytest.raises(InputError, match="a header and no trace rows under it"):
        read_trace(str(right))


def test_a_normal_spec_mostly_under_one_token_says_its_mean_would_move() -> None:
    """normal:100,500 draws under one token 42 % of the time: clipped, its mean is ~250."""
    with pytest.raises(InputError, match="42% of the time"):
        length_sampler("normal:100,500", "input length")
    assert length_sampler("normal:500,128", "input length") is not None  # 0.01 % clipped


def test_a_normal_spec_just_past_the_clipped_limit_prints_past_it() -> None:
    """normal:164,100 draws under one token 5.05 % of the time, past MAX_CLIPPED_SHARE (5 %):
    the refusal had said "5% of the time", the limit itself."""
    import math

    from ridgeline.sim.workload import MAX_CLIPPED_SHARE

    below = 0.5 * (1 + math.erf((0.5 - 164) / (100 * math.sqrt(2))))
    assert below > MAX_CLIPPED_SHARE and round(below, 2) == MAX_CLIPPED_SHARE
    with pytest.raises(InputError) as refused:
        length_sampler("normal:164,100", "input length")
    shown = float(str(refused.value).split("draws under one token ")[1].split("%")[0])
    assert shown > MAX_CLIPPED_SHARE * 100 and shown == pytest.approx(below * 100, abs=0.01)


def test_a_fixed_length_reads_as_the_other_counts_do() -> None:
    """--max-model-len took 8k and --input-len refused 2k: both read 2k as 2,000 and 2K as
    2,048 now."""
    import random

    rng = random.Random(0)
    assert length_sampler("2k", "input length")(rng) == 2000
    assert length_sampler("2K", "input length")(rng) == 2048
    with pytest.raises(InputError, match="'2x' is not a length"):
        length_sampler("2x", "input length")


def test_a_trace_slower_than_the_rate_floor_is_refused_as_that_rate_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """plan takes a trace's mean rate as its load: two requests 10^8 s apart are 10^-8 req/s,
    which --rate refuses (under MIN_RATE); the trace had been planned, at $8 billion per
    million tokens (the GPU's hour over almost no output). (10^9 s reads as a unix time
    beside a 0, refused as a mixed clock: test_trace_clocks.)"""
    from ridgeline.serving_load import Load
    from ridgeline.sim.workload import MIN_RATE

    span_s = 1e8
    assert 1 / span_s < MIN_RATE
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + f"0,500,100\n{span_s:.0f},500,100\n")
    with pytest.raises(InputError, match=r"t\.csv: 2 requests over 100,000,000 s are 1e-08"):
        Load.from_trace(str(trace))
    assert main(["plan", "llama-3.1-8b", "--trace", str(trace), "--slo-ttft-ms", "500",
                 "--slo-tpot-ms", "50", "--gpus", "h100", "--workers", "1"]) == 2
    assert "under the 1e-06 req/s" in capsys.readouterr().err
    (tmp_path / "ok.csv").write_text(HEADER + "0,500,100\n10,500,100\n")  # 0.1 req/s: kept
    assert Load.from_trace(str(tmp_path / "ok.csv")).rate_req_s == pytest.approx(0.1)


@pytest.mark.parametrize(("spec", "meant"), [("lognormall:1000,0.8", "lognormal"),
                                             ("unifrom:128,1024", "uniform"),
                                             ("Uniform:128,1024", "uniform"),
                                             ("fiel:lengths.txt", "file"),
                                             ("zipff:1.2,4096", "zipf")])
def test_a_misspelt_length_spec_names_the_spec_it_is_a_slip_from(spec: str, meant: str) -> None:
    """'fiel:lengths.txt' read as bad numbers, the others as no spec at all, without a word
    of the name each is a slip from (catalog.nearest_spelling)."""
    with pytest.raises(InputError, match=f"did you mean {meant}:") as caught:
        length_sampler(spec, "input length")
    assert "bad numbers" not in str(caught.value)
    with pytest.raises(InputError) as plain:  # a name like none of them: no guess
        length_sampler("poisson:3,4", "input length")
    assert "did you mean" not in str(plain.value)


def test_a_misspelt_dataset_name_names_random(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import refused_line

    for name, slip in (("randon", True), ("sharegpt", False)):
        err = refused_line(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "1",
                           "--dataset-name", name)
        assert ("did you mean random?" in err) == slip
