"""Three gaps in `plan`'s flags (session 63): the closest miss judged under the formats and
launch length the search was held to (--weights, --kv-dtype, --min-context); --gpus naming
a --gpu-file record's id; and vLLM's hybrid KV-cache manager switches, which `fit` takes,
sizing every pool the plan searches, checks, launches and misses with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.closest_miss import _holding
from ridgeline.hardware import resolve_accelerator
from ridgeline.plan_constraints import NO_CONSTRAINTS, PlanConstraints
from tests.conftest import cli_json, refused_line, run_cli

# Llama-3.1-70B within one H100, against SLOs no group meets unloaded: the closest miss
MISS_70B = ["plan", "llama-3.1-70b", "--gpus", "h100", "--max-gpus", "1", "--rate", "1",
            "--slo-ttft-ms", "100", "--slo-tpot-ms", "2"]


def _missed(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    """A plan's --json where no deployment meets the SLO (exit 1)."""
    code, out, err = run_cli(capsys, *MISS_70B, *extra, "--json")
    assert code == 1, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_the_closest_miss_keeps_to_the_formats_and_length_the_search_kept_to(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Unconstrained, one H100 holds Llama-3.1-70B in fp8 and is the nearest miss; under
    --weights bf16 (140 GB of weights) or --min-context 100,000 no group within --max-gpus 1
    holds it, and the miss says so, naming what held the search, not the fp8 group the
    search never sized."""
    free = _missed(capsys)["closest_miss_figures"]
    assert free["kind"] == "unloaded" and free["accelerator"] == "h100-sxm"
    for extra, said in ((["--weights", "bf16"], "in bf16 weights"),
                        (["--min-context", "100000"], "at --min-context 100,000 or longer")):
        data = _missed(capsys, *extra)
        assert data["closest_miss_figures"]["kind"] == "does_not_fit", extra
        assert data["closest_miss"].startswith("does not fit") and said in data["closest_miss"]


def test_the_closest_miss_group_is_built_in_an_admitted_format() -> None:
    """The group a miss is judged on is the lightest the constraints admit: fp8 weights and
    an fp8 cache where any is allowed, a bf16 cache under --kv-dtype bf16."""
    model, h100 = resolve_model("llama-3.1-70b"), resolve_accelerator("h100")
    _, free = _holding(model, h100, 1, 1, 1250, "vllm", None, NO_CONSTRAINTS)
    _, kept = _holding(model, h100, 1, 1, 1250, "vllm", None,
                       PlanConstraints.parse(None, "bf16", None))
    assert free is not None and kept is not None
    assert (free.weights.label, free.kv.id) == ("fp8", "fp8")
    assert (kept.weights.label, kept.kv.id) == ("fp8", "bf16")


def _record(capsys: pytest.CaptureFixture[str], tmp_path: Path, ident: str) -> Path:
    """The catalog's H100 as a user's record named ``ident``, at $2.00 a GPU-hour."""
    data = cli_json(capsys, "hardware", "h100")
    data.update(id=ident, aliases=[], price_per_hour_usd=2.0)
    path = tmp_path / f"{ident}.json"
    path.write_text(json.dumps(data))
    return path


def test_gpus_names_a_gpu_file_record_in_its_place(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    """--gpus takes a --gpu-file record's id beside catalog cards, the cards searched in
    --gpus's order; an id neither the catalog nor a record has is refused in a line naming
    the records."""
    path = str(_record(capsys, tmp_path, "lab-h100-s63"))
    load = ["--rate", "1", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "30", "--max-gpus", "1",
            "--weights", "fp8", "--kv-dtype", "fp8"]  # a small search: the cards are the point
    for named in (["h100", "lab-h100-s63"], ["lab-h100-s63", "h100"]):
        data = cli_json(capsys, "plan", "llama-3.1-8b", "--gpus", ",".join(named),
                        "--gpu-file", path, *load)
        ids = [resolve_accelerator(n).id for n in named]
        assert [c["accelerator"] for c in data["cards"]] == ids
    line = refused_line(capsys, "plan", "llama-3.1-8b", "--gpus", "lab-h10-s63",
                        "--gpu-file", path, *load)
    assert "'lab-h10-s63'" in line and "the --gpu-file records: lab-h100-s63" in line
    line = refused_line(capsys, "plan", "llama-3.1-8b", "--gpus", "lab-h200-s63", *load)
    assert "unknown accelerator 'lab-h200-s63'" in line and "--gpu-file FILE" in line


GEMMA = ["plan", "gemma-3-27b", "--gpus", "h100", "--max-gpus", "1", "--rate", "2",
         "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100", "--max-model-len", "32768",
         "--weights", "fp8", "--kv-dtype", "fp8"]


def test_the_hybrid_manager_switch_sizes_every_pool_as_fit_sizes_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma 3's sliding-window layers are paged by vLLM's hybrid KV-cache manager; with
    --disable-hybrid-kv-cache-manager they are cached in full, and plan's winner holds the
    conversations `fit` gives for the same launch with the flag, fewer than without it; its
    launch, its check and --json carry the flag."""
    on = cli_json(capsys, *GEMMA)
    off = cli_json(capsys, *GEMMA, "--disable-hybrid-kv-cache-manager")
    win = off["winner"]
    fit = cli_json(capsys, "fit", "gemma-3-27b", "--gpu", win["accelerator"],
                   "--weights", "fp8", "--kv-dtype", "fp8", "--max-model-len", "32768",
                   *(["--max-num-batched-tokens", str(win["max_num_batched_tokens"])]
                     if win["max_num_batched_tokens"] else []),
                   "--disable-hybrid-kv-cache-manager")
    assert (win["pool"]["tokens"], win["pool"]["conversations"]) == \
        (fit["tokens"], fit["conversations"])
    assert win["pool"]["conversations"] < on["winner"]["pool"]["conversations"]
    assert off["commands"]["vllm"].endswith(" --disable-hybrid-kv-cache-manager")
    assert "--disable-hybrid-kv-cache-manager" not in on["commands"]["vllm"]
    assert "--disable-hybrid-kv-cache-manager" in off["check_command"]
    assert off["constraints"]["disable_hybrid_kv_cache_manager"] is True
    assert on["constraints"]["disable_hybrid_kv_cache_manager"] is None


@pytest.mark.parametrize(("argv", "said"), [
    (["nemotron-h-56b", "--disable-hybrid-kv-cache-manager"], "cannot start nemotron-h-56b"),
    (["llama-3.1-8b", "--engine", "sglang", "--disable-hybrid-kv-cache-manager"],
     "--disable-hybrid-kv-cache-manager is vLLM's; sglang"),
    (["llama-3.1-8b", "--engine-version", "0.9.0", "--no-disable-hybrid-kv-cache-manager"],
     "it came in v0.9.1"),
    (["llama-4-scout", "--no-disable-hybrid-kv-cache-manager",
      "--vllm-allow-chunked-local-attn-with-hybrid-kv-cache", "0"], "refuses"),
])
def test_a_switch_vllm_would_not_start_with_is_refused_before_the_search(
        capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    """As `fit` refuses them: a recurrent hybrid without the manager, another engine, a
    release before the flag, the manager asked for where VLLM_ALLOW_..._HYBRID_KV_CACHE=0
    turns it off; one line, exit 2, not a search that finds nothing."""
    assert said in refused_line(capsys, "plan", *argv, "--rate", "1", "--slo-ttft-ms",
                                "2000", "--slo-tpot-ms", "100", "--gpus", "h100")


def test_plan_help_folds_vllms_switches_and_opens_them_by_engine(
        capsys: pytest.CaptureFixture[str]) -> None:
    """plan's help passes FOLDED_ABOVE_FLAGS: its common flags in full, each engine's own
    folded to a line that says how to open them, which --help-engine vllm does."""
    _, out, _ = run_cli(capsys, "plan", "--help")
    assert "  vLLM (4 flags): --help-engine vllm" in out.splitlines()
    assert "--disable-hybrid-kv-cache-manager" not in out and "--max-gpus MAX_GPUS" in out
    _, opened, _ = run_cli(capsys, "plan", "--help-engine", "vllm")
    assert "--disable-hybrid-kv-cache-manager" in opened
    assert "--vllm-allow-chunked-local-attn-with-hybrid-kv-cache 0|1" in opened


def test_split_pools_are_sized_and_launched_with_the_switch() -> None:
    """A Gemma-3-27B split at 8,000-token prompts: with the manager off its decode pool
    caches the window layers in full, so its batch is far smaller (34 sequences without the
    flag), and each pool's launch carries the flag the plan was given."""
    from ridgeline.disaggregated import disaggregated_candidates
    from ridgeline.reports.launch_commands import command_line
    from ridgeline.serving_load import Load, Slo

    model, load, slo = resolve_model("gemma-3-27b"), Load(2.0, "8000", "250"), Slo(5.0, 0.1)

    def split(constraints: PlanConstraints) -> Any:
        found = disaggregated_candidates(model, load, slo, ["h100"], 8, {"h100-sxm": 2.99},
                                         max_model_len=32768,
                                         switches=constraints.launch_settings)
        assert len(found) == 1
        return found[0]

    on = split(NO_CONSTRAINTS)
    off = split(PlanConstraints(disable_hybrid_kv_cache_manager=True))
    assert off.disable_hybrid_kv_cache_manager and on.disable_hybrid_kv_cache_manager is None
    assert off.batch < on.batch / 2
    launch = command_line("vllm", "google/gemma-3-27b-it", off.pool(False), 32768)
    assert launch.endswith(" --disable-hybrid-kv-cache-manager")
    assert "hybrid" not in command_line("vllm", "google/gemma-3-27b-it", on.pool(False), 32768)
