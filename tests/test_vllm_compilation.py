"""vLLM's compilation config pasted with a launch line (vllm_compilation.py): read onto the
CUDA-graph sizes, the graphs switch and torch.compile that fit, decode, prefill and simulate
already price, with every key it does not model refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.errors import InputError
from ridgeline.vllm_compilation import compilation_asked, dotted_argv
from ridgeline.vllm_graphs import capture_cap, capture_size_list, capture_sizes
from ridgeline.vllm_memory import compile_transient_bytes, vllm_data
from tests.conftest import run_cli

FIT = ("fit", "llama-3.1-8b", "--gpu", "h100", "--json")
DECODE = ("decode", "llama-3.1-8b", "--gpu", "h100", "--batch", "8", "--json")


def fitted(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *FIT, *flags)
    assert code == 0, (flags, err)
    found: dict[str, Any] = json.loads(out)
    return found


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


def expected_step_s(capsys: pytest.CaptureFixture[str], *flags: str) -> float:
    """decode's calibrated step time at batch 8 under ``flags``."""
    code, out, err = run_cli(capsys, *DECODE, *flags)
    assert code == 0, (flags, err)
    return float(json.loads(out)["points"][0]["expected"]["time_s"])


def graphs(report: dict[str, Any]) -> float:
    return float(report["taken_bytes_per_gpu"]["cuda_graphs"])


# -- the spellings ------------------------------------------------------------------------
def test_dotted_spellings_become_one_flag_and_a_key_the_parser_reads() -> None:
    assert dotted_argv(["fit", "m", "-cc.mode=0", "-O.cudagraph_mode", "FULL", "-O3",
                        "--compilation-config.pass_config.fuse_norm_quant=true"]) == [
        "fit", "m", "-cc", ".mode=0", "-O", ".cudagraph_mode=FULL", "-O", "3",
        "--compilation-config", ".pass_config.fuse_norm_quant=true"]


def test_a_dotted_key_nests_as_vllm_merges_it() -> None:
    found = compilation_asked([("-cc", ".cudagraph_capture_sizes=[8, 1, 2, 4, 4]"),
                               ("-cc", ".pass_config.fuse_norm_quant=true")], None, None, None)
    assert found.cudagraph_capture_sizes == (1, 2, 4, 8)


# -- the sizes ----------------------------------------------------------------------------
def test_a_listed_capture_of_four_sizes_takes_four_sizes_worth_of_graphs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """fit's CUDA-graph line counts the sizes the config lists, not vLLM's own list: the
    default list at this pool's seats is capture_size_list(cap) long, and four sizes take
    that share of its bytes."""
    default = fitted(capsys)
    listed = fitted(capsys, "--compilation-config", '{"cudagraph_capture_sizes": [1, 2, 4, 8]}')
    own = len(capture_size_list(capture_cap(default["max_num_seqs"])))
    assert own == 51
    assert graphs(listed) == pytest.approx(graphs(default) * 4 / own)
    assert listed["pool_bytes_per_gpu"] > default["pool_bytes_per_gpu"]


def test_every_spelling_of_the_list_counts_alike(capsys: pytest.CaptureFixture[str]) -> None:
    want = graphs(fitted(capsys, "-cc.cudagraph_capture_sizes=[1,2,4,8]"))
    assert graphs(fitted(capsys, "--cudagraph-capture-sizes", "1", "2", "4", "8")) == want
    assert graphs(fitted(capsys, "--cuda-graph-sizes", "1", "2", "4", "8")) == want


def test_cuda_graph_sizes_of_one_value_before_v0_11_1_is_its_every_8_list() -> None:
    found = compilation_asked([], None, [64], "0.10.2")
    assert found.cudagraph_capture_sizes == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert compilation_asked([], None, [64], "0.11.1").cudagraph_capture_sizes == (64,)


def test_full_decode_only_counts_the_decode_sizes_alone() -> None:
    """256 seats: vLLM's list runs to 512 (51 sizes); full decode graphs only to 256 (35).
    The list: 1, 2, 4, every 8 below 256, every 16 from 256 to min(2 × seats, 512)."""
    listed = [1, 2, 4, *range(8, 256, 8), *range(256, min(2 * 256, 512) + 1, 16)]
    assert capture_sizes(256) == len(listed) == 51
    assert capture_sizes(256, mode="FULL_DECODE_ONLY") == len(
        [size for size in listed if size <= 256]) == 35


