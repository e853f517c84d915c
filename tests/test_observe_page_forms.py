"""`ridgeline observe` on the forms a live engine's page and log take in the field: TensorRT-LLM's
reported pool and its names before the trtllm_ prefix, JSON-wrapped logs and HTTP error
bodies, other engines' logs, a quantized checkpoint or a cache snapshot named in model_name,
a running batch pinned by a seat cap, and llama-server's counters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.errors import InputError
from ridgeline.observe import read_source
from ridgeline.precision import check_weight_choice
from ridgeline.reports.observe_verdict import named_weights, same_model, served_name
from tests.conftest import run_cli

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BASE = ("--model", "llama-3.1-8b", "--gpu", "h100")


def observe_json(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> dict:
    code, out, err = run_cli(capsys, "observe", str(path), *BASE, *args, "--json")
    assert code == 0, err
    data: dict = json.loads(out)
    return data


# -- TensorRT-LLM's reported pool ------------------------------------------------------------


def trtllm_scrape(t: int, generated: float, requests: float, pool: str) -> str:
    """A trtllm-serve page: 61 running at 98 % KV use, its token counters, and ``pool``,
    the lines that state its pool."""
    m = f'engine_type="trtllm",model_name="{MODEL}"'
    return (f"# scrape_time {t}\n"
            f"trtllm_num_requests_running{{{m}}} 61\n"
            f"trtllm_num_requests_waiting{{{m}}} 5\n"
            f"trtllm_kv_cache_utilization{{{m}}} 0.98\n"
            f"trtllm_num_paused_requests{{{m}}} 3\n"
            f"trtllm_prompt_tokens_total{{{m}}} {4 * generated}\n"
            f"trtllm_generation_tokens_total{{{m}}} {generated}\n"
            f'trtllm_request_success_total{{{m},finished_reason="stop"}} {requests}\n'
            + pool.format(m=m))


CONFIG_INFO = 'trtllm_cache_config_info{{{m},block_size="32",num_gpu_blocks="2000"}} 1.0\n'
GAUGES = ("trtllm_kv_cache_max_blocks{{{m}}} 2000\n"
          "trtllm_kv_cache_tokens_per_block{{{m}}} 32\n")


@pytest.mark.parametrize("pool", [CONFIG_INFO, GAUGES], ids=["cache_config_info", "gauges"])
def test_tensorrt_llms_stated_pool_is_read_as_the_reported_pool(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], pool: str) -> None:
    """trtllm_cache_config_info (or max blocks × tokens per block) states 2,000 blocks of 32:
    the pool is the engine's 64,000 tokens, not the 464,320 modelled; the far-apart caution
    names TensorRT-LLM's memory flag, and no --context is suggested off the modelled pool's
    fill (98 % of 64,000 over 61 running is about the counters' mean, not 7× it)."""
    path = tmp_path / "trtllm.prom"
    path.write_text(trtllm_scrape(1000, 250_000, 1000, pool)
                    + trtllm_scrape(1010, 275_000, 1100, pool))
    obs = read_source(str(path))
    assert (obs.pool_tokens, obs.pool_block_size) == (2000 * 32, 32)
    data = observe_json(capsys, path)
    assert data["pool_tokens_reported"] == 2000 * 32 and data["pool_blocks_reported"] == 2000
    assert data["pool_tokens_modelled"] > 1.1 * data["pool_tokens_reported"]
    apart = [c for c in data["cautions"] if c.startswith("the engine reports a pool of 64,000")]
    assert apart and "--kv_cache_free_gpu_memory_fraction" in apart[0]
    assert not any("--context" in c and "prices the fill" in c for c in data["cautions"])
    held = 0.98 * data["pool_tokens_reported"] / 61
    assert data["context_len"] <= 2 * held  # the fill's context, or the counters' near it
    assert any("trtllm_num_paused_requests read up to 3" in n for n in data["notes"])


def test_tensorrt_llms_pool_labels_that_give_no_pool_are_noted(tmp_path: Path) -> None:
    """A cache_config_info whose num_gpu_blocks is 'None' gives no pool: noted, modelled."""
    pool = 'trtllm_cache_config_info{{{m},block_size="32",num_gpu_blocks="None"}} 1.0\n'
    path = tmp_path / "trtllm.prom"
    path.write_text(trtllm_scrape(1000, 250_000, 1000, pool)
                    + trtllm_scrape(1010, 275_000, 1100, pool))
    obs = read_source(str(path))
    assert obs.pool_tokens is None
    assert any(n.startswith("trtllm_cache_config_info: num_gpu_blocks='None'")
               for n in obs.notes)


def test_tensorrt_llm_names_without_the_prefix_are_named(tmp_path: Path) -> None:
    """trtllm-serve 1.0 to 1.2 exported request_success_total and its latency histograms
    without the trtllm_ prefix, and no running gauge: refused as TensorRT-LLM's page."""
    m = f'model_name="{MODEL}",engine_type="trtllm"'
    path = tmp_path / "old.prom"
    path.write_text(f'request_success_total{{{m},finished_reason="stop"}} 1000\n'
                    f"time_to_first_token_seconds_count{{{m}}} 1000\n"
                    f"time_to_first_token_seconds_sum{{{m}}} 60\n")
    with pytest.raises(InputError, match="TensorRT-LLM's page without the trtllm_ prefix"):
        read_source(str(path))


# -- files observe does not read, named ------------------------------------------------------

STATS = ("Engine 000: Avg prompt throughput: 2048.0 tokens/s, Avg generation throughput: "
         "612.4 tokens/s, Running: 24 reqs, Waiting: 0 reqs, GPU KV cache usage: 31.2%")


@pytest.mark.parametrize("text, said", [
    (json.dumps({"log": f"INFO 11-29 12:00:01 [loggers.py:123] {STATS}\n", "stream": "stdout",
                 "time": "2026-11-29T12:00:01.1Z"}) + "\n", "a Docker json-file log"),
    (json.dumps({"asctime": "2026-11-29 12:00:01", "levelname": "INFO", "message": STATS})
     + "\n", "a JSON-lines log (vLLM's stats lines inside each line's 'message' field)"),
    ('{"error":{"code":501,"message":"This server does not support metrics endpoint. Start '
     'it with `--metrics`","type":"not_supported_error"}}', "start llama-server with --metrics"),
    ('{"detail":"Not Found"}', "an HTTP error body ('Not Found')"),
    ('{"object":"error","message":"The model `x` does not exist.","type":"NotFoundError",'
     '"code":404}', "an HTTP error body (404"),
    ("[2026-11-29 12:00:01 TP0] Decode batch. #running-req: 120, #token: 50123, token usage: "
     "0.42, cuda graph: True, gen throughput (token/s): 3012.45, #queue-req: 0, \n",
     "an SGLang server log"),
    ("srv  update_slots: all slots are idle\nslot launch_slot_: id  0 | task 0 | processing "
     "task\n", "a llama-server log"),
], ids=["docker", "jsonlogger", "llama-501", "fastapi-404", "openai-error", "sglang", "llama"])
def test_a_file_observe_does_not_read_is_named(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               text: str, said: str) -> None:
    path = tmp_path / "input.txt"
    path.write_text(text)
    code, out, err = run_cli(capsys, "observe", str(path), *BASE)
    assert code == 2 and not out
    assert said in err and len(err.strip().splitlines()) == 1
    assert "benchmark result (no output_throughput" not in err


def test_a_benchmark_result_and_a_vllm_log_are_still_read(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    fixtures = Path(__file__).parent / "fixtures"
    for name in ("vllm_bench.json", "vllm_server.log"):
        assert observe_json(capsys, fixtures / name)["kind"] in ("bench", "log")


# -- model_name: a quantized checkpoint, a cache snapshot --------------------------------------


def vllm_scrape(t: int, running: float, waiting: float, generated: float, model: str = MODEL,
                kv: float = 0.3) -> str:
    m = f'engine="0",model_name="{model}"'
    return (f"# scrape_time {t}\n"
            f"vllm:num_requests_running{{{m}}} {running}\n"
            f"vllm:num_requests_waiting{{{m}}} {waiting}\n"
            f"vllm:kv_cache_usage_perc{{{m}}} {kv}\n"
            f"vllm:prompt_tokens_total{{{m}}} {4 * generated}\n"
            f"vllm:generation_tokens_total{{{m}}} {generated}\n"
            f'vllm:request_success_total{{{m},finished_reason="stop"}} {generated / 256}\n')


def test_a_quantized_checkpoint_in_model_name_asks_for_its_weights(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """model_name '…-FP8' beside the 16-bit default: a caution giving --weights fp8, gone
    once it is given."""
    model = "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"
    path = tmp_path / "fp8.prom"
    path.write_text(vllm_scrape(1000, 32, 0, 51_200, model)
                    + vllm_scrape(1010, 32, 0, 102_400, model))
    cautions = observe_json(capsys, path)["cautions"]
    assert [c for c in cautions if "--weights fp8" in c and model in c]
    assert not [c for c in observe_json(capsys, path, "--weights", "fp8")["cautions"]
                if "--weights" in c]


@pytest.mark.parametrize("label", [
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
    "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8",
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "nvidia/Llama-3.1-8B-Instruct-NVFP4",
    "nvidia/DeepSeek-R1-FP4", "someone/Llama-3.1-8B-MXFP4", "unsloth/llama-3-8b-bnb-4bit",
    "neuralmagic/Meta-Llama-3.1-8B-Instruct-W8A8-FP8"])
def test_each_quantized_name_gives_a_weight_format_the_flag_takes(label: str) -> None:
    named = named_weights(label)
    assert named is not None and named[1].lower() in label.lower()
    check_weight_choice(named[0])  # --weights takes it


def test_a_16_bit_name_gives_no_weight_format() -> None:
    assert named_weights(MODEL) is None and named_weights("/models/llama-3.1-8b") is None


def test_a_hugging_face_snapshot_path_is_compared_by_its_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM serving a cache snapshot labels its metrics with the folder: the model is the
    repository's name in it, not the commit's hash."""
    snap = ("/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/"
            "0e9e39f249a16976918f6564b8830bc894c89659")
    assert served_name(snap) == "Llama-3.1-8B-Instruct"
    assert same_model(snap, ("llama-3.1-8b", MODEL))
    assert not same_model(snap.replace("8B", "70B"), ("llama-3.1-8b", MODEL))
    path = tmp_path / "snap.prom"
    path.write_text(vllm_scrape(1000, 32, 0, 51_200, snap) + vllm_scrape(1010, 32, 0, 102_400,
                                                                           snap))
    assert not [c for c in observe_json(capsys, path)["cautions"] if "model_name=" in c]
    other = snap.replace("8B", "70B")
    path.write_text(vllm_scrape(1000, 32, 0, 51_200, other) + vllm_scrape(1010, 32, 0, 102_400,
                                                                            other))
    assert [c for c in observe_json(capsys, path)["cautions"] if "model_name=" in c]


# -- a running batch pinned by a seat cap -----------------------------------------------------


def test_a_batch_pinned_with_a_queue_names_the_seat_cap(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """Running 256 at both readings, 50 and 60 waiting, KV 40 %: a caution to give
    --max-num-seqs 256; given, the wall is the seats. A batch that moves (250, 256) is none."""
    path = tmp_path / "pinned.prom"
    path.write_text(vllm_scrape(1000, 256, 50, 500_000, kv=0.4)
                    + vllm_scrape(1010, 256, 60, 525_600, kv=0.4))
    data = observe_json(capsys, path)
    pinned = [c for c in data["cautions"] if "--max-num-seqs 256" in c]
    assert pinned and data["wall"] != "capacity"
    given = observe_json(capsys, path, "--max-num-seqs", "256")
    assert not [c for c in given["cautions"] if "pinned" in c]
    assert given["wall"] == "latency" and "raise --max-num-seqs" in given["lever"]
    path.write_text(vllm_scrape(1000, 250, 50, 500_000, kv=0.4)
                    + vllm_scrape(1010, 256, 60, 525_600, kv=0.4))
    assert not [c for c in observe_json(capsys, path)["cautions"] if "pinned" in c]


# -- llama-server's counters ------------------------------------------------------------------


def test_llama_servers_note_says_when_each_counter_moves(tmp_path: Path) -> None:
    """Prompt tokens are counted once the prompt is evaluated (server_metrics.on_prompt_eval),
    generated ones at the slot's release: the note says so, not 'when it finishes' for both."""
    def scrape(t: int, prompt: int, predicted: int) -> str:
        return (f"# scrape_time {t}\n"
                f"llamacpp:prompt_tokens_total {prompt}\nllamacpp:tokens_predicted_total "
                f"{predicted}\nllamacpp:tokens_predicted_seconds_total {predicted / 50}\n"
                "llamacpp:requests_processing 4\nllamacpp:requests_deferred 0\n")

    path = tmp_path / "llama.prom"
    path.write_text(scrape(1000, 20_000, 50_000) + scrape(1010, 24_000, 54_000))
    notes = read_source(str(path)).notes
    said = [n for n in notes if n.startswith("llama-server adds a request's")]
    assert said and "once the prompt is evaluated" in said[0]
