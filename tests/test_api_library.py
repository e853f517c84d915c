"""ridgeline as a library in a notebook: shared records that a user cannot poison, settings
and ridges refused with InputError, short reprs, docstrings with units, and the strings and
types the results and settings use, exported. docs/api.md's CLI route runs here."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pickle
import re
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import pytest

import ridgeline as rl
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
API_DOC = ROOT / "docs" / "api.md"
H100 = rl.resolve_accelerator("h100")
LLAMA_8B = rl.resolve_model("llama-3.1-8b")
DEP = rl.Deployment.build(LLAMA_8B, H100, engine="vllm")


def test_a_notebook_edit_of_a_cards_peaks_cannot_change_later_lookups() -> None:
    """resolve_accelerator hands every caller the catalog's one record: doubling its bf16
    peak in place raises, and a fresh lookup and the ridge keep the spec sheet's figures."""
    ridge = DEP.dense_ridge_flop_per_byte
    card = rl.resolve_accelerator("h100")
    with pytest.raises(TypeError, match="read-only"):
        card.peak_flops["bf16"] *= 2
    with pytest.raises(TypeError, match="read-only"):
        card.figure_sources["peak_flops"] = "my guess"  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        card.peak_flops.update(bf16=1.0)  # type: ignore[attr-defined]
    again = rl.resolve_accelerator("H100 SXM")
    assert again.peak("bf16") == H100.peak_flops["bf16"] == dict(card.peak_flops)["bf16"]
    assert rl.Deployment.build(LLAMA_8B, again, engine="vllm").dense_ridge_flop_per_byte == ridge


def test_a_read_only_card_still_pickles_copies_replaces_and_writes_json() -> None:
    """pickle, copy and deepcopy give an equal record whose peaks are read-only too;
    dataclasses.replace builds another card from a plain dict; asdict goes to JSON."""
    for other in (pickle.loads(pickle.dumps(H100)), copy.copy(H100), copy.deepcopy(H100)):
        assert other == H100 and other.peak("bf16") == H100.peak("bf16")
        with pytest.raises(TypeError, match="read-only"):
            other.peak_flops["bf16"] = 0.0  # type: ignore[index]
    doubled = dataclasses.replace(H100, peak_flops={"bf16": 2 * H100.peak("bf16")})
    assert doubled.peak("bf16") == 2 * H100.peak("bf16") and H100.peak("bf16") < doubled.peak(
        "bf16")
    record = json.loads(json.dumps(dataclasses.asdict(H100)))
    assert record["peak_flops"] == dict(H100.peak_flops)
    assert record["figure_sources"] == dict(H100.figure_sources)


def test_a_catalog_models_spec_holds_no_mutable_container() -> None:
    """resolve_model's cached specs are tuples and frozen records all the way down, so no
    notebook edit can change the next lookup's (the accelerators' mappings are read-only)."""
    def mutable(value: object, seen: set[int]) -> list[str]:
        if id(value) in seen:
            return []
        seen.add(id(value))
        if isinstance(value, (list, set, bytearray)) or (
                isinstance(value, dict) and type(value) is dict):
            return [type(value).__name__]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return [found for f in dataclasses.fields(value)
                    for found in mutable(getattr(value, f.name), seen)]
        if isinstance(value, (tuple, dict)):
            items = value.values() if isinstance(value, dict) else value
            return [found for item in items for found in mutable(item, seen)]
        return []

    for name in ("llama-3.1-8b", "deepseek-v3", "gpt-oss-20b", "gemma-3-27b"):
        assert mutable(rl.resolve_model(name), set()) == [], name
    assert mutable(DEP, set()) == []


def test_resolve_model_takes_a_path_object_and_refuses_a_number() -> None:
    config = ROOT / "src" / "ridgeline" / "data" / "models" / "meta-llama--Meta-Llama-3-8B.json"
    assert rl.resolve_model(config) == rl.resolve_model(str(config))
    for bad in (3, None, b"llama-3.1-8b"):
        with pytest.raises(rl.InputError, match=r"model must be a name or a path .*, got "):
            rl.resolve_model(bad)  # type: ignore[arg-type]
    with pytest.raises(rl.InputError, match="accelerator must be a name such as 'h100', got int"):
        rl.resolve_accelerator(100)  # type: ignore[arg-type]


def test_the_pool_and_fit_refuse_settings_that_are_not_engine_settings() -> None:
    for call in (lambda: rl.kv_pool(DEP, {"max_model_len": 8192}),  # type: ignore[arg-type]
                 lambda: rl.fit_report(DEP, 8192, {"max_model_len": 8192})):  # type: ignore[arg-type]
        with pytest.raises(rl.InputError, match=r"settings must be a ridgeline\.EngineSettings "
                           r".*got dict \{'max_model_len': 8192\}"):
            call()


