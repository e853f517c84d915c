"""observe's follow-ups to the SRE audit: a gzip'd scrape file read, SGLang's gen_throughput
gauge, a restart's time from process_start_time_seconds, and vLLM's release bounded by the
metric names a page carries."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ridgeline.errors import InputError
from ridgeline.observe import MAX_BYTES, read_source
from ridgeline.vllm_metric_releases import page_names, release_range
from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OBSERVE = ("observe", "--model", "llama-3.1-8b", "--gpu", "h100")
VLLM = 'model_name="m"'


def observe_json(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> dict:
    code, out, err = run_cli(capsys, *OBSERVE, str(path), "--json", *extra)
    assert code == 0, err
    answer: dict = json.loads(out)
    return answer


def refusal(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    code, out, err = run_cli(capsys, *OBSERVE, str(path))
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


# -- a gzip'd scrape file ------------------------------------------------------------------------
def test_a_gzip_scrape_file_reads_as_the_plain_one_whatever_its_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`scrape.txt.gz` was refused "decompress it first": it is known by its first bytes (a
    name without .gz too) and reads exactly as the scrape it holds, two gzip members (`gzip -c
    a b`) as one text."""
    page = (FIXTURES / "vllm_metrics.txt").read_bytes()
    plain, packed, named = (tmp_path / n for n in ("scrape.txt", "scrape.txt.gz", "metrics"))
    plain.write_bytes(page)
    packed.write_bytes(gzip.compress(page))
    named.write_bytes(gzip.compress(page))
    want = observe_json(capsys, plain)
    for path in (packed, named):
        got = observe_json(capsys, path)
        assert {k: v for k, v in got.items() if k != "source"} == \
            {k: v for k, v in want.items() if k != "source"}
    half = len(page) // 2
    cut = page.rfind(b"\n# scrape_time", 0, half) + 1 or half
    members = tmp_path / "two.gz"
    members.write_bytes(gzip.compress(page[:cut]) + gzip.compress(page[cut:]))
    assert read_source(str(members)).generation_tok_s == read_source(str(plain)).generation_tok_s


def test_a_gzip_scrape_cut_short_or_past_the_cap_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A truncated gzip file (a copy stopped midway), bytes after its stream that are no gzip,
    a stream that is not gzip past its magic, and one that inflates past the URL path's 16 MiB
    cap: each one line naming why, exit 2."""
    packed = gzip.compress((FIXTURES / "vllm_metrics.txt").read_bytes())
    cases = {"cut.gz": packed[: len(packed) // 2], "tail.gz": packed + b"trailing text",
             "bad.gz": packed[:10] + b"\xff" * 40,
             "big.gz": gzip.compress(b"#" * (MAX_BYTES + 2))}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    assert "stops before the gzip stream ends (cut short" in refusal(capsys, tmp_path / "cut.gz")
    assert "bytes after its gzip stream that are not gzip" in refusal(capsys,
                                                                       tmp_path / "tail.gz")
    assert "does not inflate" in refusal(capsys, tmp_path / "bad.gz")
    assert f"larger than {MAX_BYTES >> 20} MiB once inflated" in refusal(capsys,
                                                                         tmp_path / "big.gz")


# -- SGLang's gen_throughput ---------------------------------------------------------------------
def sglang_page(t: int, generated: float | None, gauge: float | None, running: int = 64) -> str:
    lines = [f"# scrape_time {t}", f'sglang:num_running_reqs{{{VLLM}}} {running}',
             f'sglang:num_queue_reqs{{{VLLM}}} 0', f'sglang:token_usage{{{VLLM}}} 0.4']
    if generated is not None:
        lines += [f'sglang:generation_tokens_total{{{VLLM}}} {generated}',
                  f'sglang:prompt_tokens_total{{{VLLM}}} {generated * 4}']
    if gauge is not None:
        lines.append(f'sglang:gen_throughput{{{VLLM}}} {gauge}')
    return "\n".join(lines) + "\n"


def window(tmp_path: Path, *pages: str) -> Path:
    path = tmp_path / "scrapes.prom"
    path.write_text("".join(pages))
    return path


def test_sglang_gen_throughput_gives_the_rate_where_no_counter_does(tmp_path: Path) -> None:
    """No generation counter on the page: the gauge's readings after the first scrape,
    averaged (1,400 and 1,600: 1,500 tok/s), are the rate, and a note says so; the first
    scrape's reading (the stretch before the window) is left out."""
    obs = read_source(str(window(tmp_path, sglang_page(1000, None, 9000.0),
                                 sglang_page(1010, None, 1400.0),
                                 sglang_page(1020, None, 1600.0))))
    assert obs.generation_tok_s == obs.gen_throughput_tok_s == pytest.approx(1500.0)
    assert any(n.startswith("generation tok/s: sglang:gen_throughput") for n in obs.notes)
    assert not any(n.startswith("no generation-token counter") for n in obs.notes)


