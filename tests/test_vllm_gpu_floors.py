"""vLLM's floors on older NVIDIA cards, release by release (engines.json vllm.gpu_floors):
its PyPI wheels carry no Volta kernels from 0.20, so a V100 is refused under the release a
run is priced as (0.32) and served under 0.19; fp8 weights need 8.0 before 0.14 (then FP8
Marlin from 7.5); an fp8 KV cache runs on a T4 only where FlashInfer (floor 7.5) is picked,
0.12 to 0.23. Before, plan put a T4 on fp8 weights with an fp8 cache under 0.32, and decode
priced vLLM on a V100."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ridgeline.candidate import replica_deployment, served_choice
from ridgeline.catalog import resolve_model
from ridgeline.engine_quantization import NVIDIA_FAMILY_CAPABILITY
from ridgeline.errors import InputError
from ridgeline.hardware import resolve_accelerator
from ridgeline.quantization_gates import deployment_problem
from ridgeline.vllm_gpu_floors import _releases_running, floor_problem, gpu_floors
from ridgeline.vllm_memory import parse_version
from tests.conftest import refused_line, run_cli

# up to 2 GPUs, in one process: the formats a release runs on a card are the same at any count
PLAN_T4 = ("plan", "llama-3.1-8b", "--gpus", "t4", "--rate", "1", "--input-len", "500",
           "--output-len", "100", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100",
           "--max-gpus", "2", "--workers", "1")
RELEASES = ("0.11", "0.12", "0.13", "0.14", "0.19", "0.20", "0.23", "0.24", "0.32")


def builds(weights: str, kv: str, gpu: str, version: str | None) -> bool:
    """Whether a one-GPU vLLM replica of Llama-3.1-8B starts at ``version``."""
    spec = resolve_model("llama-3.1-8b")
    try:
        replica_deployment(spec, resolve_accelerator(gpu), 1, 1, weights, kv, version=version)
    except InputError:
        return False
    return True


def test_every_floor_has_a_source_and_an_ordered_span() -> None:
    for floor in gpu_floors():
        assert floor.source and floor.why
        if floor.since and floor.until:
            assert parse_version(floor.since) < parse_version(floor.until)


def test_an_fp8_cache_runs_on_a_t4_only_from_0_12_to_0_23() -> None:
    """FlexAttention (0.11) refuses a quantized cache; FlashInfer, floor 7.5, reads it
    0.12-0.23; from 0.24 FlashInfer needs 8.0 and Triton refuses fp8 below 8.9."""
    runs = {v for v in RELEASES if builds("fp16", "fp8", "t4", v)}
    assert runs == {"0.12", "0.13", "0.14", "0.19", "0.20", "0.23"}
    assert not builds("fp16", "fp8", "t4", None)  # the newest modelled, 0.32
    assert builds("fp16", "fp16", "t4", None)
    assert _releases_running("fp8_kv", NVIDIA_FAMILY_CAPABILITY["turing"][1]) \
        == "from 0.12 and below 0.24"


def test_an_a100_and_an_l4_keep_an_fp8_cache_in_every_release() -> None:
    for gpu in ("a100-sxm-80gb", "l4"):
        assert all(builds("bf16", "fp8", gpu, v) for v in (*RELEASES, None))


def test_fp8_weights_run_on_a_t4_from_0_14_through_fp8_marlin() -> None:
    runs = {v for v in RELEASES if builds("fp8", "fp16", "t4", v)}
    assert runs == {v for v in RELEASES if parse_version(v) >= parse_version("0.14")}
    assert builds("fp8", "fp16", "t4", None)


def test_a_v100_runs_vllm_through_0_19_and_no_release_after() -> None:
    runs = {v for v in RELEASES if builds("fp16", "fp16", "v100", v)}
    assert runs == {v for v in RELEASES if parse_version(v) < parse_version("0.20")}
    assert not builds("fp16", "fp16", "v100", None)
    # its fp8 cache in none: no backend it picks reads one
    assert not any(builds("fp16", "fp8", "v100", v) for v in RELEASES)


def test_other_engines_and_vendors_are_not_read_by_the_floors() -> None:
    spec = resolve_model("llama-3.1-8b")
    from ridgeline.deployment import Deployment

    dep = Deployment.build(spec, resolve_accelerator("v100"), "fp16", "fp16",
                           engine="llama.cpp-cuda")
    assert deployment_problem(dep) == ""
    assert floor_problem("fp8_kv", resolve_accelerator("mi300x")) == ""


def test_decode_under_vllm_on_a_v100_is_refused_naming_the_card_and_both_capabilities(
        capsys: pytest.CaptureFixture[str]) -> None:
    line = refused_line(capsys, "decode", "falcon-7b", "--gpu", "v100", "--engine", "vllm")
    acc = resolve_accelerator("v100")
    assert acc.id in line and "compute capability 7.0" in line and "needs 7.5" in line
    assert "below 0.20" in line and "--engine llama.cpp-cuda" in line
    code, out, _ = run_cli(capsys, "decode", "falcon-7b", "--gpu", "v100",
                           "--engine-version", "0.19")
    assert code == 0 and "vLLM 0.19" in out


def test_with_no_engine_named_a_v100_is_priced_on_llama_cpp_cuda(
        capsys: pytest.CaptureFixture[str]) -> None:
    """As the AMD cards vLLM's ROCm build leaves out default to llama.cpp-rocm."""
    code, out, err = run_cli(capsys, "decode", "falcon-7b", "--gpu", "v100")
    assert code == 0, err
    assert "expected on llama.cpp-cuda" in out and "expected on vLLM" not in out
    code, out, err = run_cli(capsys, "decode", "falcon-7b", "--gpu", "t4")
    assert code == 0 and "expected on vLLM" in out, err


