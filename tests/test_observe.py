"""`ridgeline observe`: metrics over real HTTP on loopback, logs, bench results, bad sources."""

from __future__ import annotations

import csv
import http.server
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ridgeline.cli import main
from ridgeline.errors import InputError
from ridgeline.observation import Observation
from ridgeline.observe import fetch, poll, read_source
from ridgeline.prometheus import parse_scrape, split_scrapes
from ridgeline.roofline import first_whole_batch

FIXTURES = Path(__file__).parent / "fixtures"
METRICS = (FIXTURES / "vllm_metrics.txt").read_text()


def scrape_with(running: int, waiting: int, kv: float, generated: float,
                preempted: float = 0.0, kv_name: str = "vllm:kv_cache_usage_perc") -> str:
    text = METRICS.replace('"} 8.0\n# HELP vllm:num_requests_waiting', f'"}} {running}\n'
                           "# HELP vllm:num_requests_waiting")
    text = text.replace('model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0\n# HELP vllm:kv',
                        f'model_name="meta-llama/Llama-3.1-8B-Instruct"}} {waiting}\n# HELP vllm:kv')
    text = text.replace("} 0.12", f"}} {kv}").replace("vllm:kv_cache_usage_perc", kv_name)
    text = text.replace("} 25600.0", f"}} {generated}")
    return text.replace("vllm:num_preemptions_total{engine=\"0\",model_name=\"meta-llama/Llama-3.1-"
                        "8B-Instruct\"} 0.0", "vllm:num_preemptions_total{engine=\"0\",model_name"
                        f"=\"meta-llama/Llama-3.1-8B-Instruct\"}} {preempted}")


def timed_window(tmp_path: Path, output_times: int = 1) -> Path:
    """Two timed scrapes of the vLLM fixture, ten seconds apart, the ITL histogram and the
    token and request counters doubled in the second: a window whose latency, batch and
    lengths come from the same ten seconds. ``output_times``: the generated tokens grow that
    many times the fixture's instead (answers that many times longer, so fewer of the window's
    steps carry a prompt)."""
    def doubled(line: str) -> str:
        if not line.startswith(("vllm:inter_token_latency_seconds", "vllm:prompt_tokens_total",
                                "vllm:generation_tokens_total", "vllm:request_success_total")):
            return line
        name, value = line.rsplit(" ", 1)
        grown = output_times if name.startswith("vllm:generation_tokens_total") else 1
        return f"{name} {(1 + grown) * float(value)}"

    later = "\n".join(doubled(line) for line in METRICS.splitlines())
    path = tmp_path / "window.txt"
    path.write_text(f"# scrape_time 0\n{METRICS}\n# scrape_time 10\n{later}\n")
    return path