def test_sglang_gen_throughput_cross_checks_the_completion_counters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """generation_tokens_total moves as requests finish: 6,000 tokens over 10 s (600 tok/s)
    beside a gauge at 1,500 is noted, naming the counters as the ones that lag, and the gauge
    goes in --json and on the rates line; a gauge that agrees (620) adds no note."""
    apart = window(tmp_path, sglang_page(1000, 50_000, 1500.0), sglang_page(1010, 56_000, 1500.0))
    obs = read_source(str(apart))
    assert obs.generation_tok_s == pytest.approx(600.0)
    (note,) = [n for n in obs.notes if "reads 1,500 tok/s, the token counters 600" in n]
    assert "moves only when a request finishes" in note
    answer = observe_json(capsys, apart)
    assert answer["gen_throughput_tok_s"] == pytest.approx(1500.0)
    code, out, _ = run_cli(capsys, *OBSERVE, str(apart))
    assert code == 0 and "generation 600 tok/s (its gen_throughput gauge 1,500)" in out
    close = window(tmp_path, sglang_page(1000, 50_000, 620.0), sglang_page(1010, 56_000, 620.0))
    assert not any("gen_throughput" in n for n in read_source(str(close)).notes)


def test_a_gen_throughput_reading_out_of_range_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="sglang:gen_throughput"):
        read_source(str(window(tmp_path, sglang_page(1000, 1, 10.0),
                               sglang_page(1010, 2, -5.0))))


# -- a restart's time ----------------------------------------------------------------------------
def vllm_page(t: int, generated: float, started: float, extra: str = "") -> str:
    return (f"# scrape_time {t}\nprocess_start_time_seconds {started}\n"
            f'vllm:num_requests_running{{{VLLM}}} 8\nvllm:num_requests_waiting{{{VLLM}}} 0\n'
            f'vllm:kv_cache_usage_perc{{{VLLM}}} 0.2\n'
            f'vllm:generation_tokens_total{{{VLLM}}} {generated}\n'
            f'vllm:prompt_tokens_total{{{VLLM}}} {generated * 2}\n' + extra)