@pytest.mark.parametrize(("given", "message"), [
    ({"max_num_seqs": 2.5}, "max_num_seqs must be a whole number, got 2.5"),
    ({"max_model_len": 8192.5}, "max_model_len must be a whole number, got 8192.5"),
    ({"max_num_seqs": True}, "max_num_seqs must be a whole number, got True"),
    ({"max_model_len": "8192"}, "max_model_len must be a whole number, got '8192'"),
    ({"block_size": 0}, "block_size must be positive, got 0"),
    ({"n_batch": float("nan")}, "n_batch must be a whole number, got nan"),
    ({"cudagraph_capture_sizes": (1, 2.5)}, "cudagraph_capture_sizes' size must be a whole"),
    ({"sglang_vlm_cache_size_mb": -1}, "sglang_vlm_cache_size_mb cannot be negative, got -1"),
    ({"gpu_memory_utilization": "0.9"}, "memory fraction must be a number, got '0.9'"),
    ({"gpu_memory_utilization": float("nan")}, "memory fraction must be in (0, 1], got nan"),
    ({"swa_full_tokens_ratio": 1.5}, "swa_full_tokens_ratio must be in (0, 1], got 1.5"),
    ({"fit_target_bytes": math.inf}, "fit_target_bytes must be a number of bytes of at least 0"),
    ({"drafter": "eagle"}, "drafter must be a ridgeline.EngineSpec, got str 'eagle'"),
    ({"lora": 8}, "lora must be a ridgeline.LoRASettings or a ridgeline.SGLangLoRASettings"),
    ({"engine_version": 0.11}, "engine_version must be a release such as '0.11'"),
])
def test_engine_settings_refuse_what_decode_floor_would_in_one_line(
        given: dict[str, object], message: str) -> None:
    with pytest.raises(rl.InputError, match=re.escape(message)):
        rl.EngineSettings(**given)  # type: ignore[arg-type]


def test_engine_settings_keep_a_whole_count_as_an_int() -> None:
    """block_size=16.0 is 16 (the pool's tokens an int, as annotated, and the pool the int's);
    numpy's int64 is an int; a list of capture sizes is stored as a tuple, so the settings
    hash."""
    np = pytest.importorskip("numpy")
    as_float = rl.EngineSettings(block_size=16.0, max_model_len=np.int64(8192))  # type: ignore[arg-type]
    as_int = rl.EngineSettings(block_size=16, max_model_len=8192)
    assert as_float == as_int and type(as_float.block_size) is int
    assert type(as_float.max_model_len) is int
    pool = rl.kv_pool(DEP, as_float)
    assert type(pool.tokens) is int and pool == rl.kv_pool(DEP, as_int)
    listed = rl.EngineSettings(cudagraph_capture_sizes=[1, 2, 4.0])  # type: ignore[arg-type]
    assert listed.cudagraph_capture_sizes == (1, 2, 4) and hash(listed) == hash(
        rl.EngineSettings(cudagraph_capture_sizes=(1, 2, 4)))


@pytest.mark.parametrize(("peak", "bandwidth", "message"), [
    (1e15, 0, "bandwidth_bytes_per_s must be positive, got 0"),
    (-1, 1, "peak_flops_per_s must be positive, got -1"),
    (math.nan, 1e12, "peak_flops_per_s must be positive and finite, got nan"),
    (1e15, math.inf, "bandwidth_bytes_per_s must be positive and finite, got inf"),
    ("1e15", 1e12, "peak_flops_per_s must be a number, got '1e15'"),
])
def test_ridge_point_refuses_what_is_not_a_positive_finite_figure(
        peak: float, bandwidth: float, message: str) -> None:
    with pytest.raises(rl.InputError, match=re.escape(message)):
        rl.ridge_point(peak, bandwidth)


def test_ridge_point_of_a_card_is_its_deployments_ridge() -> None:
    assert rl.ridge_point(H100.peak("bf16"), H100.memory_bandwidth_bytes_per_s) == pytest.approx(
        DEP.dense_ridge_flop_per_byte)


def _doc_blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", API_DOC.read_text(encoding="utf-8"), re.S)


def test_api_docs_cli_route_prints_decodes_expected_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    """docs/api.md's second example, ridgeline.cli.main with --json, prints what the doc says,
    and its figures are decode --json's expected step."""
    printed = StringIO()
    with redirect_stdout(printed):
        exec(compile(_doc_blocks("python")[1], str(API_DOC), "exec"), {})
    assert printed.getvalue() == _doc_blocks("text")[1]
    code, out, _ = run_cli(capsys, "decode", "llama-3.1-8b", "--gpu", "h100", "--batch",
                             "32", "--context", "2000", "--json")
    expected = json.loads(out)["points"][0]["expected"]
    assert printed.getvalue() == (
        f"exit {code}; expected on {expected['engine']}: {expected['time_s'] * 1e3:.2f} ms a "
        f"step, {expected['per_user_tok_s']:.1f} tok/s per user\n")


def test_api_docs_first_sentence_names_the_route_for_what_has_no_call() -> None:
    first = API_DOC.read_text(encoding="utf-8").split("\n\n")[1]
    assert not first.startswith("Every figure the CLI prints")
    assert 'ridgeline.cli.main([..., "--json"])' in " ".join(first.split())


