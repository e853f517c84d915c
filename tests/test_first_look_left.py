"""What a first look left (session 47's review): observe cautions an --engine the metric names
contradict, and a modelled pool's fill far over the counters' mean it keeps; its drafter group's
help is two lines; its gauges' percentiles interpolate as numpy and Prometheus do; validate's
signed column says it is a rate's; roofline's DOES NOT FIT has no KV term where no cache is
sized; moe's weights read are labelled as all the GPUs'; kv's sequence reads to four figures."""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
from pathlib import Path

import pytest

from ridgeline.cli import build_parser
from ridgeline.observation import stats
from ridgeline.reports.observe import FILL_OVER_MEAN
from tests.conftest import ROOT, run_cli

FIXTURE = str(ROOT / "tests" / "fixtures" / "vllm_metrics.txt")
OBSERVE = ["observe", FIXTURE, "--model", "llama-3.1-8b", "--gpu", "h100"]


def _families(path: str) -> set[str]:
    """The prefixes of a saved /metrics page's series (vllm:num_requests_running: vllm)."""
    with open(path, encoding="utf-8") as handle:
        return {line.split(":", 1)[0] for line in handle
                if line.strip() and not line.startswith("#") and ":" in line.split()[0]}


def test_observe_cautions_an_engine_the_metric_names_contradict(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every series of the fixture is vLLM's; --engine sglang sizes SGLang's pool on it, which
    a caution now says in the text and in --json's cautions; left to the metric names (or
    given vllm) no such caution."""
    families = _families(FIXTURE)
    assert families == {"vllm"}
    family = next(iter(families))
    code, out, _ = run_cli(capsys, *OBSERVE, "--engine", "sglang")
    said = [line for line in out.splitlines() if line.startswith("caution:")
            and f"{family}'s metrics" in line]
    assert code == 0 and len(said) == 1 and "sglang's pool" in said[0]
    data = json.loads(run_cli(capsys, *OBSERVE, "--engine", "sglang", "--json")[1])
    assert said[0].removeprefix("caution: ") in data["cautions"] and data["engine"] == "sglang"
    for flags in ([], ["--engine", "vllm"]):
        code, out, _ = run_cli(capsys, *OBSERVE, *flags)
        assert code == 0 and "'s metrics, but" not in out


def test_observe_cautions_a_modelled_fill_far_over_the_counters_mean_it_keeps(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The fixture's counters give 1,024 + 256 ÷ 2 = 1,152 tokens a request; its KV fill over
    the modelled pool gives usage × pool ÷ running (12 % × 483,520 ÷ 8 = 7,253 under vLLM 0.34), past
    FILL_OVER_MEAN × the mean. The counters' mean is kept (the pool is modelled, not
    reported), and a caution names both figures and which was used."""
    data = json.loads(run_cli(capsys, *OBSERVE, "--json")[1])
    assert data["pool_tokens_reported"] is None and data["context_len_source"].startswith("mean")
    fill = round(data["kv_usage"]["mean"] * data["pool_tokens_modelled"]
                 / data["running"]["mean"])
    context = data["context_len"]
    assert fill > FILL_OVER_MEAN * context
    said = [c for c in data["cautions"] if "KV cache's fill" in c]
    assert len(said) == 1
    assert f"gives {fill:,} tokens" in said[0] and f"{fill / context:,.1f}×" in said[0]
    assert f"counters' mean of {context:,}, which the figures above use" in said[0]
    assert f"--context {fill}" in said[0]
    # given --context, the fill's own caution speaks instead; given the fill, none
    given = json.loads(run_cli(capsys, *OBSERVE, "--context", str(context), "--json")[1])
    assert not any("which the figures above use" in c for c in given["cautions"])
    at_fill = json.loads(run_cli(capsys, *OBSERVE, "--context", str(fill), "--json")[1])
    assert not any("KV cache's fill" in c for c in at_fill["cautions"])


