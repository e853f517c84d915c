"""`ridgeline observe` on values no engine reports, and on a deployment that cannot be the one
that produced the metrics: a one-line error naming the file and the metric, or a caution."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ridgeline.errors import InputError
from ridgeline.observe import read_source
from ridgeline.prometheus import parse_scrape
from ridgeline.reports.observe_verdict import same_model
from tests.conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
VLLM = FIXTURES / "vllm_metrics.txt"


def observe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "observe", *args)


@pytest.mark.parametrize(("sample", "metric", "shown"), [
    ('vllm:num_requests_running{engine="0"} 1e30', "vllm:num_requests_running", "1e+30"),
    ('vllm:num_requests_running{engine="0"} NaN', "vllm:num_requests_running", "nan"),
    ('vllm:num_requests_running{engine="0"} -4', "vllm:num_requests_running", "-4"),
    ('vllm:num_requests_running{engine="0"} inf', "vllm:num_requests_running", "inf"),
    ('vllm:num_requests_running 3\nvllm:num_requests_waiting -1', "vllm:num_requests_waiting",
     "-1"),
    ('vllm:num_requests_running 3\nvllm:kv_cache_usage_perc 5.0', "vllm:kv_cache_usage_perc",
     "5"),
    ('vllm:num_requests_running 3\nvllm:kv_cache_usage_perc -0.5', "vllm:kv_cache_usage_perc",
     "-0.5"),
    ('vllm:num_requests_running 3\nvllm:generation_tokens_total -Inf',
     "vllm:generation_tokens_total", "-inf"),
])
def test_a_value_no_engine_reports_is_an_error_naming_the_file_and_the_metric(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], sample: str, metric: str,
        shown: str) -> None:
    path = tmp_path / "scrape.txt"
    path.write_text(sample + "\n")
    code, out, err = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and out == ""
    assert err.startswith(f"ridgeline: error: {path}: {metric} is {shown};")
    assert len(err.splitlines()) == 1


def test_kv_usage_is_a_fraction_as_vllm_reports_it(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's kv_cache_usage_perc is 0–1 despite its name: 5.0 was shown as 'KV usage 500%'."""
    path = tmp_path / "scrape.txt"
    path.write_text(VLLM.read_text().replace("} 0.12", "} 5.0"))
    code, out, err = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and "500%" not in out
    assert "vllm:kv_cache_usage_perc is 5; it must be the fraction of the KV pool" in err


@pytest.mark.parametrize(("text", "value"), [
    ("inf", math.inf), ("-inf", -math.inf), ("+Inf", math.inf), ("Infinity", math.inf),
    ("INF", math.inf), ("1.5e3", 1500.0), (".5", 0.5), ("-4", -4.0),
])
def test_sample_values_are_read_as_prometheus_reads_them(text: str, value: float) -> None:
    scrape = parse_scrape(f'vllm:num_requests_running{{engine="0"}} {text}\n')
    assert scrape.value("vllm:num_requests_running") == value


@pytest.mark.parametrize("text", ["nan", "NaN", "Nan"])
def test_nan_in_any_case_is_a_sample(text: str) -> None:
    value = parse_scrape(f"vllm:num_requests_running {text}\n").value("vllm:num_requests_running")
    assert value is not None and math.isnan(value)


def test_a_bucket_edge_that_is_not_a_number_is_named() -> None:
    scrape = parse_scrape('x_bucket{le="soon"} 3\nx_count 3\n')
    with pytest.raises(InputError, match="x_bucket has le='soon'"):
        scrape.histogram("x")


