"""`ridgeline observe` as an SRE points it at a live engine: a hung engine (requests running,
the counters vLLM moves at every step standing still) reads as stalled, not as a queue to
raise a budget for; a batch pinned at one count with a queue behind it is the seats' latency
wall, not "neither — send more load"; a scrape PowerShell saved in UTF-16 is read; a
Prometheus server's query answer is refused for what it is."""

from __future__ import annotations

import contextlib
import gzip
import json
from pathlib import Path

import pytest

from ridgeline.errors import InputError
from ridgeline.observe import MAX_BYTES, fetch, read_source
from ridgeline.observe_metrics import STALL_WINDOW_S
from tests.conftest import run_cli
from tests.test_observe import serve
from tests.test_observe_page_forms import vllm_scrape

FIXTURES = Path(__file__).parent / "fixtures"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BASE = ("--model", "llama-3.1-8b", "--gpu", "h100")


def sglang_scrape(t: float, running: float, generated: float, realtime: bool) -> str:
    m = f'model_name="{MODEL}"'
    page = (f"# scrape_time {t}\n"
            f"sglang:num_running_reqs{{{m}}} {running}\n"
            f"sglang:num_queue_reqs{{{m}}} 0\n"
            f"sglang:token_usage{{{m}}} 0.4\n"
            f"sglang:prompt_tokens_total{{{m}}} {4 * generated}\n"
            f"sglang:generation_tokens_total{{{m}}} {generated}\n")
    if realtime:
        page += (f'sglang:realtime_tokens_total{{{m},mode="prefill_compute"}} {4 * generated}\n'
                 f'sglang:realtime_tokens_total{{{m},mode="decode"}} {generated}\n')
    return page