def test_fit_refuses_an_fp8_cache_on_a_t4_and_names_the_releases_that_keep_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    """AWQ weights at 8,192 tokens fit in each of them (floor_release: the span is named
    where every release in it is sized as fitting; 16-bit Llama-3.1-8B fits a T4 in none)."""
    argv = ("fit", "llama-3.1-8b", "--gpu", "t4", "--kv-dtype", "fp8", "--weights", "awq-int4",
            "--max-model-len", "8192")
    line = refused_line(capsys, *argv)
    assert "t4" in line and "compute capability 7.5" in line and "needs 8.0" in line
    assert "--kv-dtype fp16" in line and "from 0.12 and below 0.24" in line
    code, out, err = run_cli(capsys, *argv, "--engine-version", "0.23")
    assert code == 0 and out.startswith("fits"), err


@pytest.mark.usefixtures("unsimulated")
def test_plan_on_a_t4_serves_what_vllm_runs_there(capsys: pytest.CaptureFixture[str]) -> None:
    """No fp8 cache under 0.32, and 16-bit as fp16 (no bf16 matmuls on Turing)."""
    code, out, err = run_cli(capsys, *PLAN_T4, "--json")
    assert code == 0, err
    report = json.loads(out)
    rows = [report["winner"], *report["runners_up"]]
    assert rows and all(r["kv_dtype"] == "fp16" for r in rows)
    assert {r["weights"] for r in rows} <= {"fp8", "fp16"}
    assert served_choice("bf16", resolve_accelerator("t4")) == "fp16"
    assert served_choice("bf16", resolve_accelerator("a100-sxm-80gb")) == "bf16"