def test_a_restart_is_placed_in_time_by_the_process_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two scrapes 30 s apart around a restart 12 s in: refused, naming when (the new process
    start, 12 s into the window) and between which scrapes; with a third scrape, the two after
    it are read and the note says when it restarted."""
    two = window(tmp_path, vllm_page(1000, 50_000, 100), vllm_page(1030, 4_000, 1012))
    err = refusal(capsys, two)
    assert "the server restarted 12 s into the window (process_start_time_seconds 100 → " \
        "1,012), between the scrapes 0 s and 30 s into the window, and no run of it has 2 " \
        "scrapes" in err
    three = window(tmp_path, vllm_page(1000, 50_000, 100), vllm_page(1030, 4_000, 1012),
                   vllm_page(1060, 10_000, 1012))
    obs = read_source(str(three))
    assert obs.generation_tok_s == pytest.approx(6_000 / 30)
    assert any(n.startswith("the server restarted 12 s into the window") and
               "read the 2 scrapes after it (30 s to 60 s)" in n for n in obs.notes)


# -- vLLM's release from its metric names --------------------------------------------------------
def test_release_ranges_from_names() -> None:
    """Each old name caps the release, a new one floors it; the tightest of each is kept."""
    found = release_range(page_names(["vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
                                      "vllm:inter_token_latency_seconds_bucket"]))
    assert found is not None and (found.first, found.last, found.text()) == \
        ("0.10.2", "0.11", "0.10.2 to 0.11")
    old = release_range({"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"})
    assert old is not None and old.newest == "0.10.1" and old.text() == "0.10.1 or earlier"
    v0 = release_range({"vllm:num_requests_swapped"})
    assert v0 is not None and v0.newest == "0.9 V0"
    mixed = release_range({"vllm:num_requests_swapped", "vllm:inter_token_latency_seconds"})
    assert mixed is not None and not mixed.consistent and mixed.newest is None
    assert release_range({"vllm:kv_cache_usage_perc"}) is None


def old_vllm_page(t: int, generated: float, extra: str = "") -> str:
    return (f"# scrape_time {t}\n"
            f'vllm:num_requests_running{{{VLLM}}} 8\nvllm:num_requests_waiting{{{VLLM}}} 0\n'
            f'vllm:gpu_cache_usage_perc{{{VLLM}}} 0.2\n'
            f'vllm:generation_tokens_total{{{VLLM}}} {generated}\n'
            f'vllm:prompt_tokens_total{{{VLLM}}} {generated * 2}\n'
            f'vllm:time_per_output_token_seconds_count{{{VLLM}}} {generated}\n'
            f'vllm:time_per_output_token_seconds_sum{{{VLLM}}} {generated * 0.02}\n'
            f'vllm:time_per_output_token_seconds_bucket{{{VLLM},le="+Inf"}} {generated}\n'
            + extra)


def test_an_old_page_is_sized_at_the_newest_release_its_names_allow(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """gpu_cache_usage_perc and time_per_output_token_seconds without their new names: 0.10.1
    or earlier, so the pool is the one --engine-version 0.10.1 models, not the newest
    release's; a note names the range and the names. --engine-version, or a cache_config_info
    on the page, leaves nothing inferred."""
    page = window(tmp_path, old_vllm_page(1000, 10_000), old_vllm_page(1010, 12_000))
    inferred = observe_json(capsys, page)
    assert inferred["engine_version_range"] == "0.10.1 or earlier"
    assert inferred["engine_version_inferred"] == "0.10.1"
    stated = observe_json(capsys, page, "--engine-version", "0.10.1")
    newest = observe_json(capsys, page, "--engine-version", "0.34")
    assert inferred["pool_tokens_modelled"] == stated["pool_tokens_modelled"] \
        != newest["pool_tokens_modelled"]
    assert stated["engine_version_inferred"] is None
    assert any(n.startswith("vLLM's release inferred from the page's metric names: 0.10.1 or "
                            "earlier (vllm:time_per_output_token_seconds without") and
               "the pool is sized at 0.10.1" in n for n in inferred["notes"])
    config = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="20000"} 1\n'
    sized = window(tmp_path, old_vllm_page(1000, 10_000, config),
                   old_vllm_page(1010, 12_000, config))
    answer = observe_json(capsys, sized)
    assert answer["engine_version_range"] == "0.10.1 or earlier"
    assert answer["engine_version_inferred"] is None


def test_names_that_contradict_each_other_infer_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    swapped = f'vllm:num_requests_swapped{{{VLLM}}} 0\n' \
        f'vllm:inter_token_latency_seconds_count{{{VLLM}}} 5\n'
    page = window(tmp_path, old_vllm_page(1000, 10_000, swapped),
                  old_vllm_page(1010, 12_000, swapped))
    answer = observe_json(capsys, page)
    assert answer["engine_version_inferred"] is None
    assert any("bound vLLM's release both ways at once" in n for n in answer["notes"])