def observe_json(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> dict:
    code, out, err = run_cli(capsys, "observe", str(path), *BASE, *args, "--json")
    assert code == 0, err
    data: dict = json.loads(out)
    return data


# -- a hung engine ----------------------------------------------------------------------------


def test_a_vllm_window_without_a_step_while_requests_run_is_stalled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """32 running and 5 waiting at both readings of 60 s in which vLLM counted no token: the
    wall is "stalled" and the lever says what stands still and for how long — it read
    "latency: raise --max-num-batched-tokens", with a seat-cap caution, as if the engine
    served 32."""
    path = tmp_path / "hung.prom"
    path.write_text(vllm_scrape(1000, 32, 5, 51_200) + vllm_scrape(1060, 32, 5, 51_200))
    data = observe_json(capsys, path)
    assert data["wall"] == "stalled"
    assert "60 s" in data["lever"] and "vLLM's prompt and generation tokens" in data["lever"]
    assert not [c for c in data["cautions"] if "pinned" in c]
    assert read_source(str(path)).stalled_s == 60


def test_a_stall_needs_requests_at_every_reading_a_long_window_and_a_per_step_counter(
        tmp_path: Path) -> None:
    """No stall where the counters moved, where a reading ran nothing (an idle server), where
    the window is under STALL_WINDOW_S (a long prompt's prefill chunks), or where the
    counters move only as requests finish (SGLang without its realtime counter); SGLang's
    realtime counter standing still is one."""
    path = tmp_path / "page.prom"
    short = STALL_WINDOW_S / 2
    for text in (vllm_scrape(1000, 32, 5, 51_200) + vllm_scrape(1060, 32, 5, 60_000),
                 vllm_scrape(1000, 32, 5, 51_200) + vllm_scrape(1060, 0, 0, 51_200),
                 vllm_scrape(1000, 32, 5, 51_200) + vllm_scrape(1000 + short, 32, 5, 51_200),
                 sglang_scrape(1000, 32, 51_200, False) + sglang_scrape(1060, 32, 51_200, False)):
        path.write_text(text)
        assert read_source(str(path)).stalled_s is None
    path.write_text(sglang_scrape(1000, 32, 51_200, True) + sglang_scrape(1060, 32, 51_200, True))
    assert read_source(str(path)).stalled_s == 60


def test_llama_servers_decode_calls_standing_still_are_a_stall(tmp_path: Path) -> None:
    """llama-server counts its tokens as a slot is released, but each llama_decode() call as
    it runs (llamacpp:n_decode_total): 4 slots busy for 60 s without one is a stall; its
    token counters standing still alone (long requests) are none."""
    def page(t: float, decodes: float | None) -> str:
        return (f"# scrape_time {t}\nllamacpp:requests_processing 4\n"
                "llamacpp:requests_deferred 0\nllamacpp:prompt_tokens_total 20000\n"
                "llamacpp:tokens_predicted_total 50000\n"
                + (f"llamacpp:n_decode_total {decodes}\n" if decodes is not None else ""))

    path = tmp_path / "llama.prom"
    path.write_text(page(1000, 3000) + page(1060, 3000))
    assert read_source(str(path)).stalled_s == 60
    for later, decodes in ((3900, 3000), (None, None)):
        path.write_text(page(1000, decodes) + page(1060, later))
        assert read_source(str(path)).stalled_s is None


def test_one_hung_data_parallel_engine_is_named(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Two engines at 30 running each for 30 s, engine 0's generation counter moving, engine
    1's standing still: the summed counters move, so no stall of the server, but a caution
    names engine 1 — the mean rates had hidden it."""
    def page(t: float, generated: tuple[float, float]) -> str:
        lines = [f"# scrape_time {t}"]
        for engine, tokens in enumerate(generated):
            m = f'engine="{engine}",model_name="{MODEL}"'
            lines += [f"vllm:num_requests_running{{{m}}} 30",
                      f"vllm:num_requests_waiting{{{m}}} 0",
                      f"vllm:kv_cache_usage_perc{{{m}}} 0.4",
                      f"vllm:prompt_tokens_total{{{m}}} {4 * tokens}",
                      f"vllm:generation_tokens_total{{{m}}} {tokens}"]
        return "\n".join(lines) + "\n"

    path = tmp_path / "dp.prom"
    path.write_text(page(1000, (51_200, 48_000)) + page(1030, (78_200, 48_000)))
    obs = read_source(str(path))
    assert obs.stalled_s is None and obs.stalled_engines == ["engine 1"]
    data = observe_json(capsys, path)
    assert data["wall"] != "stalled"
    assert [c for c in data["cautions"] if c.startswith("engine 1 ran requests")]
    path.write_text(page(1000, (51_200, 48_000)) + page(1030, (78_200, 49_000)))
    assert read_source(str(path)).stalled_engines == []


def test_engines_far_apart_caution_the_gap_at_the_mean_batch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Engines at 10 and 60 running: the summed ITL histogram weighs engine 1's slower steps
    by its six times the tokens, so the prediction at the mean batch, 35, reads low with no
    model error (15 % on ridgeline's own steps): a caution says so; engines at 30 and 40 get
    none, nor does a single scrape, which sets no prediction against a measurement."""
    def page(t: float, batches: tuple[int, int], seconds: float) -> str:
        lines = [f"# scrape_time {t}"]
        for engine, b in enumerate(batches):
            m = f'engine="{engine}",model_name="{MODEL}"'
            tokens = 40 * b * seconds
            lines += [f"vllm:num_requests_running{{{m}}} {b}",
                      f"vllm:num_requests_waiting{{{m}}} 0",
                      f"vllm:kv_cache_usage_perc{{{m}}} 0.3",
                      f"vllm:prompt_tokens_total{{{m}}} {4 * tokens}",
                      f"vllm:generation_tokens_total{{{m}}} {tokens}",
                      f'vllm:request_success_total{{{m},finished_reason="stop"}} {tokens / 500}',
                      f'vllm:inter_token_latency_seconds_bucket{{{m},le="0.05"}} {tokens}',
                      f'vllm:inter_token_latency_seconds_bucket{{{m},le="+Inf"}} {tokens}',
                      f"vllm:inter_token_latency_seconds_sum{{{m}}} {tokens * 0.018}",
                      f"vllm:inter_token_latency_seconds_count{{{m}}} {tokens}"]
        return "\n".join(lines) + "\n"

    def apart(batches: tuple[int, int], times: tuple[float, ...]) -> list[str]:
        path = tmp_path / "dp.prom"
        path.write_text("".join(page(1000 + t, batches, 1 + t) for t in times))
        return [c for c in observe_json(capsys, path)["cautions"] if "far apart" in c]

    said = apart((10, 60), (0, 30))
    assert said and "the busiest 60.0 against a mean of 35.0" in said[0]
    assert not apart((30, 40), (0, 30))
    assert not apart((10, 60), (0,))


# -- a batch pinned by a seat cap ---------------------------------------------------------------


def test_a_pinned_batch_with_a_queue_is_the_seats_latency_wall(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Running 256 at both readings, 40 waiting at both, KV 50 %, the step's budget with room:
    the wall is latency and its lever raises the seats — it read "neither … it runs all it
    is sent … send more load" beside a caution naming the seat cap."""
    path = tmp_path / "pinned.prom"
    path.write_text(vllm_scrape(1000, 256, 40, 500_000, kv=0.5)
                    + vllm_scrape(1030, 256, 40, 545_000, kv=0.5))
    data = observe_json(capsys, path)
    assert [c for c in data["cautions"] if "--max-num-seqs 256" in c]
    assert data["wall"] == "latency"
    assert "pinned at 256" in data["lever"] and "raise --max-num-seqs" in data["lever"]
    assert "send more load" not in data["lever"]


# -- files as they are saved --------------------------------------------------------------------


def test_a_scrape_saved_in_utf16_reads_as_its_utf8_twin(tmp_path: Path) -> None:
    """Windows PowerShell 5.1's `>` writes UTF-16LE with a BOM: it was refused as "not a
    metrics page"; read, it gives what the UTF-8 file gives."""
    text = vllm_scrape(1000, 32, 0, 51_200) + vllm_scrape(1030, 32, 0, 60_000)
    utf8, utf16 = tmp_path / "utf8.prom", tmp_path / "utf16.prom"
    utf8.write_text(text, encoding="utf-8")
    utf16.write_bytes(text.encode("utf-16"))
    a, b = read_source(str(utf8)), read_source(str(utf16))
    assert (a.running, a.generation_tok_s, a.prompt_tok_s) == \
        (b.running, b.generation_tok_s, b.prompt_tok_s)


def test_a_prometheus_query_answer_is_refused_for_what_it_is(tmp_path: Path) -> None:
    """`curl prometheus:9090/api/v1/query?query=vllm:num_requests_running` saved: it was
    refused as no benchmark result; the message names the Prometheus server's answer."""
    path = tmp_path / "query.json"
    path.write_text(json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "vllm:num_requests_running"}, "value": [1000, "32"]}]}}))
    with pytest.raises(InputError, match="Prometheus server's query answer"):
        read_source(str(path))