def test_observe_help_gives_the_drafter_group_in_two_lines_and_docs_the_rest() -> None:
    """The drafter group's description was a nine-line paragraph; it now fits two lines of
    a 100-column terminal and points at docs/observe.md, which keeps the detail it dropped."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    groups = [g for g in sub.choices["observe"]._action_groups
              if (g.title or "").startswith("the server's drafter")]
    assert len(groups) == 1
    title = groups[0].title or ""
    assert len(title) <= 2 * 100 and "docs/observe.md" in title
    docs = (ROOT / "docs" / "observe.md").read_text(encoding="utf-8")
    for detail in ("spec_accept_length", "spec_decode_acceptance_length",
                   "vllm:spec_decode_num_drafts_total", "--spec-draft-cost", "drafted steps"):
        assert detail in docs


@pytest.mark.parametrize("values", [[120.0, 128.0], [24.0, 38.0, 40.0],
                                    [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]])
def test_gauge_percentiles_interpolate_as_numpy_and_prometheus_do(values: list[float]) -> None:
    """Two scrapes of 120 and 128 running: p50 124 (the old nearest-rank pick said 128);
    each percentile is the inclusive (numpy linear) quantile of the readings."""
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    got = stats(values)
    assert got["p50"] == pytest.approx(statistics.median(values))
    assert got["p90"] == pytest.approx(deciles[8])
    assert got["max"] == max(values) and got["mean"] == pytest.approx(statistics.fmean(values))


def test_validate_names_its_signed_column_a_rate(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    """A TTFT row's error is predicted ÷ measured − 1 (under 0: faster than measured), its
    bias measured ÷ predicted − 1, the same miss as a rate: the header says "as a rate", and
    the two figures printed are the two ratios, opposite in sign."""
    source = ROOT / "validation" / "measurements.csv"
    with open(source, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    header, ttft = rows[0], next(r for r in rows[1:] if r[rows[0].index("metric")] == "ttft_ms")
    path = tmp_path / "ttft.csv"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([header, ttft])
    data = json.loads(run_cli(capsys, "validate", str(path), "--json")[1])
    row = data["rows"][0]
    error, rate = row["predicted"] / row["measured"] - 1, row["measured"] / row["predicted"] - 1
    assert (error < 0) != (rate < 0)
    code, out, _ = run_cli(capsys, "validate", str(path))
    lines = out.splitlines()
    heads = [line for line in lines if "median |err|" in line]
    # metric, engine, accelerator group, accelerator (one TTFT row: no in/out-of-fit table)
    assert code == 0 and len(heads) == 4 and all("median bias (as a rate)" in h for h in heads)
    assert f"{error:+.1%}" in lines[1] and any(
        line.split()[-1] == f"{rate:+.1%}" for line in lines if line.startswith("ttft_ms"))
    assert "bias, as a rate" in out


def test_roofline_does_not_fit_without_a_kv_term_where_it_sizes_no_cache(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-70B on one H100: roofline counts the weights alone, so its DOES NOT FIT reads
    weights > memory, short by their difference, with no "+ 0.0 GB of KV cache" term; decode,
    which sizes a cache, keeps its sum."""
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "h100", "--model", "llama-3.1-70b",
                           "--batch", "32")
    head = out.splitlines()[0]
    found = re.match(r"DOES NOT FIT: ([\d,.]+) GB of weights > ([\d,.]+) GB of memory, short by "
                     r"([\d,.]+) GB", head)
    assert code == 0 and found and "KV cache" not in head
    weights, memory, short = (float(x.replace(",", "")) for x in found.groups())
    assert short == pytest.approx(weights - memory, abs=0.051)
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-70b", "--gpu", "h100", "--batch", "32",
                           "--context", "8k")
    assert "GB of KV cache = " in out


def test_moe_labels_its_weights_read_as_all_the_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on 8 H200s at batch 64: the column's figure is the deployment's read, all
    eight GPUs together (its --json row), and its header says so; one GPU's header does not."""
    argv = ["moe", "deepseek-v3", "--gpu", "h200", "--batch", "64"]
    data = json.loads(run_cli(capsys, *argv, "--num-gpus", "8", "--json")[1])
    code, out, _ = run_cli(capsys, *argv, "--num-gpus", "8")
    header = next(line for line in out.splitlines() if line.startswith("batch "))
    row = next(line for line in out.splitlines() if line.startswith("64 "))
    assert code == 0 and data["num_gpus"] == 8
    assert header.endswith(f"weights read per step, all {data['num_gpus']} GPUs")
    assert row.endswith(f"{data['rows'][0]['weight_bytes_read'] / 1e9:,.1f} GB")
    one = run_cli(capsys, *argv)[1]
    assert next(line for line in one.splitlines()
                if line.startswith("batch ")).endswith("weights read per step")


def test_kv_gives_a_long_sequence_to_four_figures_as_its_other_lines(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B at 2M tokens: 2,097,152 × 128 KiB = 274.9 GB (256.0 GiB), to four
    figures as the DOES NOT FIT line's 274.9 GB, not 274.878 GB (256.000 GiB)."""
    argv = ["kv", "llama-3.1-8b", "--context", "2M", "--gpu", "h100"]
    size = json.loads(run_cli(capsys, *argv, "--json")[1])["bytes_per_sequence"]
    out = run_cli(capsys, *argv)[1]
    assert f"per sequence at 2,097,152: {size / 1e9:,.1f} GB ({size / 2**30:,.1f} GiB)\n" in out
    assert f"needs {size / 1e9:,.1f} GB" in out
