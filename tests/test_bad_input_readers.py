"""Bad input (audit, round 2): the readers of observe's metrics, a --trace, a GGUF and every
user file refuse what they cannot read in one line, exit 2, rather than print a number from it
or wait on it."""

from __future__ import annotations

import gzip
import json
import lzma
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ridgeline.errors import InputError
from ridgeline.observe import fetch
from tests.conftest import run_cli
from tests.test_gguf_model import ARRAY, STRING, _arch_keys, write_gguf

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OBSERVE = ("observe", "--model", "llama-3.1-8b", "--gpu", "h100")
ITL = "vllm:inter_token_latency_seconds"


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Exit 2, nothing on stdout, one line on stderr and no traceback; the line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def vllm_scrape(tmp_path: Path, drop: str = "", name: str = "m.txt") -> str:
    """The vLLM fixture scrape without its lines that match ``drop``."""
    lines = (FIXTURES / "vllm_metrics.txt").read_text("utf-8").splitlines()
    path = tmp_path / name
    path.write_text("\n".join(x for x in lines if not (drop and re.search(drop, x))) + "\n")
    return str(path)


# -- observe: a histogram's parts, two engines in one scrape ---------------------------------
def test_a_histogram_without_its_sum_is_refused_not_read_as_a_mean_of_0_ms(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A scrape cut after the ITL buckets (no _sum, no _count) printed 'ITL/TPOT mean 0.0 ms'
    beside percentiles from the buckets, exit 0."""
    said = refused(capsys, *OBSERVE, vllm_scrape(tmp_path, drop=f"^{ITL}_sum"))
    assert f"{ITL}_bucket has no {ITL}_sum beside it" in said and "cut short" in said


def test_a_histogram_counted_by_neither_inf_bucket_nor_count_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Buckets holding 25,500 observations, no +Inf bucket and no _count: read as a count of 0,
    'observed no request since the server started', exit 0."""
    said = refused(capsys, *OBSERVE,
                   vllm_scrape(tmp_path, drop=f'^{ITL}_count|^{ITL}_bucket.*le="\\+Inf"'))
    assert f'{ITL}_bucket has no le="+Inf" bucket and no {ITL}_count' in said
    # either alone still counts them, as before
    code, out, _ = run_cli(capsys, *OBSERVE, vllm_scrape(tmp_path, drop=f"^{ITL}_count"))
    assert code == 0 and "ITL/TPOT    mean 18.0 ms" in out


def test_two_engines_metrics_in_one_scrape_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's scrape and SGLang's saved into one file were read as vLLM's, SGLang's model name
    cautioned as the engine's, exit 0."""
    sglang = (FIXTURES / "sglang_metrics.txt").read_text("utf-8").split("# scrape_time")[1]
    path = tmp_path / "both.txt"
    path.write_text((FIXTURES / "vllm_metrics.txt").read_text("utf-8")
                    + sglang.split("\n", 1)[1])
    said = refused(capsys, *OBSERVE, str(path))
    assert ("one scrape holds vllm:num_requests_running and sglang:num_running_reqs: two "
            "engines' metrics; observe reads one server's scrape at a time") in said


@contextmanager
def trickling_server() -> Iterator[str]:
    """An HTTP server that sends its headers, then a comment line every 0.1 s for a minute."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    stop = threading.Event()

    def run() -> None:
        client, _ = listener.accept()
        try:
            client.recv(4096)
            client.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
            for _ in range(600):
                if stop.is_set():
                    break
                client.sendall(b"# x\n")
                time.sleep(0.1)
        except OSError:  # the client hung up at its deadline
            pass
        finally:
            client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    finally:
        stop.set()
        listener.close()


def test_a_url_that_trickles_its_answer_is_cut_at_the_deadline() -> None:
    """read(65536) waited for 64 KiB: 4 bytes every 0.1 s held observe for half an hour past
    its 5 s deadline, which it checked only between reads."""
    start = time.monotonic()
    with trickling_server() as url, pytest.raises(InputError) as refusal:
        fetch(url, timeout_s=1.0)
    assert time.monotonic() - start < 10
    assert str(refusal.value) == f"{url}: the response took longer than 1 s"  # not re-wrapped


# -- compressed files --------------------------------------------------------------------------
def test_a_gzipped_file_is_named_as_gzip_by_every_reader(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A .gz trace, measurements CSV or accelerator record was refused as "'utf-8' codec
    can't decode byte 0x8b in position 1"; a compressed scrape as 'not a metrics page'
    (observe now inflates a gzip one: test_observe_followups; an xz one is still refused)."""
    def gz(name: str, text: bytes) -> str:
        path = tmp_path / name
        path.write_bytes(gzip.compress(text))
        return str(path)

    trace = gz("trace.csv.gz", b"arrival_s,prompt_tokens,output_tokens\n0,100,50\n")
    assert "trace.csv.gz (gzip-compressed: decompress it first)" in refused(
        capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", trace)
    rows = gz("rows.csv", (Path(__file__).resolve().parent.parent
                           / "validation/measurements.csv").read_bytes())
    assert "rows.csv is not a readable CSV file (gzip-compressed: decompress it first)" in \
        refused(capsys, "validate", rows)
    card = gz("card.json", b"{}")
    assert "card.json is not an accelerator JSON file (gzip-compressed" in refused(
        capsys, "hardware", "--gpu-file", card)
    scrape = tmp_path / "metrics.txt"  # observe inflates a gzip scrape (test_observe_gzip)
    scrape.write_bytes(lzma.compress((FIXTURES / "vllm_metrics.txt").read_bytes()))
    assert "metrics.txt is xz-compressed: decompress it first" in refused(
        capsys, *OBSERVE, str(scrape))


# -- a trace's times -----------------------------------------------------------------------------
def test_a_trace_mixing_dates_and_seconds_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An Azure trace with one row in seconds: 5 s (1970) and 2023-11-16 were replayed 53 years
    apart, exit 0."""
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.68,4808,10\n5,3180,8\n")
    said = refused(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--trace", str(path))
    assert ("azure.csv, line 3: arrival time '5' is seconds, but line 2's is a date: a trace "
            "writes every time one way") in said


# -- a GGUF's head size --------------------------------------------------------------------------
def test_a_gguf_whose_heads_do_not_divide_its_width_is_refused_not_floored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """embedding_length 64 over 3 heads, no key_length: read as head_dim 21 (63 of 64 wide),
    exit 0; a config.json of the same shape is refused."""
    metadata = [("general.architecture", STRING, "llama"),
                *_arch_keys("llama", block_count=2, context_length=4096, embedding_length=64,
                            feed_forward_length=128, attention__head_count=3,
                            attention__head_count_kv=1),
                ("tokenizer.ggml.tokens", ARRAY, (STRING, [f"t{i}" for i in range(100)]))]
    path = write_gguf(tmp_path / "odd.gguf", metadata, [])
    said = refused(capsys, "model", str(path))
    assert ("llama.embedding_length (64) is not a multiple of llama.attention.head_count (3) "
            "and llama.attention.key_length is not given") in said


# -- a profile file's engine ---------------------------------------------------------------------
def test_a_profile_filed_under_another_engine_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's fitted profile pasted under "vllm" priced vLLM's steps with SGLang's fit,
    exit 0; an engine the file names that is none was refused without the file's name."""
    bundled = json.loads((Path(__file__).resolve().parent.parent
                          / "src/ridgeline/data/profiles.json").read_text("utf-8"))["engines"]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"engines": {"vllm": bundled["sglang"]}}))
    said = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--profile", str(path))
    assert "mine.json: the profile under 'vllm' says \"engine\": 'sglang'; which engine" in said
    path.write_text(json.dumps({"engines": {"vllmm": bundled["vllm"]}}))
    said = refused(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--profile", str(path))
    assert "mine.json: unknown engine 'vllmm'" in said
    path.write_text(json.dumps({"engines": {"sglang": bundled["sglang"]}}))  # its own: read
    assert run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang",
                   "--profile", str(path))[0] == 0