def encoded_server(body: bytes, encoding: str) -> contextlib.AbstractContextManager[str]:
    """A /metrics on 127.0.0.1 that answers ``body`` under Content-Encoding ``encoding``,
    whatever the request accepts (as a compressing proxy may)."""
    return serve(lambda _: (200, "text/plain; version=0.0.4", body),
                 {"Content-Encoding": encoding})


def test_a_gzip_encoded_answer_is_inflated_and_other_encodings_refused() -> None:
    """A page answered gzip-encoded was refused as "not a metrics page": it reads as the plain
    page; cut short, past the size limit once inflated, or in an encoding ridgeline does not
    read, it is refused in one line naming why."""
    page = (FIXTURES / "vllm_metrics.txt").read_bytes()
    packed = gzip.compress(page)
    with encoded_server(packed, "gzip") as url:
        assert fetch(url) == page.decode("utf-8")
    with encoded_server(packed[: len(packed) // 2], "gzip") as url, \
            pytest.raises(InputError, match="cut short"):
        fetch(url)
    with encoded_server(gzip.compress(b"#" * (MAX_BYTES + 2)), "gzip") as url, \
            pytest.raises(InputError, match=r"larger than .* once inflated"):
        fetch(url)
    with encoded_server(b"\x00\x01", "br") as url, \
            pytest.raises(InputError, match="Content-Encoding br") as refusal:
        fetch(url)
    assert "\n" not in str(refusal.value)