class FakeClock:
    """poll's clock, moved only by its sleeps: a window of whole seconds, run at once."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def clock(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


def quick_poll(url: str, duration_s: float, interval_s: float = 1.0) -> Observation:
    """poll over a window of ``duration_s`` seconds, at once."""
    fake = FakeClock()
    return poll(url, duration_s, interval_s, clock=fake.clock, sleep=fake.sleep)


@pytest.fixture
def instant_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """observe's polls (the CLI's too) over a fake clock: a window of seconds, run at once."""
    import ridgeline.observe

    monkeypatch.setattr(ridgeline.observe, "poll", lambda url, duration_s, interval_s:
                        quick_poll(url, duration_s, interval_s))


@contextmanager
def serve(respond: Callable[[int], tuple[int, str, bytes]],
          headers: dict[str, str] | None = None) -> Iterator[str]:
    """A metrics server on 127.0.0.1; respond(call number) -> (status, content type, body),
    each answer with ``headers`` too (a Content-Encoding a proxy adds)."""
    calls = {"n": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, kind, body = respond(calls["n"])
            calls["n"] += 1
            self.send_response(status)
            self.send_header("Content-Type", kind)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_prometheus_parsing_reads_gauges_counters_and_histograms() -> None:
    scrape = parse_scrape(METRICS)
    assert scrape.value("vllm:num_requests_running") == 8
    assert scrape.value("vllm:request_success_total") == 100  # summed over label sets
    hist = scrape.histogram("vllm:time_to_first_token_seconds")
    assert hist is not None and hist.count == 100 and hist.mean == pytest.approx(0.04)
    assert hist.quantile(0.5) == pytest.approx(0.036)


def test_polling_a_live_endpoint_measures_rates_and_the_batch() -> None:
    bodies = [scrape_with(8 + 4 * i, 0, 0.2, 25600.0 + 1000 * i) for i in range(6)]
    with serve(lambda n: (200, "text/plain", bodies[min(n, 5)].encode())) as url:
        obs = quick_poll(url, duration_s=5)
    assert len(obs.running) == 6
    assert obs.generation_tok_s is not None and obs.generation_tok_s > 0
    assert obs.running[-1] > obs.running[0]


def test_a_poll_that_fails_midway_keeps_the_scrapes_it_took() -> None:
    """The server answers 503 from its fourth scrape: the window is the three before, with a
    note; failing before a second scrape is still an error."""
    bodies = [scrape_with(8 + 4 * i, 0, 0.2, 25600.0 + 1000 * i) for i in range(3)]

    def answer(n: int) -> tuple[int, str, bytes]:
        return (200, "text/plain", bodies[n].encode()) if n < 3 else (503, "text/plain", b"")

    with serve(answer) as url:
        obs = quick_poll(url, duration_s=10)
    assert len(obs.running) == 3 and obs.generation_tok_s is not None
    assert any("stopped after" in n and "HTTP 503" in n for n in obs.notes)
    with serve(lambda n: (503, "text/plain", b"")) as url, pytest.raises(InputError):
        quick_poll(url, duration_s=2)


def test_observe_cli_on_a_live_endpoint(capsys: pytest.CaptureFixture[str],
                                        instant_polls: None) -> None:
    body = scrape_with(40, 12, 0.97, 30000.0, preempted=3).encode()
    with serve(lambda n: (200, "text/plain", body)) as url:
        code = main(["observe", url, "--model", "llama-3.1-8b", "--gpu", "h100", "--duration",
                     "2", "--interval", "1", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["wall"] == "capacity"
    assert data["batch"] == 40 and 0 < data["fraction_of_arithmetic"] < 0.2


def test_an_idle_engine_hits_neither_wall(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["observe", str(FIXTURES / "vllm_metrics.txt"), "--model", "llama-3.1-8b",
                 "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "2.7% of the arithmetic" in out and "wall: neither" in out
    # the wall's name is not said twice: 'wall: neither — neither pool nor queue' stuttered
    assert "wall: neither — no limit from the pool or the queue: it runs all it is sent" in out
    # the ridge is where the batch would reach it, not the batch it runs: 'under the ridge at
    # batch 296' beside a batch of 8 read as if 296 were running
    assert "under the ridge (reached at batch 296), where each added sequence" in out
    assert "under the ridge at batch" not in out
    # one scrape: its 18 ms is the server's lifetime mean, not set against this instant
    assert "ridgeline predicts" in out and "18.0 ms, the mean over the server's lifetime" in out
    assert "measured 18.0 ms" not in out


def test_a_page_without_a_waiting_gauge_does_not_claim_an_empty_queue(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The idle fixture with its vllm:num_requests_waiting series dropped (a relabelling that
    loses it): the queue was never read, so the wall may not say "no limit from the queue: it
    runs all it is sent" (an audit found it did, with no note), as the missing KV gauge gets a
    note of its own."""
    page = tmp_path / "nowait.txt"
    page.write_text("".join(line for line in (FIXTURES / "vllm_metrics.txt").read_text()
                            .splitlines(keepends=True) if "num_requests_waiting" not in line))
    assert main(["observe", str(page), "--model", "llama-3.1-8b", "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "no limit from the pool or the queue" not in out
    assert "wall: neither, the queue unknown — no limit from the pool (8 of the" in out
    assert "a queue for the seats or the steps' token budget would go unseen" in out
    assert "note: no waiting-requests metric (vllm:num_requests_waiting" in out
    assert main(["observe", str(page), "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["wall"] != "neither" and "queue unknown" in data["wall"]
    assert any("the queue is unknown" in note for note in data["notes"])
    # the same page with its gauge kept is read as before
    assert main(["observe", str(FIXTURES / "vllm_metrics.txt"), "--model", "llama-3.1-8b",
                 "--gpu", "h100", "--json"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert kept["wall"] == "neither"
    assert not any("waiting-requests" in note for note in kept["notes"])


def test_waiting_with_room_in_the_pool_is_the_latency_wall() -> None:
    from ridgeline.cli import build_parser

    path_text = scrape_with(256, 30, 0.4, 30000.0)
    obs = read_source_text(path_text)
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.engines import profile_for
    from ridgeline.reports.observe import observe_report
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    assert observe_report(obs, dep, profile_for("vllm"), 2000).wall == "latency"
    assert build_parser() is not None


def read_source_text(text: str) -> object:
    from ridgeline.observe_metrics import from_scrapes
    return from_scrapes(split_scrapes(text), "test")


def test_a_vllm_log_gives_the_batch_over_time(capsys: pytest.CaptureFixture[str]) -> None:
    obs = read_source(str(FIXTURES / "vllm_server.log"))
    assert obs.running == [24, 40, 38] and obs.waiting == [0, 12, 9]
    assert obs.preemptions == 1 and max(obs.kv_usage) == pytest.approx(0.99)
    assert main(["observe", str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-8b",
                 "--gpu", "h100"]) == 0
    assert "wall: capacity" in capsys.readouterr().out


def test_a_bench_result_and_emitted_measurements_feed_calibrate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bundled bench result's prompts are 64-token ones here (32,000 input tokens over
    500 requests): the steps that run them slow its tokens a little, and its row is written
    for validate and calibrate."""
    bench = json.loads((FIXTURES / "vllm_bench.json").read_text())
    bench["total_input_tokens"] = 500 * 64
    source = tmp_path / "bench.json"
    source.write_text(json.dumps(bench))
    rows = tmp_path / "observed.csv"
    assert main(["observe", str(source), "--model", "llama-3.1-8b",
                 "--gpu", "h100", "--emit-measurements", str(rows), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["batch"] == pytest.approx(2091.5 * 0.028, rel=0.01)  # Little's law
    assert data["context_len"] == 64 + 128  # mean prompt + half the mean output
    assert main(["validate", str(rows), "--json"]) == 0
    validated = json.loads(capsys.readouterr().out)
    assert validated["rows"][0]["measured"] == pytest.approx(1e3 / 28.0, rel=0.01)


def test_a_bench_of_a_server_hours_behind_reads_its_ttft_in_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bench against an overloaded server: TTFTs of 38 and 76 minutes read 2,302.7 s and
    4,565.6 s, each figure of that line in seconds; the ITL line, all under 100 s, keeps ms."""
    bench = json.loads((FIXTURES / "vllm_bench.json").read_text())
    bench |= {"mean_ttft_ms": 2_302_675.7, "median_ttft_ms": 2_304_093.0,
              "p99_ttft_ms": 4_565_622.5}
    source = tmp_path / "bench.json"
    source.write_text(json.dumps(bench))
    assert main(["observe", str(source), "--model", "llama-3.1-8b", "--gpu", "h100"]) == 0
    text = capsys.readouterr().out
    ttft = next(line for line in text.splitlines() if line.startswith("TTFT "))
    assert ttft.split(None, 1)[1] == ", ".join(
        f"{k} {bench[f'{name}_ttft_ms'] / 1e3:,.1f} s"
        for k, name in (("mean", "mean"), ("p50", "median"), ("p99", "p99")))
    itl = next(line for line in text.splitlines() if line.startswith("ITL/TPOT "))
    assert f"mean {bench['mean_itl_ms']:,.1f} ms" in itl and " s," not in itl


def test_a_mixed_load_is_not_emitted_as_a_decode_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bundled bench result runs a 1,024-token prompt's step about one step in four:
    ridgeline prices its mean step half again slower than the decodes alone, which validate
    would score the row against (+144 % an audit read) and calibrate would fit. No row is
    written, the note saying why with the figures; a load whose prompt steps slow it less
    than MIXED_ROW_SLACK is written (test above)."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.engines import profile_for
    from ridgeline.reports.observe import MIXED_ROW_SLACK, observe_report

    source = FIXTURES / "vllm_bench.json"
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
    report = observe_report(read_source(str(source)), dep, profile_for("vllm"), None)
    slow = report.mixed_step_slowdown
    assert slow == pytest.approx(report.predicted_itl_ms / report.step_times_ms()[0] - 1)
    assert slow > MIXED_ROW_SLACK and report.mixed_row
    assert report.measurement_rows("llama-3.1-8b").count("\n") == 1  # the header alone
    rows = tmp_path / "observed.csv"
    assert main(["observe", str(source), "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--emit-measurements", str(rows), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    note = next(n for n in notes if n.startswith("--emit-measurements wrote nothing"))
    assert f"a row would read {slow:.0%} slow" in note and f"past the {MIXED_ROW_SLACK:.0%}" \
        in note
    assert not rows.exists()


def test_counter_resets_mid_window_are_reported_not_garbled() -> None:
    """A restart (the process start moving later) with one scrape after it: the two scrapes
    before it are the run read, 1,000 tokens in 10 s. Counted from zero across it, the
    window read (1,000 + 500) ÷ 20 s, the 5 s before the restart unseen."""
    text = "\n".join(f"# scrape_time {t}\n{scrape_with(8, 0, 0.1, g)}"
                     f"process_start_time_seconds {started}\n" for t, g, started in
                     ((1000, 30000.0, 900), (1010, 31000.0, 900), (1020, 500.0, 1015)))
    obs = read_source_text(text)
    assert obs.generation_tok_s == pytest.approx((31000 - 30000) / 10)
    assert obs.duration_s == 10
    assert any("restarted 15 s into the window (process_start_time_seconds 900 → 1,015), "
               "between the scrapes 10 s and 20 s" in n
               and "read the 2 scrapes before it" in n for n in obs.notes)


def test_a_lone_counter_going_down_is_no_restart_and_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A restart resets every counter: generation tokens falling while the prompt counter
    holds at 102,400 is no restart, and was read as one, the held counter's whole value
    taken as the window's (10,240 prompt tok/s over 10 s from a counter that never moved)."""
    path = tmp_path / "two.txt"
    path.write_text("\n".join(f"# scrape_time {t}\n{scrape_with(8, 0, 0.1, g)}"
                               for t, g in ((0, 31000.0), (10, 500.0))))
    assert main(["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100"]) == 2
    err = capsys.readouterr().err
    assert "vllm:generation_tokens_total went down" in err and "stayed at 102,400" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_older_metric_names_are_understood() -> None:
    obs = read_source_text(scrape_with(8, 0, 0.5, 1.0, kv_name="vllm:gpu_cache_usage_perc"))
    assert obs.kv_usage == [0.5]


@pytest.mark.parametrize(
    ("respond", "message"),
    [
        (lambda n: (200, "text/html", b"<!DOCTYPE html><html><body>login</body></html>"), "HTML"),
        (lambda n: (200, "text/plain", b"hello world\nthis is not it\n"), "not a metrics"),
        (lambda n: (500, "text/plain", b"oops"), "HTTP 500"),
        (lambda n: (200, "text/plain", b"other_metric 1\n"), "no running-requests metric"),
    ],
)
def test_bad_endpoints_get_a_clear_message(
    respond: Callable[[int], tuple[int, str, bytes]], message: str
) -> None:
    with serve(respond) as url, pytest.raises(InputError, match=message):
        poll(url, duration_s=0, interval_s=1)


def test_an_interval_longer_than_the_duration_is_refused_rather_than_widening_the_window(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--duration 2s --interval 5s scraped twice, 5 s apart, and reported a "5 s window": the
    window asked for was not the one read. Refused in one line (exit 2) before any fetch; an
    interval within the duration, and --duration 0 (one scrape), are as before."""
    with pytest.raises(InputError, match=r"--interval 5 s is longer than --duration 2 s"):
        poll("http://127.0.0.1:9/metrics", duration_s=2, interval_s=5)
    assert main(["observe", "http://127.0.0.1:9/metrics", "--model", "llama-3.1-8b", "--gpu",
                 "h100", "--duration", "2s", "--interval", "5s"]) == 2
    err = capsys.readouterr().err
    assert "--duration 5s or more" in err and err.count("\n") == 1
    with serve(lambda n: (200, "text/plain", (FIXTURES / "vllm_metrics.txt").read_bytes())) \
            as url:
        assert quick_poll(url, duration_s=5, interval_s=5).duration_s == pytest.approx(5)
        assert quick_poll(url, duration_s=0, interval_s=5).duration_s is None


def test_an_emit_path_in_no_folder_is_refused_before_the_url_is_polled(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """--emit-measurements /no/such/rows.csv was found unwritable only after the whole window
    (60 s of polling by default), the observation lost; now refused first, as calibrate's -o
    is, with nothing fetched."""
    import ridgeline.observe

    def polled(*_: object) -> None:
        raise AssertionError("polled before the output path was checked")

    monkeypatch.setattr(ridgeline.observe, "poll", polled)
    base = ["observe", "http://127.0.0.1:9/metrics", "--model", "llama-3.1-8b", "--gpu", "h100"]
    for path, said in ((tmp_path / "none" / "rows.csv", "no folder"),
                       (tmp_path, "a folder, not a file")):
        assert main([*base, "--emit-measurements", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"cannot write {path}: {said}" in err and err.count("\n") == 1


def test_connection_refused_and_huge_responses(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["observe", "http://127.0.0.1:9/metrics", "--model", "llama-3.1-8b", "--gpu",
                 "h100", "--duration", "0"]) == 2
    assert "cannot reach" in capsys.readouterr().err
    huge = b"# " + b"x" * (17 * 2**20)
    with serve(lambda n: (200, "text/plain", huge)) as url, pytest.raises(InputError,
                                                                          match="larger"):
        fetch(url)


def test_files_that_are_not_a_source_are_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    assert main(["observe", str(bad), "--model", "llama-3.1-8b", "--gpu", "h100"]) == 2
    assert "not a vLLM, SGLang or genai-perf" in capsys.readouterr().err


def test_a_server_that_never_answers_times_out() -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    try:
        with pytest.raises(InputError, match=r"no answer|cannot reach"):
            fetch(f"http://127.0.0.1:{listener.getsockname()[1]}/metrics", timeout_s=0.3)
    finally:
        listener.close()


def test_sglang_metrics_saved_over_a_window(capsys: pytest.CaptureFixture[str]) -> None:
    obs = read_source(str(FIXTURES / "sglang_metrics.txt"))
    assert obs.running == [120, 128] and obs.kv_usage == [0.42, 0.45]
    assert obs.generation_tok_s == pytest.approx(3000) and obs.duration_s == 10
    assert main(["observe", str(FIXTURES / "sglang_metrics.txt"), "--model", "qwen3-8b", "--gpu",
                 "h100", "--engine", "sglang", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "batch 124.0" in out and "How each number was computed" in out


def test_llama_server_metrics_give_the_batch_and_the_time_between_a_slots_tokens(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server has no latency histograms: the slots' summed generation seconds per
    generated token (40 s over 4,000 tokens here) is each slot's mean ITL."""
    obs = read_source(str(FIXTURES / "llamacpp_metrics.txt"))
    assert obs.running == [4, 4] and obs.waiting == [0, 1]
    assert obs.generation_tok_s == pytest.approx(400) and obs.prompt_tok_s == pytest.approx(400)
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(10.0)
    assert main(["observe", str(FIXTURES / "llamacpp_metrics.txt"), "--model", "llama-3.1-8b",
                 "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda", "--weights", "q4_k_m"]) == 0
    out = capsys.readouterr().out
    assert "batch 4.0" in out and "wait for a free slot: more slots (-np N" in out


def test_without_lengths_the_context_is_read_off_the_kv_fill(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A vLLM log gives running requests and KV usage but no lengths: the tokens each request
    holds are usage × the pool's tokens ÷ running, not an assumed 2,000."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.memory import EngineSettings, kv_pool

    log = str(FIXTURES / "vllm_server.log")
    assert main(["observe", log, "--model", "llama-3.1-8b", "--gpu", "h100", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    obs = read_source(log)
    pool = kv_pool(Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100")),
                   EngineSettings())
    mean = sum(obs.kv_usage) / len(obs.kv_usage) * pool.tokens / (
        sum(obs.running) / len(obs.running))
    assert report["context_len"] == round(mean) and "KV cache's fill" in report["context_len_source"]
    assert main(["observe", log, "--model", "llama-3.1-8b", "--gpu", "h100", "--context",
                 "4000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["context_len_source"] == "given"


def _vllm_engines(kv: tuple[float, float], running: tuple[int, int]) -> str:
    lines = []
    for name, values in (("vllm:kv_cache_usage_perc", kv), ("vllm:num_requests_running", running),
                         ("vllm:num_requests_waiting", (0, 0))):
        lines += [f'{name}{{engine="{i}",model_name="meta-llama/Llama-3.1-8B"}} {v}'
                  for i, v in enumerate(values)]
    return "\n".join(lines) + "\n"


def test_data_parallel_engines_are_read_each_not_summed(tmp_path: Path) -> None:
    """vLLM V1 exports each data-parallel engine core's gauges apart (an "engine" label): two
    cores half full are 50 % full, not 100 %, and each runs its own batch."""
    path = tmp_path / "dp.txt"
    path.write_text(_vllm_engines((0.5, 0.5), (20, 20)))
    obs = read_source(str(path))
    assert obs.engines == 2 and obs.kv_usage == [0.5] and obs.running == [20]
    assert any("2 data-parallel engines" in n for n in obs.notes)


def test_sglang_retractions_are_its_counter_not_its_gauge(tmp_path: Path) -> None:
    """sglang:num_retracted_reqs is a gauge; the counter is num_retracted_requests_total
    (sglang/srt/metrics/collector.py): 40 → 52 over the window is 12 retractions."""
    def scrape(t: int, gauge: int, counter: int) -> str:
        return (f"# scrape_time {t}\nsglang:num_running_reqs 40\nsglang:num_queue_reqs 0\n"
                f"sglang:token_usage 0.5\nsglang:num_retracted_reqs {gauge}\n"
                f"sglang:num_retracted_requests_total {counter}\n")

    path = tmp_path / "sglang.txt"
    path.write_text(scrape(0, 4, 40) + scrape(10, 0, 52))
    obs = read_source(str(path))
    assert obs.preemptions == 12 and obs.engine_family == "sglang"
    assert not any("went down" in n for n in obs.notes)


def test_two_scrapes_run_together_are_refused_and_braces_in_labels_read(tmp_path: Path) -> None:
    path = tmp_path / "two.txt"
    path.write_text(_vllm_engines((0.7, 0.6), (30, 20)) * 2)
    with pytest.raises(InputError, match="appears twice with the same labels"):
        read_source(str(path))
    scrape = parse_scrape('vllm:num_requests_running{model_name="/m/llama{v2}"} 3\n'
                          'vllm:num_requests_running{model_name="ok"} 4\n')
    assert scrape.value("vllm:num_requests_running") == 7


def test_one_scrape_does_not_read_lifetime_preemptions_as_a_full_pool(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "quiet.txt"
    path.write_text("vllm:num_requests_running 8\nvllm:num_requests_waiting 0\n"
                    "vllm:kv_cache_usage_perc 0.2\nvllm:num_preemptions_total 5\n")
    assert main(["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "capacity" not in out and "5 preemptions since it started" in out


def test_llama_server_metrics_pick_llama_cpp_when_no_engine_is_named(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["observe", str(FIXTURES / "llamacpp_metrics.txt"), "--model", "llama-3.1-8b",
                 "--gpu", "rtx-4090", "--weights", "q4_k_m"]) == 0
    out = capsys.readouterr().out
    assert "at this batch (llama.cpp-cuda;" in out and "more slots (-np N" in out


def test_a_bench_with_an_itl_under_a_microsecond_is_refused(tmp_path: Path) -> None:
    """A measured gap under a microsecond is no token; an exact 0 is nothing measured
    (test_a_prefill_only_vllm_bench_keeps_its_ttft_and_lengths)."""
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"output_throughput": 1000, "mean_itl_ms": 0.0001}))
    with pytest.raises(InputError, match=r"inter-token latency is 0\.0001 ms: under a microsecond"):
        read_source(str(path))


def test_emitted_rows_name_the_checkpoints_own_format(tmp_path: Path) -> None:
    """gpt-oss as stored is MXFP4 experts: the emitted row says mxfp4, and validate costs the
    deployment observe placed the batch on, not a bf16 one."""
    out = tmp_path / "rows.csv"  # answers 4x the fixture's: few steps carry a prompt
    assert main(["observe", str(timed_window(tmp_path, output_times=4)), "--model",
                 "gpt-oss-20b", "--gpu", "h100", "--emit-measurements", str(out)]) == 0
    assert ",gpt-oss-20b,mxfp4," in out.read_text()


@pytest.mark.parametrize(("text", "message"), [
    ("m_bucket{le=\"0.02\"} 50\nm_bucket{le=\"0.04\"} 10\nm_bucket{le=\"+Inf\"} 60\n"
     "m_count 60\nm_sum 1", "falls from 50 at le=0.02 to 10"),
    ("m_bucket{le=\"0.02\"} 5\nm_bucket{le=\"+Inf\"} 100\nm_count 10\nm_sum 1",
     "m_count is 10 but its +Inf bucket holds 100"),
    ("m_bucket{le=\"0.1\"} 10\nm_bucket{le=\"+Inf\"} 10\nm_count 10\nm_sum 50",
     "above the le=0.1 bucket that holds every observation"),
    ("m_seconds_bucket{le=\"+Inf\"} 100\nm_seconds_count 100\nm_seconds_sum 1e15",
     "is not a latency"),
])
def test_a_histogram_that_contradicts_itself_is_refused(text: str, message: str) -> None:
    from ridgeline.prometheus import parse_scrape

    name = "m_seconds" if "m_seconds" in text else "m"
    with pytest.raises(InputError, match=re.escape(message)):
        parse_scrape(text).histogram(name)


@pytest.mark.parametrize(("times", "message"), [
    ((1000, 1000.001), "at least 1 s apart"), ((1010, 1000), "scrapes go forward in time")])
def test_scrapes_go_forward_by_at_least_a_second(times: tuple[float, float],
                                                 message: str) -> None:
    from ridgeline.prometheus import split_scrapes

    text = "".join(f"# scrape_time {t}\nvllm:num_requests_running {i}\n"
                   for i, t in enumerate(times))
    with pytest.raises(InputError, match=message):
        split_scrapes(text)


def test_a_scrape_time_that_is_not_a_number_is_refused() -> None:
    from ridgeline.prometheus import split_scrapes

    with pytest.raises(InputError, match="a scrape_time is unix seconds"):
        split_scrapes("# scrape_time abc\nvllm:num_requests_running 1\n")


@pytest.mark.parametrize(("fields", "message"), [
    ({"completed": 0, "output_throughput": 2091.5}, "completed is 0 while output_throughput"),
    ({"completed": 500, "output_throughput": 0, "total_output_tokens": 128000},
     "output_throughput is 0 while 128,000 output tokens"),
])
def test_a_bench_that_contradicts_itself_is_refused(tmp_path: Path, fields: dict[str, float],
                                                    message: str) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"duration": 60, "mean_itl_ms": 25, **fields}))
    with pytest.raises(InputError, match=message):
        read_source(str(path))


def test_a_scrape_without_its_time_among_timed_ones_is_refused() -> None:
    """Rates need every scrape's time: an untimed first scrape had been read as 'a single
    scrape', dropping the timed ones after it."""
    from ridgeline.prometheus import split_scrapes

    text = ("vllm:num_requests_running 1\n# scrape_time 1764500000\n"
            "vllm:num_requests_running 2\n# scrape_time 1764500010\nvllm:num_requests_running 3\n")
    with pytest.raises(InputError, match="scrape 1 of 3 has no '# scrape_time"):
        split_scrapes(text)
    assert [s.time_s for s in split_scrapes(text.split("\n", 1)[1])] == [1764500000, 1764500010]


def test_a_scrape_time_in_milliseconds_is_refused() -> None:
    from ridgeline.prometheus import split_scrapes

    with pytest.raises(InputError, match="unix seconds, not milliseconds"):
        split_scrapes("# scrape_time 1764500000000\nvllm:num_requests_running 1\n")


def test_float_noise_between_a_count_and_its_inf_bucket_is_read() -> None:
    from ridgeline.prometheus import parse_scrape

    text = ("m_bucket{le=\"0.1\"} 719.9999999\nm_bucket{le=\"+Inf\"} 720.0000001\n"
            "m_count 720\nm_sum 10")
    h = parse_scrape(text).histogram("m")
    assert h is not None and h.count == 720


def test_a_bench_result_names_the_engine_it_measured(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    """SGLang's bench_serving writes "backend": "sglang" for its native /generate: the batch
    is costed as SGLang runs it, not with the default engine."""
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"backend": "sglang", "duration": 60, "completed": 100,
                                "total_output_tokens": 25000, "output_throughput": 416.7,
                                "mean_itl_ms": 20.0, "mean_e2e_latency_ms": 5100.0,
                                "median_e2e_latency_ms": 5000.0}))
    assert read_source(str(path)).engine_family == "sglang"
    assert main(["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100"]) == 0
    assert "(sglang)" in capsys.readouterr().out


def test_a_restart_mid_window_reads_the_latencies_of_the_run_after_it(tmp_path: Path) -> None:
    """Histograms are read over the run the counters are: 100 -> 300 requests, a restart (its
    counters fall, no process start exported), then 50 -> 250: the 200 observations after
    it, not the 450 of two runs counted from zero across the restart."""
    def scrape(t: int, n: int) -> str:
        return (f"# scrape_time {t}\nvllm:num_requests_running 4\n"
                f"vllm:generation_tokens_total {n * 10}\n"
                f'vllm:time_to_first_token_seconds_bucket{{le="0.1"}} {n}\n'
                f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {n}\n'
                f"vllm:time_to_first_token_seconds_count {n}\n"
                f"vllm:time_to_first_token_seconds_sum {n * 0.05}\n")
    path = tmp_path / "scrapes.txt"
    path.write_text(scrape(1000, 100) + scrape(1015, 300) + scrape(1030, 50) + scrape(1045, 250))
    obs = read_source(str(path))
    assert obs.latency_ms["ttft"]["count"] == 250 - 50
    assert obs.latency_ms["ttft"]["mean"] == pytest.approx(50.0)


def _ranked(labels: list[str], running: list[int], usage: list[float]) -> str:
    return "".join(
        f"# scrape_time {t}\n" + "".join(
            f'sglang:num_running_reqs{{model_name="m",{lab}}} {r + i}\n'
            f'sglang:num_queue_reqs{{model_name="m",{lab}}} 0\n'
            f'sglang:token_usage{{model_name="m",{lab}}} {u}\n'
            for lab, r, u in zip(labels, running, usage, strict=True))
        for i, t in enumerate((1764500000, 1764500060)))


def test_sglang_dp_attention_ranks_each_run_their_own_batch(tmp_path: Path) -> None:
    """With --enable-dp-attention each DP rank exports its own gauges (a 'dp_rank' label):
    four ranks of ~48 are four batches of ~48, not one of 196 at 224 % KV usage; ranks of one
    core (pipeline stages) report the same requests and are averaged, not added."""
    dp = tmp_path / "dp.prom"
    dp.write_text(_ranked([f'dp_rank="{r}",tp_rank="{2 * r}"' for r in range(4)],
                          [47, 48, 49, 50], [0.55, 0.56, 0.57, 0.56]))
    obs = read_source(str(dp))
    assert obs.engines == 4 and obs.running == [48.5, 49.5]
    assert obs.kv_usage[0] == pytest.approx(0.56)
    pp = tmp_path / "pp.prom"
    pp.write_text(_ranked(['pp_rank="0"', 'pp_rank="1"'], [40, 40], [0.7, 0.7]))
    obs = read_source(str(pp))
    assert obs.engines == 1 and obs.running == [40, 41]
    assert obs.kv_usage == [pytest.approx(0.7)] * 2


def test_a_scrape_of_several_servers_is_refused_not_summed(tmp_path: Path) -> None:
    fed = tmp_path / "fed.prom"
    fed.write_text(_ranked(['instance="10.0.0.1:8000"', 'instance="10.0.0.2:8000"'], [60, 64],
                           [0.62, 0.62]))
    with pytest.raises(InputError, match=r"2 values of 'instance'.*one server's scrape"):
        read_source(str(fed))


V1_LINE = ("(APIServer pid=11574) INFO 03-17 15:38:30 [loggers.py:259] Engine 000: Avg prompt "
           "throughput: 9999.8 tokens/s, Avg generation throughput: 2452.6 tokens/s, Running: "
           "{running} reqs, Waiting: 31 reqs,{extra} GPU KV cache usage: 99.8%, Prefix cache "
           "hit rate: 0.0%\n")


def test_stats_lines_with_deferred_and_preemptions_are_read_not_dropped(tmp_path: Path) -> None:
    """vLLM logs 'Deferred: N reqs' and 'Preemptions: N' when non-zero (PR #28522): those
    lines, the busiest, had been skipped, and a log of only them refused."""
    log = tmp_path / "vllm.log"
    log.write_text("[Gloo] Rank 0 is connected to 1 peer ranks.\n"
                   + V1_LINE.format(running=80, extra="")
                   + V1_LINE.format(running=84, extra=" Deferred: 2 reqs, Preemptions: 12,")
                   + V1_LINE.format(running=83, extra=" Preemptions: 7,"))
    obs = read_source(str(log))
    assert obs.running == [80, 84, 83] and obs.preemptions == 19
    aggregated = tmp_path / "dp.log"
    aggregated.write_text(V1_LINE.format(running=248, extra="").replace(
        "Engine 000: ", "4 Engines Aggregated: "))
    obs = read_source(str(aggregated))
    assert obs.engines == 4 and obs.running == [62] and obs.generation_tok_s == 2452.6 / 4
    assert obs.preemptions is None  # this line's format cannot say


def test_v0_preemptions_are_its_running_total_not_its_warnings(tmp_path: Path) -> None:
    """V0 warns at the 1st, 51st and 101st preemption: three warnings are 101 preemptions."""
    line = ("INFO 09-11 17:20:40 metrics.py:351] Avg prompt throughput: 2048.3 tokens/s, Avg "
            "generation throughput: 812.4 tokens/s, Running: 38 reqs, Swapped: 0 reqs, Pending: "
            "4 reqs, GPU KV cache usage: 88.1%, CPU KV cache usage: 0.0%.\n")
    warning = ("WARNING 09-11 17:20:47 scheduler.py:1089] Sequence group cmpl-1 is preempted by "
               "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
               "total_num_cumulative_preemption={}\n")
    log = tmp_path / "v0.log"
    log.write_text(line + "".join(warning.format(n) for n in (1, 51, 101)) + line)
    assert read_source(str(log)).preemptions == 101
    log.write_text(line + line)
    assert read_source(str(log)).preemptions == 0


def test_sglang_token_rates_come_from_its_per_step_counter(tmp_path: Path) -> None:
    """SGLang's generation_tokens_total moves when a request finishes: 48 long requests
    decoding through a 60 s window read 0 tok/s there. Its realtime_tokens_total counts each
    step's tokens by mode: decode 126,000 in 60 s is 2,100 tok/s."""
    def scrape(t: int, decoded: float, prefilled: float) -> str:
        return (f"# scrape_time {t}\n"
                'sglang:num_running_reqs{model_name="m",tp_rank="0"} 48\n'
                'sglang:num_queue_reqs{model_name="m",tp_rank="0"} 0\n'
                f'sglang:realtime_tokens_total{{mode="decode",model_name="m"}} {decoded}\n'
                f'sglang:realtime_tokens_total{{mode="prefill_compute",model_name="m"}} '
                f"{prefilled}\n"
                'sglang:realtime_tokens_total{mode="prefill_cache",model_name="m"} 5e6\n'
                'sglang:generation_tokens_total{model_name="m"} 1e7\n'
                'sglang:prompt_tokens_total{model_name="m"} 1.5e7\n')

    path = tmp_path / "sglang.prom"
    path.write_text(scrape(1764500000, 1e7, 3e7) + scrape(1764500060, 1.0126e7, 3.006e7))
    obs = read_source(str(path))
    assert obs.generation_tok_s == pytest.approx(2100) and obs.prompt_tok_s == pytest.approx(1000)
    assert not any("when it finishes" in n for n in obs.notes)
    assert any(n.startswith("prompt tok/s: the prompt tokens SGLang computed") for n in obs.notes)
    path.write_text("".join(scrape(t, 0, 0).replace("realtime_tokens_total", "other_total")
                            for t in (1764500000, 1764500060)))
    obs = read_source(str(path))
    assert obs.generation_tok_s == 0 and any("when it finishes" in n for n in obs.notes)
    # no prefill mode among its series (a renamed mode): the prompt rate is the completion
    # counter's, with its note, not 0 tok/s summed over no series
    path.write_text("".join(scrape(t, d, 0).replace('mode="prefill_compute"', 'mode="other"')
                            .replace('mode="prefill_cache"', 'mode="other_cache"')
                            .replace("prompt_tokens_total{model_name=\"m\"} 1.5e7",
                                     f"prompt_tokens_total{{model_name=\"m\"}} {p}")
                            for t, d, p in ((1764500000, 1e7, 1.5e7),
                                            (1764500060, 1.0126e7, 1.506e7))))
    obs = read_source(str(path))
    assert obs.generation_tok_s == pytest.approx(2100) and obs.prompt_tok_s == pytest.approx(1000)
    assert any("when it finishes" in n for n in obs.notes)


def test_openmetrics_timestamps_and_exemplars_are_read_not_dropped() -> None:
    """OpenMetrics allows a float timestamp in seconds and an exemplar after a sample: a
    running gauge so written had vanished (no running-requests metric), an exemplar's bucket
    too, moving the ITL percentiles."""
    text = ('vllm:num_requests_running{model_name="m"} 4 1764500000.123\n'
            'vllm:inter_token_latency_seconds_bucket{le="0.025",model_name="m"} 10 '
            '# {trace_id="a b}c"} 0.0143 1764500059.8\n'
            'vllm:inter_token_latency_seconds_bucket{le="+Inf",model_name="m"} 10\n'
            'vllm:inter_token_latency_seconds_count{model_name="m"} 10\n'
            'vllm:inter_token_latency_seconds_sum{model_name="m"} 0.146\n')
    scrape = parse_scrape(text)
    assert scrape.value("vllm:num_requests_running") == 4
    hist = scrape.histogram("vllm:inter_token_latency_seconds")
    assert hist is not None and dict(hist.buckets)[0.025] == 10


def test_requests_deferred_for_a_kv_transfer_are_not_a_queue_for_the_batch(
        tmp_path: Path) -> None:
    """vLLM splits its waiting requests by reason: 'deferred' ones wait for a KV transfer or a
    LoRA budget, not for seats, so they do not ask for a larger --max-num-seqs."""
    path = tmp_path / "deferred.prom"
    path.write_text("".join(
        f"# scrape_time {t}\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 64\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3\n'
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 1\n'
        'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="deferred"} 2\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.45\n'
        for t in (1764500000, 1764500060)))
    obs = read_source(str(path))
    assert obs.waiting == [1, 1] and any("2 waiting requests deferred" in n for n in obs.notes)


def test_bench_results_of_sglang_aiperf_and_appended_runs_are_read_whole(
        tmp_path: Path) -> None:
    """SGLang names end-to-end e2e_latency_ms; aiperf gives the run's summed input and output
    lengths and its model; a file of several runs says it read the last."""
    run = {"duration": 60, "completed": 500, "output_throughput": 2000, "mean_itl_ms": 20,
           "total_input_tokens": 512000, "total_output_tokens": 120000, "backend": "sglang",
           "mean_e2e_latency_ms": 7330, "median_e2e_latency_ms": 7300, "max_concurrency": 64}
    sglang = tmp_path / "sglang.jsonl"
    sglang.write_text(json.dumps({**run, "max_concurrency": 16}) + "\n" + json.dumps(run) + "\n")
    obs = read_source(str(sglang))
    assert obs.latency_ms["e2e"] == {"mean": 7330, "p50": 7300}
    assert any("2 runs in the file: the last one read (max concurrency 64)" in n
               for n in obs.notes)
    aiperf = tmp_path / "profile_export_aiperf.json"
    aiperf.write_text(json.dumps({
        "time_to_first_token": {"unit": "ms", "avg": 90}, "inter_token_latency":
        {"unit": "ms", "avg": 20}, "output_token_throughput": {"avg": 2000},
        "request_count": {"avg": 500}, "total_isl": {"avg": 512000}, "total_osl": {"avg": 64000},
        "input_config": {"endpoint": {"model_names": ["meta-llama/Llama-3.1-8B-Instruct"]}}}))
    obs = read_source(str(aiperf))
    assert (obs.mean_prompt_tokens, obs.mean_output_tokens) == (1024, 128)
    assert obs.model_names == ["meta-llama/Llama-3.1-8B-Instruct"]


def test_an_older_llama_servers_kv_ratio_is_not_read_as_a_share_of_the_memory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its kv_cache_usage_ratio is a share of -c: 60 % of an 8,192-cell context is 4,915
    tokens, not 60 % of all the cells the card could hold (92,234). Its kv_cache_tokens
    gauge gives the cells in use."""
    path = tmp_path / "llamacpp.prom"
    path.write_text("".join(
        f"# scrape_time {t}\nllamacpp:requests_processing 1\nllamacpp:requests_deferred 0\n"
        "llamacpp:kv_cache_usage_ratio 0.6\nllamacpp:kv_cache_tokens 4915\n"
        for t in (1764500000, 1764500060)))
    argv = ["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--weights",
            "q4_k_m"]
    assert main(argv) == 0
    assert "sequences of 4,915 tokens (llama-server's 4,915 KV cells" in capsys.readouterr().out
    path.write_text(path.read_text().replace("llamacpp:kv_cache_tokens 4915\n", ""))
    assert main(argv) == 0
    assert "2,000 tokens (assumed: pass --context)" in capsys.readouterr().out


RUN = 'vllm:num_requests_running{model_name="m"} 4\nvllm:num_requests_waiting{model_name="m"} 0\n'
ITL_H = "vllm:inter_token_latency_seconds"


def _two(first: str, second: str) -> str:
    return f"# scrape_time 1764500000\n{first}# scrape_time 1764500060\n{second}"


def _itl(count: float, total: float, low: float) -> str:
    return (f'{ITL_H}_bucket{{le="0.01",model_name="m"}} {low}\n'
            f'{ITL_H}_bucket{{le="+Inf",model_name="m"}} {count}\n'
            f'{ITL_H}_count{{model_name="m"}} {count}\n{ITL_H}_sum{{model_name="m"}} {total}\n')


@pytest.mark.parametrize(("text", "message"), [
    (RUN + 'vllm:kv_cache_usage_perc{model_name="m"} 0.5 junk\n', "is not a Prometheus sample"),
    (_two(RUN + _itl(100, 5.0, 50), RUN + _itl(200, 1.0, 100)), "its _sum or a bucket falls"),
    (_two(RUN + _itl(100, 0.5, 100), RUN + _itl(200, 1.5, 50)), "its _sum or a bucket falls"),
    (RUN + f'{ITL_H}_bucket{{le="NaN",model_name="m"}} 1\n', "not a bucket's edge"),
    ("Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1" + "0" * 30 + " tokens/s, "
     "Running: 5 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%\n",
     "Avg generation throughput is 1e+30"),
    ("0 Engines Aggregated: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: "
     "1.0 tokens/s, Running: 5 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%\n",
     "Engines Aggregated is 0"),
])
def test_a_scrape_or_log_that_cannot_be_read_whole_is_refused(
        tmp_path: Path, text: str, message: str) -> None:
    """A malformed line of a metric observe reads, a histogram that runs backwards between
    scrapes, a NaN bucket edge, an absurd stats line: refused, not skipped or printed."""
    path = tmp_path / "in.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=re.escape(message)):
        read_source(str(path))


def test_a_page_whose_only_samples_are_malformed_names_the_first_of_them(
        tmp_path: Path) -> None:
    """A label set left unclosed is named, whether or not the page has any good sample: a
    page of nothing else had been called "not a metrics page" (an audit found). A file of no
    sample-shaped line at all is still no metrics page."""
    broken = 'vllm:num_requests_running{model_name="x" 24'
    path = tmp_path / "bad.txt"
    path.write_text(f"# HELP x\n{broken}\nvllm:num_requests_waiting{{model_name=\"x\"}} \n")
    with pytest.raises(InputError) as alone:
        read_source(str(path))
    path.write_text(RUN + 'vllm:kv_cache_usage_perc{model_name="m"} 0.5 junk\n')
    with pytest.raises(InputError) as inside:
        read_source(str(path))
    said = f"{broken!r} is not a Prometheus sample (name{{labels}} value [timestamp])"
    assert said in str(alone.value) and "not a metrics page" not in str(alone.value)
    # worded as a malformed line inside a good page is
    assert str(inside.value).endswith("is not a Prometheus sample (name{labels} value "
                                      "[timestamp])")
    path.write_text("hello world\nthis is prose\n")
    with pytest.raises(InputError, match="this is not a metrics page"):
        read_source(str(path))


def test_a_histogram_with_no_finite_bucket_gives_its_mean_only(tmp_path: Path) -> None:
    path = tmp_path / "inf.txt"
    path.write_text(RUN + f'{ITL_H}_bucket{{le="+Inf",model_name="m"}} 10\n'
                    f'{ITL_H}_count{{model_name="m"}} 10\n{ITL_H}_sum{{model_name="m"}} 0.2\n')
    obs = read_source(str(path))
    assert obs.latency_ms["itl"] == {"mean": pytest.approx(20), "count": 10}
    assert any("interpolated within the histograms' buckets" in n for n in obs.notes)


AIPERF = {"time_to_first_token": {"unit": "ms", "avg": 90}, "output_token_throughput":
          {"avg": 2000}, "inter_token_latency": {"unit": "ms", "avg": 20}}


@pytest.mark.parametrize(("changes", "message"), [
    ({"time_to_first_token": 90}, "time_to_first_token must be an object of statistics"),
    ({"request_count": {"avg": -5}}, "request_count.avg is -5"),
    ({"request_count": {"avg": 0.5}}, "request_count is 0.5"),
    ({"inter_token_latency": {"unit": "parsecs", "avg": 20}}, "has unit 'parsecs', not a time unit"),
    ({"time_to_first_token": {"avg": -90}}, "time_to_first_token.avg is -90"),
    ({"output_token_throughput": {"avg": int("9" * 400)}}, "output_token_throughput.avg is inf"),
    ({"input_config": "x"}, None),
])
def test_genai_perf_and_aiperf_fields_of_the_wrong_shape_are_refused_by_name(
        tmp_path: Path, changes: dict[str, object], message: str | None) -> None:
    path = tmp_path / "profile_export_aiperf.json"
    path.write_text(json.dumps({**AIPERF, **changes}))
    if message is None:
        assert read_source(str(path)).generation_tok_s == 2000
        return
    with pytest.raises(InputError, match=re.escape(message)):
        read_source(str(path))
    path.write_text(json.dumps({**AIPERF, "inter_token_latency": {"unit": "us", "avg": 20000}}))
    assert read_source(str(path)).latency_ms["itl"]["mean"] == pytest.approx(20)


@pytest.mark.parametrize(("fields", "message"), [
    ({"completed": 0.001}, "completed is 0.001; requests complete whole"),
    ({"mean_itl_ms": 1e-300}, "under a microsecond is not a measurement"),
    ({"total_input_tokens": 1e17}, "total_input_tokens ÷ completed is 2e+14"),
])
def test_a_bench_whose_derived_figures_are_absurd_is_refused(
        tmp_path: Path, fields: dict[str, float], message: str) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"duration": 60, "completed": 500, "output_throughput": 2000,
                                "mean_itl_ms": 20, "total_input_tokens": 5e5, **fields}))
    with pytest.raises(InputError, match=re.escape(message)):
        read_source(str(path))


def test_an_unfetchable_url_and_a_path_with_a_newline_are_one_line_errors(
        capsys: pytest.CaptureFixture[str]) -> None:
    for source, said in (("http://127.0.0.1:abc/metrics", "is not a URL ridgeline can fetch"),
                         ("/no\nsuch.txt", "no such file: /no\\nsuch.txt")):
        code = main(["observe", source, "--model", "llama-3.1-8b", "--gpu", "h100"] +
                    (["--duration", "0"] if source.startswith("http") else []))
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and said in err


def test_counters_of_one_engines_ranks_count_once_and_a_late_realtime_counter_falls_back(
        tmp_path: Path) -> None:
    """SGLang may export its counters on every rank of one engine (pipeline stages): they
    report the same tokens, counted once, as its gauges are. A realtime counter that first
    appears mid-window (a labelled counter has no series before its first increment) leaves
    the completion counters to give the rates, with their note."""
    def scrape(t: int, tokens: float, realtime: bool) -> str:
        return f"# scrape_time {t}\n" + "".join(
            f'sglang:num_running_reqs{{pp_rank="{r}"}} 40\n'
            f'sglang:generation_tokens_total{{pp_rank="{r}"}} {tokens}\n'
            + (f'sglang:realtime_tokens_total{{mode="decode",pp_rank="{r}"}} {tokens}\n'
               if realtime else "") for r in (0, 1))

    path = tmp_path / "ranks.prom"
    path.write_text(scrape(1764500000, 1e6, True) + scrape(1764500060, 1.126e6, True))
    assert read_source(str(path)).generation_tok_s == pytest.approx(2100)
    path.write_text(scrape(1764500000, 1e6, False) + scrape(1764500060, 1.126e6, True))
    obs = read_source(str(path))
    assert obs.generation_tok_s == pytest.approx(2100)
    assert any("when it finishes" in n for n in obs.notes)


def test_ranks_of_one_engine_that_disagree_are_noted_not_hidden(tmp_path: Path) -> None:
    """The tensor ranks of one SGLang scheduler report the same requests: 47 and 48 is a
    scrape read a moment apart; 10 and 100 is no one engine, and the mean (55) says so."""
    def scrape(a: int, b: int) -> str:
        return "".join(f'sglang:num_running_reqs{{model_name="m",tp_rank="{r}"}} {n}\n'
                       f'sglang:num_queue_reqs{{model_name="m",tp_rank="{r}"}} 0\n'
                       for r, n in ((0, a), (1, b)))

    path = tmp_path / "ranks.prom"
    path.write_text(scrape(47, 48))
    obs = read_source(str(path))
    assert obs.running == [47.5] and not any("ranks of one engine" in n for n in obs.notes)
    path.write_text(scrape(10, 100))
    obs = read_source(str(path))
    assert obs.running == [55]
    assert any("ranks of one engine read 10 and 100" in n for n in obs.notes)


def test_emitting_measurements_says_what_it_wrote(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A window of /metrics scrapes gives calibrate a row and the report says so; a single
    scrape (its latency the server's lifetime, its batch one instant: a +99 % row an audit
    found) and a server log give none, so no file is left for calibrate to fit."""
    out = tmp_path / "rows.csv"  # answers 4x the fixture's: few steps carry a prompt
    assert main(["observe", str(timed_window(tmp_path, output_times=4)), "--model",
                 "gpt-oss-20b", "--gpu", "h100", "--emit-measurements", str(out), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    wrote = next(n for n in notes if n.startswith("wrote 1 row"))
    assert wrote.startswith(f"wrote 1 row for `ridgeline calibrate` to {out}")
    assert "the steps that run its prompts beside the decodes" in wrote  # the load's prompts
    single = tmp_path / "single.csv"
    assert main(["observe", str(FIXTURES / "vllm_metrics.txt"), "--model", "llama-3.1-8b",
                 "--gpu", "h100", "--emit-measurements", str(single), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("one scrape's latency histogram covers the server's lifetime" in n
               for n in notes) and not single.exists()
    empty = tmp_path / "none.csv"
    assert main(["observe", str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-8b",
                 "--gpu", "h100", "--emit-measurements", str(empty), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith("--emit-measurements wrote nothing") for n in notes)
    assert not empty.exists()


def test_a_batch_past_the_ridge_is_not_called_idle(capsys: pytest.CaptureFixture[str]) -> None:
    """400 running on an H100 with nothing waiting and the pool 85 % full: the batch is past
    the 8B model's ridge (296), so the advice is not "fewer GPUs, send more load" (an audit
    found it was), and below the ridge the advice names the batch it could grow to."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.engines import profile_for
    from ridgeline.reports.observe import observe_report

    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    busy = observe_report(read_source_text(scrape_with(400, 0, 0.85, 30000.0)), dep,
                          profile_for("vllm"), 1000)
    assert busy.fraction == 1.0 and busy.wall == "the ridge"
    assert "fewer GPUs" not in busy.lever and "latency" in busy.lever
    light = observe_report(read_source_text(scrape_with(124, 0, 0.3, 30000.0)), dep,
                           profile_for("vllm"), 1000)
    assert light.wall == "neither" and "124 of the" in light.lever
    assert f"at batch {first_whole_batch(light.ridge_batch):,}" in light.lever
    assert light.ridge_batch == pytest.approx(light.ridge)  # 2 B a weight: batch = ridge


def test_polling_flags_on_a_saved_file_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--duration 30 on a saved scrape was silently ignored: a user would read the report
    as a 30-second window."""
    for flags, said in ((("--duration",), "--duration polls a URL"),
                        (("--interval",), "--interval polls a URL"),
                        (("--duration", "--interval"), "--duration and --interval poll a URL")):
        code = main(["observe", str(FIXTURES / "vllm_metrics.txt"), "--model", "llama-3.1-8b",
                     "--gpu", "h100", *(a for flag in flags for a in (flag, "30s"))])
        err = capsys.readouterr().err
        assert code == 2 and said in err and err.count("\n") == 1


def test_a_benchs_itl_is_predicted_with_the_prompt_work_its_steps_carry() -> None:
    """A bench's mean ITL spans every step, those running prompts too: in a steady state a
    prompt of the mean input arrives every mean output ÷ batch steps and runs in a step of
    its own beside the decodes, so the prediction is the time-weighted mean of that mixed
    step and the decode-only ones, slower than decode alone."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.cost import Seq, decode_batch, step_time_s
    from ridgeline.engines import profile_for
    from ridgeline.reports.observe import observe_report

    obs = read_source(str(FIXTURES / "vllm_bench.json"))
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"))
    profile = profile_for("vllm")
    report = observe_report(obs, dep, profile, None)
    b = round(obs.batch or 0)
    assert obs.mean_prompt_tokens and obs.mean_output_tokens and b > 0
    prompt = round(obs.mean_prompt_tokens)
    assert report.prompt_steps == ((Seq(prompt, 0),),)  # under the step budget: one step
    each = (obs.batch or 0) / obs.mean_output_tokens  # prompts a step starts
    decode_only = step_time_s(dep, decode_batch(b, report.context), profile)
    mixed = step_time_s(dep, [*decode_batch(b, report.context), Seq(prompt, 0)], profile)
    assert report.predicted_itl_ms == pytest.approx(
        ((1 - each) * decode_only + each * mixed) * 1e3, rel=1e-9)
    assert report.predicted_itl_ms > 1.2 * decode_only * 1e3


def test_a_llama_server_whose_requests_wait_names_its_slots_as_the_wall(
        capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server's requests wait for a free slot (-np), not for the scheduler's seats:
    the wall reads "slots" and its lever names -np, where vLLM's would name --max-num-seqs."""
    assert main(["observe", str(FIXTURES / "llamacpp_metrics.txt"), "--model", "llama-3.1-8b",
                 "--gpu", "rtx-4090", "--weights", "q4_k_m"]) == 0
    out = capsys.readouterr().out
    assert "wall: slots — requests wait for a free slot" in out and "--max-num-seqs" not in out


def counters(t: float, requests: float, prompt: float, generated: float, running: float = 20,
             kv: float = 0.03, itl_count: float = 0.0) -> str:
    """One timed vLLM scrape: the batch, the KV fill, the token and request counters, and an
    ITL histogram of ``itl_count`` observations at 13 ms."""
    m = 'model_name="m"'
    return (f"# scrape_time {t}\n"
            f"vllm:num_requests_running{{{m}}} {running}\n"
            f"vllm:num_requests_waiting{{{m}}} 0\n"
            f"vllm:kv_cache_usage_perc{{{m}}} {kv}\n"
            f"vllm:prompt_tokens_total{{{m}}} {prompt}\n"
            f"vllm:generation_tokens_total{{{m}}} {generated}\n"
            f"vllm:request_success_total{{{m}}} {requests}\n"
            f'vllm:inter_token_latency_seconds_bucket{{{m},le="0.02"}} {itl_count}\n'
            f'vllm:inter_token_latency_seconds_bucket{{{m},le="+Inf"}} {itl_count}\n'
            f"vllm:inter_token_latency_seconds_sum{{{m}}} {itl_count * 0.013}\n"
            f"vllm:inter_token_latency_seconds_count{{{m}}} {itl_count}\n")


def test_a_windows_context_comes_from_the_windows_counters_not_the_lifetime(
        tmp_path: Path) -> None:
    """Earlier traffic had 8k-token prompts; over the 60 s window the counters add 50,000
    prompt and 30,000 output tokens over 100 requests: 500 + 300 ÷ 2 = 650 tokens a request
    (the KV fill agrees: 3 % of 432,000 over 20 running is 648), not the lifetime's 7,422.
    The row written for calibrate carries the window's context too."""
    path = tmp_path / "mix.prom"
    path.write_text(counters(1764500000, 1000, 8_000_000, 450_000, itl_count=1e6)
                    + counters(1764500060, 1100, 8_050_000, 480_000, itl_count=1.03e6))
    obs = read_source(str(path))
    assert obs.mean_prompt_tokens == 500 and obs.mean_output_tokens == 300
    rows = tmp_path / "rows.csv"
    assert main(["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100",
                 "--emit-measurements", str(rows)]) == 0
    (row,) = list(csv.DictReader(rows.open()))
    assert row["context_len"] == "650"
    one = tmp_path / "one.prom"  # a single scrape has only the lifetime: 8,000,000 ÷ 1,000
    one.write_text(counters(1764500000, 1000, 8_000_000, 450_000))
    assert read_source(str(one)).mean_prompt_tokens == 8_000


def test_a_counter_born_mid_window_counts_only_when_the_server_started_inside_it(
        tmp_path: Path) -> None:
    """SGLang creates its labelled counters at the first finished request: a fresh server's
    first scrape has none. Its start inside the 100 s window (process_start_time_seconds)
    makes them the window's: 600,000 prompt and 150,000 output tokens are 6,000 and 1,500
    tok/s. Without that start, a counter the first scrape lacks has no known start: no rates
    and no lengths, rather than a lifetime read as the window."""
    head = ('sglang:num_running_reqs{model_name="m",tp_rank="0"} 60\n'
            'sglang:num_queue_reqs{model_name="m",tp_rank="0"} 0\n'
            'sglang:token_usage{model_name="m",tp_rank="0"} 0.5\n')
    later = ('sglang:prompt_tokens_total{model_name="m"} 600000\n'
             'sglang:generation_tokens_total{model_name="m"} 150000\n'
             'sglang:num_requests_total{model_name="m"} 300\n')
    started = "process_start_time_seconds 1764500001\n"
    path = tmp_path / "fresh.prom"
    path.write_text(f"# scrape_time 1764500000\n{head}# scrape_time 1764500100\n{head}{later}"
                    f"{started}")
    obs = read_source(str(path))
    assert obs.prompt_tok_s == pytest.approx(6_000)
    assert obs.generation_tok_s == pytest.approx(1_500)
    assert obs.mean_prompt_tokens == 2_000 and obs.mean_output_tokens == 500
    path.write_text(f"# scrape_time 1764500000\n{head}# scrape_time 1764500100\n{head}{later}")
    obs = read_source(str(path))
    assert obs.prompt_tok_s is None and obs.generation_tok_s is None
    assert obs.mean_prompt_tokens is None and obs.mean_output_tokens is None
    path.write_text(f"# scrape_time 1764500000\n{head}# scrape_time 1764500100\n{head}")
    notes = read_source(str(path)).notes  # no counter at all: said, not silently dropped
    assert any(n.startswith("no prompt-token counter") for n in notes)
    assert any(n.startswith("no generation-token counter") for n in notes)


def test_a_pipelines_explain_reproduces_its_fraction_with_the_micro_batch(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Under -pp 2 each stage multiplies ⌈8 ÷ 2⌉ = 4 sequences: the formula --explain shows,
    and the text, say so, and their inputs give the fraction printed."""
    argv = ["observe", str(FIXTURES / "vllm_metrics.txt"), "--model", "llama-3.1-70b", "--gpu",
            "h100", "--num-gpus", "2", "-pp", "2"]
    assert main([*argv, "--explain"]) == 0
    out = capsys.readouterr().out
    assert "min(1, (2 × ⌈batch ÷ 2 micro-batches⌉ ÷ bytes per weight) ÷ ridge)" in out
    assert "micro-batch = 4" in out
    assert "each of 2 pipeline stages multiplying a micro-batch of 4" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stage_batch"] == 4
    assert data["fraction_of_arithmetic"] == pytest.approx(2 * 4 / 2 / data["ridge_flop_per_byte"])


def trtllm_page(t: float, running: float, generated: float, requests: float,
                tpot_count: float) -> str:
    """trtllm-serve's /prometheus/metrics (tensorrt_llm/metrics/collector.py): its iteration
    gauges, its per-request counters and TPOT histogram (one observation a request, 15 ms)."""
    m = 'engine_type="trtllm",model_name="meta-llama/Llama-3.1-8B-Instruct"'
    return (f"# scrape_time {t}\n"
            f"trtllm_num_requests_running{{{m}}} {running}\n"
            f"trtllm_num_requests_waiting{{{m}}} 0.0\n"
            f"trtllm_kv_cache_utilization{{{m}}} 0.41\n"
            f'trtllm_request_success_total{{{m},finished_reason="stop"}} {requests}\n'
            f"trtllm_prompt_tokens_total{{{m}}} {4 * generated}\n"
            f"trtllm_generation_tokens_total{{{m}}} {generated}\n"
            f'trtllm_time_per_output_token_seconds_bucket{{{m},le="0.025"}} {tpot_count}\n'
            f'trtllm_time_per_output_token_seconds_bucket{{{m},le="+Inf"}} {tpot_count}\n'
            f"trtllm_time_per_output_token_seconds_count{{{m}}} {tpot_count}\n"
            f"trtllm_time_per_output_token_seconds_sum{{{m}}} {tpot_count * 0.015}\n")


def test_tensorrt_llms_prometheus_page_is_read(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """trtllm-serve's running gauge, KV utilization (used ÷ max blocks), token counters and
    TPOT histogram are read: 48 running, 30,000 output tokens in 10 s is 3,000 tok/s, TPOT
    15 ms. Without --engine, the page's metric names choose TensorRT-LLM; another engine
    named is cautioned as sizing another pool than the server's."""
    path = tmp_path / "trtllm.prom"
    path.write_text(trtllm_page(1764500000, 48, 300_000, 1200, 1200)
                    + trtllm_page(1764500010, 48, 330_000, 1300, 1300))
    obs = read_source(str(path))
    assert obs.engine_family == "trtllm" and obs.running == [48, 48]
    assert obs.kv_usage == [0.41, 0.41] and obs.generation_tok_s == pytest.approx(3_000)
    assert obs.latency_ms["itl"]["mean"] == pytest.approx(15)
    assert obs.mean_output_tokens == 300 and obs.mean_prompt_tokens == 1_200
    assert any("one observation per finished request" in n for n in obs.notes)
    base = ["observe", str(path), "--model", "llama-3.1-8b", "--gpu", "h100", "--json"]
    assert main([*base, "--engine", "trtllm"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["predicted_itl_s"] > 0 and "itl" in data["gap"]
    assert main(base) == 0
    assert json.loads(capsys.readouterr().out)["predicted_itl_s"] == data["predicted_itl_s"]
    assert main([*base, "--engine", "vllm"]) == 0
    assert any(c.startswith("the source carries trtllm's metrics, but vllm's pool")
               for c in json.loads(capsys.readouterr().out)["cautions"])
    bare = tmp_path / "bare.prom"  # TensorRT-LLM 1.1: request latencies only
    bare.write_text('trtllm_request_success_total{finished_reason="stop"} 3\n')
    with pytest.raises(InputError, match="enable_iter_perf_stats"):
        read_source(str(bare))


def test_a_poll_times_each_scrape_when_its_response_is_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The server counts 1,000 tokens a second; its first answer takes half a second (and
    ridgeline's first fetch loads the HTTP client). Timed before each fetch, the window ran
    from before the first response and the rate read low; timed as each response comes in,
    it is 1,000."""
    import ridgeline.observe

    fake = FakeClock()
    delays = iter([0.5] + [0.01] * 10)

    def answer(url: str, timeout_s: float) -> str:
        fake.now_s += next(delays)
        return scrape_with(8, 0, 0.2, 1000 * fake.now_s)

    monkeypatch.setattr(ridgeline.observe, "fetch", answer)
    obs = poll("http://127.0.0.1:1/metrics", duration_s=3, interval_s=1, clock=fake.clock,
               sleep=fake.sleep)
    assert obs.generation_tok_s == pytest.approx(1000)


def test_a_poll_is_timed_in_unix_seconds_to_meet_the_servers_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A poll's scrapes carry the wall clock, as saved ones do, so a server's start can be
    placed in the window: it restarts 1.2 s in (process_start_time_seconds), its generation
    counter absent until then. Counted from zero, 500 then 1,500 tokens: 1,500 over the 3 s
    window, not left unread."""
    import ridgeline.observe

    fake, start_unix_s = FakeClock(), 1764500000.0

    def answer(url: str, timeout_s: float) -> str:
        if fake.now_s < 1.2:  # the old process, before its counter was exported
            return "\n".join(ln for ln in scrape_with(8, 0, 0.2, 0.0).splitlines()
                             if "generation_tokens_total" not in ln) + "\n"
        return (scrape_with(8, 0, 0.2, 1000 * fake.now_s - 1500)
                + f"process_start_time_seconds {start_unix_s + 1.2}\n")

    monkeypatch.setattr(ridgeline.observe, "fetch", answer)
    obs = poll("http://127.0.0.1:1/metrics", duration_s=3, interval_s=1, clock=fake.clock,
               sleep=fake.sleep, wall=lambda: start_unix_s)
    assert any("first appears mid-window, after the server's process started 1 s into it"
               in n for n in obs.notes)
    assert obs.generation_tok_s == pytest.approx(1500 / 3)


def test_a_merged_histogram_window_is_checked_again() -> None:
    """One engine's +Inf bucket with no _count or _sum of its own passes in the scrapes it
    shares with the other engine's count, but not in the window: refused, not 'p99 inf ms'."""
    def at(t: float, n: float, broken: bool) -> str:
        lines = [f"# scrape_time {t}",
                 'vllm:num_requests_running{engine="0"} 32',
                 f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.5"}} {n}',
                 f'vllm:time_to_first_token_seconds_count{{engine="0"}} {n}',
                 f'vllm:time_to_first_token_seconds_sum{{engine="0"}} {n * 0.2}']
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{engine="{int(broken)}",'
                     f'le="+Inf"}} {n}')
        return "\n".join(lines) + "\n"

    assert read_source_text(at(1764500000, 2000, False) + at(1764500010, 2040, False)
                            ).latency_ms["ttft"]["mean"] == pytest.approx(200)
    with pytest.raises(InputError, match="its \\+Inf bucket holds"):
        read_source_text(at(1764500000, 2000, True) + at(1764500010, 2040, True))


def test_observe_names_the_ridge_as_a_batch_and_as_flop_per_byte_as_utilization_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """"batch 34.0 against a ridge of 295" read as a batch of 295 where it was FLOP per byte:
    observe names the ridge batch and the intensity, the same pair utilization names."""
    ridge = re.compile(r"against a ridge batch of ([\d,]+) \(([\d,]+) FLOP per byte\)")
    assert main(["observe", str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-8b",
                 "--gpu", "h100", "--weights", "fp8"]) == 0
    observed = ridge.search(capsys.readouterr().out)
    assert main(["utilization", "--gpu", "h100", "--running", "34", "--model", "llama-3.1-8b",
                 "--weights", "fp8", "--context", "2000"]) == 0
    utilized = ridge.search(capsys.readouterr().out)
    assert observed is not None and utilized is not None
    assert observed.groups() == utilized.groups()
    assert observed.group(1) != observed.group(2)  # fp8: a byte a weight, half the intensity


def test_observe_says_its_share_is_the_weight_matrices_as_utilization_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """400 running past the ridge reads 100 % of the arithmetic billed for: the weight
    matrices', not the whole step's (whose attention keeps far less busy), said in the same
    words utilization uses; a MoE's is the weights every token reads."""
    from ridgeline import Deployment, resolve_accelerator, resolve_model
    from ridgeline.engines import profile_for
    from ridgeline.reports.observe import observe_report
    from ridgeline.reports.utilization import billed_scope

    h100 = resolve_accelerator("h100")
    for model, moe in (("llama-3.1-8b", False), ("qwen3-30b-a3b", True)):
        dep = Deployment.build(resolve_model(model), h100)
        report = observe_report(read_source_text(scrape_with(400, 0, 0.85, 30000.0)), dep,
                                profile_for("vllm"), 1000)
        text = "\n".join(report.text_lines())
        assert f"of the arithmetic you are billed for{billed_scope(moe)}" in text
    assert billed_scope(False) != billed_scope(True)


def test_a_scrape_without_an_itl_histogram_is_not_told_it_is_a_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The SGLang fixture's timed scrapes carry no ITL histogram, so no decode row can be read
    from them; the note had said "which /metrics scrapes carry and a log does not" of a
    metrics file, naming neither what was missing nor the source it was. A log keeps its
    wording."""
    out = tmp_path / "rows.csv"
    source = FIXTURES / "sglang_metrics.txt"
    assert "inter_token_latency" not in source.read_text()
    assert main(["observe", str(source), "--model", "qwen3-8b", "--gpu", "h100",
                 "--emit-measurements", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "metrics" and "mean" not in (data["latency_s"] or {}).get("itl", {})
    (note,) = [n for n in data["notes"] if n.startswith("--emit-measurements wrote nothing")]
    assert "a log does not" not in note
    assert "the source gives none: no ITL histogram that grew between its scrapes" in note
    assert not out.exists()
    assert main(["observe", str(FIXTURES / "vllm_server.log"), "--model", "llama-3.1-8b",
                 "--gpu", "h100", "--emit-measurements", str(out), "--json"]) == 0
    (note,) = [n for n in json.loads(capsys.readouterr().out)["notes"]
               if n.startswith("--emit-measurements wrote nothing")]
    assert "which /metrics scrapes carry and a log does not" in note


def test_llama_servers_batch_names_its_slots_not_the_pool_as_the_cap(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B Q4_K_M on an RTX 4090 at 2,000 tokens, started with -np 4: the KV pool
    holds about 76 sequences, but llama-server runs one a slot. The line had read "the KV
    pool allows 4 sequences", blaming the pool for the slots' count; it names the slots, and
    --json says which caps it. With no -np given, the slots are counted as many as each hold
    one (capacity.decode_held, decode's count), so the pool is the cap."""
    from ridgeline.capacity import decode_held
    from ridgeline.catalog import resolve_model
    from ridgeline.deployment import Deployment
    from ridgeline.hardware import resolve_accelerator

    base = ["observe", str(FIXTURES / "llamacpp_metrics.txt"), "--model", "llama-3.1-8b",
            "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda", "--weights", "q4_k_m"]
    slots = 4
    argv = [*base, "--max-num-seqs", str(slots)]
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    held = d["pool_tokens_modelled"] // d["context_len"]  # llama.cpp's cells: one a token
    assert d["engine_max_batch"] == slots < held == d["conversations"]
    assert d["engine_max_batch_capped_by"] == "seats"
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "the KV pool allows" not in out
    assert (f"{slots} sequences of {d['context_len']:,} tokens (assumed: pass --context) run "
            f"at once, capped by llama-server's slots (-np {slots}): the KV pool holds "
            f"{held:,}") in out
    assert main([*base, "--json"]) == 0  # no -np given: a slot each, as many as the pool holds
    u = json.loads(capsys.readouterr().out)
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("rtx-4090"),
                           weights="q4_k_m", engine="llama.cpp-cuda")
    assert u["engine_max_batch"] == decode_held(dep, u["context_len"]) > slots
    assert u["engine_max_batch_capped_by"] == "pool"
    # where the pool is the cap, the line still says so
    assert main(["observe", str(FIXTURES / "vllm_metrics.txt"), "--model", "llama-3.1-8b",
                 "--gpu", "h100", "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["engine_max_batch_capped_by"] == "pool" and v["engine_max_batch"] == v["conversations"]