def test_a_log_with_kv_usage_past_100_percent_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 50.0 "
                   "tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 500.0%\n")
    code, _, err = observe(capsys, str(log), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and f"{log}, line 1: GPU KV cache usage" in err and "0 to 1" in err


def test_a_bench_result_implying_an_absurd_batch_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((FIXTURES / "vllm_bench.json").read_text())
    data["output_throughput"] = 1e12  # × 28 ms: a running batch of 28 billion
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    code, _, err = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and "internal error" not in err and f"{path}: the running batch" in err


@pytest.mark.parametrize(("change", "names"), [
    ({"duration": -5}, "duration is -5"),
    ({"duration": 0}, "duration is 0"),
    ({"completed": -1}, "completed is -1"),
    ({"completed": "x"}, "completed must be a number"),
    ({"mean_ttft_ms": -5}, "mean_ttft_ms is -5"),
    ({"median_ttft_ms": 90, "p99_ttft_ms": 1}, "percentiles fall as they rise"),
])
def test_a_bench_result_field_no_benchmark_writes_is_refused_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, names: str) -> None:
    data = {**json.loads((FIXTURES / "vllm_bench.json").read_text()), **change}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    code, out, err = observe(capsys, str(path), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and names in err and not out and len(err.strip().splitlines()) == 1


def test_a_deployment_whose_pool_holds_no_sequence_gets_no_prediction_and_no_gpu_advice(
        capsys: pytest.CaptureFixture[str]) -> None:
    """405B in bf16 on one H100: the weights alone overflow it, so the 8B engine these metrics
    came from cannot have been this deployment (it used to predict 316 ms per token)."""
    code, out, _ = observe(capsys, str(VLLM), "--model", "llama-3.1-405b", "--gpu", "h100")
    assert code == 0
    assert "llama-3.1-405b does not fit on 1 x h100-sxm" in out and "wall: does not fit" in out
    assert "ridgeline predicts" not in out and "fewer GPUs" not in out
    code, out, _ = observe(capsys, str(VLLM), "--model", "llama-3.1-405b", "--gpu", "h100",
                           "--json")
    data = json.loads(out)
    assert data["wall"] == "does not fit" and data["engine_max_batch"] == 0
    assert data["predicted_itl_s"] is None and data["gap"] == {}


def test_a_context_past_the_models_positions_is_refused_as_such_not_blamed_on_the_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama 3 70B on 4 x H100 pools 469,344 tokens, but serves no sequence past its 8,192
    positions: 9,000 tokens a sequence is the engine's refusal (fit's words), not a pool that
    "holds no sequence of 9,000 tokens"."""
    args = (str(VLLM), "--model", "llama-3-70b", "--gpu", "h100", "-tp", "4", "--context",
            "9000")
    code, out, _ = observe(capsys, *args)
    assert code == 0 and "wall: does not fit" in out
    assert "vllm refuses --max-model-len 9,000, past llama-3-70b's 8,192 positions" in out
    assert "KV pool holds no sequence" not in out
    code, out, _ = observe(capsys, *args, "--json")
    data = json.loads(out)
    assert data["engine_max_batch"] == 0 and "8,192 positions" in data["refusal"]
    code, out, _ = observe(capsys, *args[:-1], "8000", "--json")  # within them: it fits
    assert json.loads(out)["refusal"] is None


def test_metrics_of_another_model_get_a_caution_naming_both(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = observe(capsys, str(VLLM), "--model", "llama-3.1-405b", "--gpu", "h100")
    caution = [line for line in out.splitlines() if line.startswith("caution:")]
    assert code == 0 and len(caution) == 1
    assert "'meta-llama/Llama-3.1-8B-Instruct'" in caution[0]
    assert "llama-3.1-405b (meta-llama/Llama-3.1-405B)" in caution[0]
    code, out, _ = observe(capsys, str(VLLM), "--model", "llama-3.1-405b", "--gpu", "h100",
                           "--json")  # the same caution leads --json's one list, unprefixed
    assert json.loads(out)["cautions"][0] == caution[0].removeprefix("caution: ")
    code, out, _ = observe(capsys, str(VLLM), "--model", "llama-3.1-8b", "--gpu", "h100",
                           "--json")
    data = json.loads(out)
    assert "caution" not in data
    assert not any(c.startswith("caution") or "labels its metrics" in c
                   for c in data["cautions"])
    assert data["model_names"] == ["meta-llama/Llama-3.1-8B-Instruct"]


@pytest.mark.parametrize(("label", "names", "same"), [
    ("meta-llama/Llama-3.1-8B-Instruct", ("llama-3.1-8b", "meta-llama/Llama-3.1-8B"), True),
    ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", ("llama-3.1-8b", "meta-llama/Llama-3.1-8B"),
     True),
    ("/models/Qwen3-8B/", ("qwen3-8b", "Qwen/Qwen3-8B"), True),
    ("meta-llama/Llama-3.1-8B-Instruct", ("llama-3.1-405b", "meta-llama/Llama-3.1-405B"), False),
    ("Qwen/Qwen3-8B", ("llama-3.1-8b", "meta-llama/Llama-3.1-8B"), False),
])
def test_model_names_are_compared_loosely(label: str, names: tuple[str, ...],
                                          same: bool) -> None:
    assert same_model(label, names) is same


def test_a_stats_line_with_a_malformed_number_names_its_line_and_field(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("INFO 01-01 engine started\nINFO 01-01 loggers.py:78] Avg prompt throughput: "
                   "1.2.3 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 1 reqs, "
                   "Waiting: 0 reqs, GPU KV cache usage: 1.0%\n")
    with pytest.raises(InputError, match=r"vllm.log, line 2: Avg prompt throughput reads "
                                         r"'1.2.3', not a number"):
        read_source(str(log))


def test_a_reported_pool_does_not_hide_weights_that_cannot_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 70B server at TP4 observed with --num-gpus forgotten: its live 960,000-token pool
    cannot exist on one H100, whose 79.2 GiB the weights' 131.4 GiB overflow. The deployment
    as described does not fit, and the report says --num-gpus or --weights are likely wrong,
    with no prediction and no gap (it used to predict 112.8 ms, +351 %)."""
    def at(t: float, n: float) -> str:
        m = 'engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"'
        return (f"# scrape_time {t}\n"
                f"vllm:num_requests_running{{{m}}} 64\n"
                f"vllm:num_requests_waiting{{{m}}} 0\n"
                f"vllm:kv_cache_usage_perc{{{m}}} 0.4\n"
                f"vllm:generation_tokens_total{{{m}}} {2560 * n}\n"
                f'vllm:inter_token_latency_seconds_bucket{{{m},le="+Inf"}} {2560 * n}\n'
                f"vllm:inter_token_latency_seconds_sum{{{m}}} {64 * n}\n"
                f"vllm:inter_token_latency_seconds_count{{{m}}} {2560 * n}\n"
                f'vllm:cache_config_info{{block_size="16",{m},num_gpu_blocks="60000"}} 1\n')

    path = tmp_path / "tp4.prom"
    path.write_text(at(1764500000, 100) + at(1764500010, 110))
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-70b", "--gpu", "h100")
    assert code == 0
    assert ("llama-3.1-70b does not fit on 1 x h100-sxm as described: the weights alone, "
            "131.4 GiB per GPU, exceed the card's 79.2 GiB") in out
    assert "--num-gpus or --weights are probably not what the server runs" in out
    assert "wall: does not fit" in out and "ridgeline predicts" not in out
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-70b", "--gpu", "h100",
                           "--json")
    data = json.loads(out)
    assert data["fits"] is False and data["engine_max_batch"] == 0
    assert data["predicted_itl_s"] is None and data["gap"] == {}
    code, out, _ = observe(capsys, str(path), "--model", "llama-3.1-70b", "--gpu", "h100",
                           "--num-gpus", "4", "--json")
    data = json.loads(out)
    assert data["fits"] is True and data["predicted_itl_s"] > 0 and "itl" in data["gap"]


def test_polling_faster_than_saved_scrapes_may_be_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Saved scrapes under a second apart are refused (a rate over them is noise): so is a
    poll at --interval 0.2, before any request is sent."""
    from ridgeline.observe import poll

    with pytest.raises(InputError, match="at least 1 s apart"):
        poll("http://127.0.0.1:9/metrics", duration_s=5, interval_s=0.2)
    with pytest.raises(InputError, match="at least 1 s apart"):
        read_source_scrapes("# scrape_time 1000\nvllm:num_requests_running 1\n"
                            "# scrape_time 1000.2\nvllm:num_requests_running 1\n")
    code, _, err = observe(capsys, "http://127.0.0.1:9/metrics", "--model", "llama-3.1-8b",
                           "--gpu", "h100", "--interval", "0.2")
    assert code == 2 and "--interval 0.2 s" in err and "cannot reach" not in err


def read_source_scrapes(text: str) -> None:
    from ridgeline.prometheus import split_scrapes

    split_scrapes(text)