# -- a benchmark result's latencies ----------------------------------------------------------
@pytest.mark.parametrize("key", ["mean_ttft_ms", "mean_e2el_ms"])
def test_a_bench_mean_latency_of_0_beside_percentiles_above_it_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str) -> None:
    """mean_ttft_ms 0 beside a median of 150.1 ms printed 'TTFT mean 0.0 ms, p50 150.1 ms',
    exit 0 (a mean ITL of 0 was already refused)."""
    data = json.loads((FIXTURES / "vllm_bench.json").read_text("utf-8"))
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({**data, key: 0}))
    stem = key.removeprefix("mean_")
    said = refused(capsys, *OBSERVE, str(path))
    assert f"bench.json: the {stem} mean is 0 but its p50 is " in said
    # 0 throughout is what the benchmark writes for a family it measured nothing of: absent
    path.write_text(json.dumps({**data, **{k: 0 for k in data if k.endswith("_ttft_ms")}}))
    code, out, _ = run_cli(capsys, *OBSERVE, str(path))
    assert code == 0 and "ttft_ms is 0 throughout" in out


def test_a_binary_file_given_as_a_config_is_named_as_no_text(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A binary file where a config.json belongs (a safetensors shard, /bin/ls) was refused as
    "'utf-8' codec can't decode byte 0x80 in position 0: invalid start byte"; by every command
    that reads a model, it is now said to be no text, at the byte that shows it."""
    shard = tmp_path / "model.safetensors"
    shard.write_bytes(b"\x80\x01\x02 not json")
    for argv in (("model", str(shard)), ("moe", str(shard)),
                 ("kv", str(shard), "--context", "1"),
                 ("attention", "--model", str(shard), "--context", "1")):
        line = refused(capsys, *argv)
        assert "is not a text file (byte 0x80 at offset 0 is no UTF-8)" in line
        assert "codec" not in line