def test_a_max_size_that_disagrees_with_the_list_is_refused_as_vllm_refuses_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refusal(capsys, *FIT, "-cc.cudagraph_capture_sizes=[1,2,4,8]",
                  "-cc.max_cudagraph_capture_size=16")
    assert "disagree" in err


def test_max_cudagraph_capture_size_in_the_config_is_the_flag(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert graphs(fitted(capsys, "-cc.max_cudagraph_capture_size=64")) == graphs(
        fitted(capsys, "--max-cudagraph-capture-size", "64"))


# -- the graphs switch and torch.compile --------------------------------------------------
def test_cudagraph_mode_none_with_mode_0_is_enforce_eager(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM: --enforce-eager 'is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none';
    the pool and the decode step are --enforce-eager's, and -O0 sets both."""
    eager = fitted(capsys, "--enforce-eager")
    for flags in (("-cc.cudagraph_mode=NONE", "-cc.mode=0"), ("-O0",), ("-cc.mode=0",)):
        assert fitted(capsys, *flags)["pool_bytes_per_gpu"] == eager["pool_bytes_per_gpu"]
    step = expected_step_s(capsys, "--enforce-eager")
    assert expected_step_s(capsys, "-cc.cudagraph_mode=NONE", "-cc.mode=0") == step
    assert expected_step_s(capsys) < step  # graphed decode pays fewer launches


def test_cudagraph_mode_none_alone_keeps_the_cold_compile(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without -cc.mode=0 torch.compile still runs: no graphs, eager steps, and Model Runner
    V2's profile still carries the cold compile, so the pool is smaller by it."""
    eager = fitted(capsys, "--enforce-eager")
    none = fitted(capsys, "-cc.cudagraph_mode=NONE")
    assert graphs(none) == 0
    assert none["profile"]["compile_bytes"] == compile_transient_bytes()
    assert eager["profile"]["compile_bytes"] == 0
    # the profile's other terms alike: the pool is smaller by the cold compile, exactly
    assert {k: v for k, v in none["profile"].items() if k != "compile_bytes"} == {
        k: v for k, v in eager["profile"].items() if k != "compile_bytes"}
    # v0.34 sizes the pool after warm-up: the peak's growth and its share of the margin
    taken = [{k: r["taken_bytes_per_gpu"][k] for k in ("activations", "kept_free_after_warmup")}
             for r in (eager, none)]
    assert eager["pool_bytes_per_gpu"] - none["pool_bytes_per_gpu"] == pytest.approx(
        sum(taken[1].values()) - sum(taken[0].values()), rel=1e-9)
    assert taken[1]["activations"] > taken[0]["activations"]
    # v0.32, without the warm-up sampler pass that hides most of it: the compile, exactly
    eager, none = (fitted(capsys, flag, "--engine-version", "0.32")
                   for flag in ("--enforce-eager", "-cc.cudagraph_mode=NONE"))
    assert eager["pool_bytes_per_gpu"] - none["pool_bytes_per_gpu"] == pytest.approx(
        compile_transient_bytes(), rel=1e-12)
    assert expected_step_s(capsys, "-cc.cudagraph_mode=NONE") == expected_step_s(
        capsys, "--enforce-eager")


def test_simulate_runs_cudagraph_mode_none_with_mode_0_as_enforce_eager(
        capsys: pytest.CaptureFixture[str]) -> None:
    sim = ("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "2", "--num-requests", "20",
           "--json")
    _, eager, _ = run_cli(capsys, *sim, "--enforce-eager")
    code, same, err = run_cli(capsys, *sim, "-O0")
    assert code == 0, err
    _, graphed, _ = run_cli(capsys, *sim)
    assert json.loads(same) == json.loads(eager) != json.loads(graphed)


def test_engine_settings_take_cudagraph_mode_none_only_with_enforce_eager() -> None:
    """One switch prices the eager steps: the settings refuse a NONE mode without it."""
    from ridgeline.memory import EngineSettings

    with pytest.raises(InputError, match="enforce_eager"):
        EngineSettings(cudagraph_mode="NONE")
    assert EngineSettings(cudagraph_mode="NONE", enforce_eager=True, torch_compile=True
                          ).cold_compile


def test_piecewise_graphs_without_vllm_compile_capture_nothing() -> None:
    found = compilation_asked([("-cc", ".mode=1")], None, None, None)
    assert found.eager and found.torch_compile is True
    full = compilation_asked([("-cc", ".mode=0"), ("-cc", ".cudagraph_mode=FULL")],
                             None, None, None)
    assert not full.eager and full.torch_compile is False


def test_optimization_levels_follow_the_release() -> None:
    levels = vllm_data()["compilation_config"]["level_defaults"]
    assert compilation_asked([("-O", "1")], None, None, None).cudagraph_mode == \
        levels["1"]["cudagraph_mode"] == "PIECEWISE"
    assert compilation_asked([("-O", "3")], None, None, None) == \
        compilation_asked([], None, None, None)
    with pytest.raises(InputError, match=r"came in vLLM v0\.12\.0"):
        compilation_asked([("--optimization-level", "2")], None, None, "0.11.2")


# -- accepted, refused --------------------------------------------------------------------
def test_dotted_O_full_decode_only_is_read_where_the_release_takes_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-O.<key> is the compilation config up to v0.12 (deprecated there, PR #29557) and an
    error from v0.13 (PR #29991), which the refusal names with the spelling to use."""
    found = fitted(capsys, "-O.cudagraph_mode=FULL_DECODE_ONLY", "--engine-version", "0.12")
    assert found["pool_bytes_per_gpu"] > 0
    cc = fitted(capsys, "-cc.cudagraph_mode=FULL_DECODE_ONLY")
    assert graphs(cc) > 0
    err = refusal(capsys, *FIT, "-O.cudagraph_mode=FULL_DECODE_ONLY")
    assert "-cc.<key>" in err and "v0.13.0" in err


@pytest.mark.parametrize(("flags", "said"), [
    (("--compilation-config", '{"cudagraph_mode": "FULL", "inductor_compile_config": {}}'),
     "key inductor_compile_config is not modelled"),
    (("-cc.splitting_ops=[]",), "key splitting_ops is not modelled"),
    (("--compilation-config", '{"cudagraph_mode": '), "takes a JSON object"),
    (("--compilation-config", "[1, 2]"), "takes a JSON object"),
    (("-cc.cudagraph_mode=SOMETIMES",), "cudagraph_mode is one of"),
    (("-cc.pass_config.enable_sp=true",), "pass_config.enable_sp is not modelled"),
    (("-O7",), "optimization level 0, 1, 2 or 3"),
    (("-cc.mode=3", "--engine", "sglang"), "is vLLM's; sglang"),
    (("-cc.mode=3", "--engine-version", "0.11.2"), "-cc came in vLLM v0.12.0"),
    (("--cudagraph-capture-sizes", "8", "--engine-version", "0.10.2"),
     "--cudagraph-capture-sizes came in vLLM v0.11.1"),
    (("-cc.cudagraph_capture_sizes=[16384]",), "past max_num_batched_tokens")])
def test_what_is_not_modelled_or_not_read_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], said: str) -> None:
    assert said in refusal(capsys, *FIT, *flags)


def test_pass_config_and_custom_ops_are_read_and_change_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    read = fitted(capsys, "--compilation-config",
                  '{"pass_config": {"fuse_norm_quant": true}, "custom_ops": ["+rms_norm"]}')
    assert any("ignored --compilation-config's pass_config" in n for n in read["notes"])
    assert read | {"notes": []} == fitted(capsys)  # the note, stderr's too, and nothing else


def test_a_config_file_compilation_config_is_read(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text("compilation-config:\n  cudagraph_capture_sizes: [1, 2, 4, 8]\n")
    assert fitted(capsys, "--config", str(path)) == fitted(
        capsys, "--cudagraph-capture-sizes", "1", "2", "4", "8")