def test_pool_tokens_and_the_logged_tokens_differ_for_a_windowed_model_as_the_doc_says(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-20b on an H100 at 8,192 tokens: the pool's block slots (tokens) are not the
    figure vLLM logs and fit prints (logged_tokens); docs/api.md quotes both and prints the
    second in its example."""
    dep = rl.Deployment.build(rl.resolve_model("gpt-oss-20b"), H100, engine="vllm")
    pool = rl.kv_pool(dep, rl.EngineSettings(max_model_len=8192))
    code, out, _ = run_cli(capsys, "fit", "gpt-oss-20b", "--gpu", "h100", "--max-model-len",
                           "8192", "--engine", "vllm", "--json")
    fit = json.loads(out)
    fit = fit.get("results", [fit])[0]
    assert code == 0 and pool.logged_tokens(8192) == fit["tokens"] != pool.tokens
    prose = " ".join(API_DOC.read_text(encoding="utf-8").split())
    assert f"`tokens` is {pool.tokens:,} and vLLM logs {pool.logged_tokens(8192):,}" in prose
    assert "pool.logged_tokens(8192)" in _doc_blocks("python")[0]


@pytest.mark.parametrize("cls", [rl.DecodeFloor, rl.PrefillFloor, rl.FitReport, rl.KVPool,
                                 rl.EngineSettings, rl.Lever])
def test_the_result_and_settings_classes_have_docstrings_with_a_worked_number(
        cls: type) -> None:
    """Not dataclass's stand-in (the signature), and each gives a figure."""
    doc = cls.__doc__ or ""
    assert not doc.startswith(f"{cls.__name__}(") and re.search(r"\d,\d{3}|\d\.\d", doc)


@pytest.mark.parametrize(("cls", "name"), [
    (rl.DecodeFloor, "step_time_s"), (rl.DecodeFloor, "per_user_tok_s"),
    (rl.DecodeFloor, "aggregate_tok_s"), (rl.DecodeFloor, "time_s"), (rl.DecodeFloor, "bound"),
    (rl.PrefillFloor, "tokens_per_s"), (rl.FitReport, "verdict"), (rl.FitReport, "batch"),
    (rl.KVPool, "tokens")])
def test_the_headline_properties_have_docstrings(cls: type, name: str) -> None:
    assert getattr(cls, name).__doc__


def test_the_verdict_and_bound_strings_are_exported_constants() -> None:
    """The article's 8B: memory-bound decode, a compute-bound prefill, a fit under the ridge;
    the 70B fp8 with a 100,000-token conversation does not fit one H100."""
    assert rl.decode_floor(DEP, 32, 2000).bound == rl.MEMORY_BOUND
    assert rl.prefill_floor(DEP, 2048).bound == rl.COMPUTE_BOUND
    assert rl.fit_report(DEP, 8192).verdict == rl.UNDER_RIDGE
    assert rl.fit_report(DEP, 128).verdict == rl.CLEARS_RIDGE
    big = rl.Deployment.build(rl.resolve_model("llama-3.1-70b"), H100, weights="fp8",
                              engine="vllm")
    assert rl.fit_report(big, 100_000).verdict == rl.DOES_NOT_FIT
    assert {rl.HOST_MEMORY_BOUND, rl.HOST_LINK_BOUND} == {"host memory", "the host link"}


def test_reprs_show_the_headline_not_the_explain_steps() -> None:
    """A decode floor's repr was 3,685 characters of --explain steps, without step_time_s; a
    fit's 18,887. Now each fits a line or two and names its headline figures."""
    floor = rl.decode_floor(DEP, 32, 2000)
    fit = rl.fit_report(DEP, 8192)
    pool = rl.kv_pool(DEP, rl.EngineSettings(max_model_len=8192))
    shown = {
        floor: ("step_time_s=", f"bound={floor.bound!r}", "per_user_tok_s=", "batch=32"),
        rl.prefill_floor(DEP, 2048): ("time_s=", "tokens_per_s=", "prompt_len=2048"),
        fit: (f"verdict={fit.verdict!r}", f"conversations={fit.conversations}",
              f"batch={fit.batch}"),
        pool: (f"blocks={pool.blocks}", f"tokens={pool.tokens}", "block_size=64"),
        DEP: ("model='llama-3.1-8b'", "accelerator='h100-sxm'", "engine='vllm'"),
        LLAMA_8B: ("name='llama-3.1-8b'", "num_layers=32"),
        H100: ("id='h100-sxm'", "peak_flops="),
    }
    for record, parts in shown.items():
        text = repr(record)
        assert len(text) < 400 and "Step(" not in text, text
        assert all(part in text for part in parts), text
    assert repr(rl.EngineSettings(max_model_len=8192)) == "EngineSettings(max_model_len=8192)"
    assert repr(rl.EngineSettings()) == "EngineSettings()"


def test_the_types_settings_and_levers_hold_are_exported() -> None:
    fit = rl.fit_report(DEP, 8192)
    assert fit.levers and all(isinstance(lever, rl.Lever) for lever in fit.levers)
    lora = rl.LoRASettings(max_loras=2)
    assert rl.EngineSettings(lora=lora).lora == lora
    assert rl.EngineSettings(drafter=rl.EngineSpec(tokens=3, method="eagle")).drafter