@pytest.mark.usefixtures("unsimulated")
def test_plan_on_a_v100_is_refused_under_the_newest_release_and_runs_under_0_19(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The refusal names the releases that run, not llama.cpp, which plan does not size;
    under 0.19 the winner is the V100 in fp16 (a rebuild for its cautions asks no newer
    release's floors)."""
    argv = ("plan", "llama-3.1-8b", "--gpus", "v100", *PLAN_T4[4:])
    line = refused_line(capsys, *argv)
    assert "below 0.20" in line and "--engine llama.cpp-cuda" not in line
    assert "plan sizes no llama.cpp, which fit, decode, simulate and page run" in line
    code, out, err = run_cli(capsys, *argv, "--engine-version", "0.19", "--json")
    assert code == 0, err
    winner = json.loads(out)["winner"]
    assert winner["accelerator"] == resolve_accelerator("v100").id
    assert (winner["weights"], winner["kv_dtype"]) == ("fp16", "fp16")


def test_page_leaves_out_what_the_newest_release_refuses_on_the_card(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `page --gpu v100 --engine vllm` drew 8 vLLM deployments on a card 0.32 runs
    nothing on, and `page --gpu t4` drew its fp8 caches, which fit refuses."""
    line = refused_line(capsys, "page", "llama-3.1-8b", "--gpu", "v100", "--engine", "vllm",
                        "--json")
    assert "no combination" in line and "does not run on the v100" in line
    code, out, err = run_cli(capsys, "page", "llama-3.1-8b", "--gpu", "t4", "--json")
    assert code == 0, err
    page = json.loads(out)["page"]
    fp8_cache = [key for key in page["combos"] if key.endswith("|fp8")]
    left_fp8 = [why for key, why in page["left_out"].items() if key.endswith("|fp8")]
    assert not fp8_cache and left_fp8
    assert all("keeps no fp8 KV cache on the t4" in why for why in left_fp8)
    assert any(key.endswith("|bf16") for key in page["combos"])


def test_observe_prices_vllms_metrics_on_a_v100_as_vllm_at_the_servers_release(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: with no --engine, llama.cpp-cuda's pool was priced beside vLLM's metrics, and
    its caution said to leave --engine out, which it was."""
    argv = ("observe", "tests/fixtures/vllm_metrics.txt", "--model", "llama-3.1-8b",
            "--gpu", "v100")
    line = refused_line(capsys, *argv)
    assert "does not run on the v100" in line and "below 0.20" in line
    assert "llama.cpp" not in line
    code, out, err = run_cli(capsys, *argv, "--engine-version", "0.19")
    assert code == 0, err
    assert "(vllm;" in out and "llama.cpp" not in out


def test_page_on_a_v100_with_no_engine_says_it_draws_llama_cpp_cuda(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """As decode, fit and simulate do; before, its line named no engine."""
    code, out, err = run_cli(capsys, "page", "llama-3.1-8b", "--gpu", "v100",
                             "-o", str(tmp_path / "p.html"))
    assert code == 0, err
    assert "deployments on llama.cpp-cuda (the cards' default engine" in out
    code, out, err = run_cli(capsys, "page", "llama-3.1-8b", "--gpu", "t4",
                             "-o", str(tmp_path / "p.html"))
    assert code == 0 and "default engine" not in out, err


@pytest.mark.parametrize(("gpu", "weights", "engine", "offered"), [
    ("v100", "fp8", "vllm", "fp16"), ("t4", "mxfp4", "vllm", "fp16"),
    ("a100", "fp8", "trtllm", "bf16")])
def test_a_refused_format_offers_the_16_bit_weights_the_card_multiplies(
        capsys: pytest.CaptureFixture[str], gpu: str, weights: str, engine: str,
        offered: str) -> None:
    """A Volta or Turing card has no bf16 matmuls: its refusals offered --weights bf16, which
    vLLM would serve there as fp16. The offer is the 16-bit type the card has a peak for (bf16
    where it has one), and it runs."""
    argv = ("decode", "llama-3.1-8b", "--gpu", gpu, "--engine", engine,
            *(("--engine-version", "0.19") if engine == "vllm" else ()))
    line = refused_line(capsys, *argv, "--weights", weights)
    assert f"try --weights {offered}" in line
    assert offered in resolve_accelerator(gpu).peak_flops
    code, _, err = run_cli(capsys, *argv, "--weights", offered)
    assert code == 0, err


def test_fits_levers_offer_nothing_the_release_refuses_to_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on a V100 under vLLM 0.19 at its whole context: fit offered 'fp8 KV
    cache (--kv-cache-dtype fp8)' as a lever, which vLLM 0.19 refuses on Volta (no backend
    reads an fp8 cache there); every lever fit lists is one the release starts, and
    following one, as fit words it, runs."""
    base = ("fit", "llama-3.1-8b", "--gpu", "v100", "--engine", "vllm", "--engine-version",
            "0.19")
    code, out, err = run_cli(capsys, *base, "--json")
    assert code == 0, err
    names = [lever["name"] for lever in json.loads(out)["levers"]]
    assert names and not any("fp8 KV" in n for n in names)
    assert "keeps no fp8 KV cache" in refused_line(capsys, *base, "--kv-dtype", "fp8")
    doubled = run_cli(capsys, *base, "--num-gpus", "2", "--json")
    assert doubled[0] == 0 and json.loads(doubled[1])["conversations"] > 0
