"""vLLM's --async-scheduling given explicitly: where a release's VllmConfig raises on it beside
a drafter or a pipeline (its default only turns async scheduling off there, with a warning),
ridgeline refuses the pair in one line; where the default turns it off, fit, simulate and
decode say so and price the run synchronous; and where the flag keeps it on against the
default (a draft model on 0.16-0.27), the run is priced asynchronous."""

from __future__ import annotations

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.datafiles import engine_defaults
from ridgeline.engine_scheduling import vllm_async_conflict, vllm_async_with_drafter
from ridgeline.engine_spec import EngineSpec
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sim.config import sim_config
from ridgeline.vllm_memory import in_releases
from tests.conftest import run_cli

LLAMA = ("llama-3.1-8b", "--gpu", "h100")
COMMANDS = {"fit": ("fit", *LLAMA),
            "simulate": ("simulate", *LLAMA, "--rate", "4", "--num-requests", "40"),
            "decode": ("decode", *LLAMA, "--batch", "1,16")}
NGRAM_032 = ("--engine-version", "0.32", "--spec-method", "ngram", "--spec-tokens", "3")
DEP = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), "bf16")
RULE = engine_defaults("vllm")["async_scheduling"]


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and not out, (argv, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_async_scheduling_beside_an_ngram_drafter_is_refused_where_vllm_raises(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    """vLLM 0.32 raises 'async scheduling is only supported with EAGLE/MTP/...' for the pair;
    without the flag it runs, synchronous, and ridgeline says so."""
    err = refusal(capsys, *COMMANDS[command], *NGRAM_032, "--async-scheduling")
    assert "--async-scheduling with --spec-method ngram" in err and "vLLM 0.32" in err
    code, _, err = run_cli(capsys, *COMMANDS[command], *NGRAM_032)
    assert code == 0
    assert "vLLM 0.32 turns async scheduling off with --spec-method ngram" in err
    assert "makes it refuse to start" in err and "priced synchronous" in err


def test_the_newest_release_takes_the_pair_and_says_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    for version in ("0.33", "0.34"):  # MRV2 takes ngram asynchronously from 0.33
        code, _, err = run_cli(capsys, *COMMANDS["simulate"], "--engine-version", version,
                               "--spec-method", "ngram", "--spec-tokens", "3",
                               "--async-scheduling")
        assert code == 0 and "async scheduling off" not in err, (version, err)


def test_a_draft_model_is_refused_on_0_15_and_kept_asynchronous_from_0_16(
        capsys: pytest.CaptureFixture[str]) -> None:
    """0.16 added draft_model to the explicit branch's list; its default kept turning it off
    until 0.28, so the flag changes what is priced there."""
    draft = ("--spec-method", "draft-model", "--spec-tokens", "3")
    err = refusal(capsys, *COMMANDS["simulate"], "--engine-version", "0.15", *draft,
                  "--async-scheduling")
    assert "vLLM 0.15" in err and "draft-model" in err
    given = run_cli(capsys, *COMMANDS["simulate"], "--engine-version", "0.20", *draft,
                    "--async-scheduling")
    default = run_cli(capsys, *COMMANDS["simulate"], "--engine-version", "0.20", *draft)
    assert given[0] == default[0] == 0
    assert "async scheduling on" in given[1] and "async scheduling on" not in default[1]
    assert "--async-scheduling keeps it on" in default[2]
    v020 = EngineSettings(engine_version="0.20")
    assert not sim_config(DEP, v020, spec_tokens=3, spec_method="draft-model").async_scheduling
    assert sim_config(DEP, EngineSettings(engine_version="0.20", async_scheduling_given=True),
                      spec_tokens=3, spec_method="draft-model").async_scheduling


@pytest.mark.parametrize("version", ["0.10.0", "0.11", "0.11.1", "0.12", "0.13", "0.14"])
def test_a_pipeline_is_refused_with_the_flag_from_0_10_to_0_14(
        capsys: pytest.CaptureFixture[str], version: str) -> None:
    """Every release from 0.10.0 (the flag's first) to 0.14 raises on the pair, the opt-in
    0.12 and 0.13 too (VllmConfig.__post_init__: 'Async scheduling is not yet compatible with
    pipeline_parallel_size > 1.'); 0.15 runs it."""
    pipeline = ("--pipeline-parallel-size", "2", "--async-scheduling")
    err = refusal(capsys, *COMMANDS["simulate"], "--engine-version", version, *pipeline)
    assert "pipeline parallelism" in err and f"vLLM {version} " in err
    assert ("opt-in there, off by default" in err) == (version != "0.14")
    assert run_cli(capsys, *COMMANDS["simulate"], "--engine-version", "0.15", *pipeline)[0] == 0


@pytest.mark.parametrize("version", ["0.11.1", "0.12", "0.13"])
def test_an_eagle_head_takes_the_opt_in_flag_from_0_11_1_and_an_ngram_drafter_does_not(
        version: str) -> None:
    """0.11.1-0.13's explicit branch refuses only drafters outside EagleModelTypes; 0.11.0's
    arg_utils.py refused any drafter beside the flag."""
    for runner in ("V1", "MRV2"):
        assert not vllm_async_conflict(version, "eagle", runner, 1)
        assert not vllm_async_conflict(version, "mtp", runner, 1)
        assert vllm_async_conflict(version, "ngram", runner, 1)
        assert vllm_async_conflict(version, "draft-model", runner, 1)
    assert vllm_async_conflict("0.11.0", "eagle", "V1", 1)


@pytest.mark.parametrize("version", ["0.14", "0.15", "0.16", "0.24", "0.28", "0.32", "0.33",
                                     "0.34"])
def test_explicit_refusals_follow_the_release_table(version: str) -> None:
    """A drafter is refused with the flag exactly where its explicit table (the runner's
    rules from 0.33) does not keep async scheduling on; an EAGLE/MTP head never is."""
    for runner in ("V1", "MRV2"):
        for method in ("eagle", "mtp", "draft-model", "ngram"):
            kept = vllm_async_with_drafter(version, method, runner, explicit=True)
            assert bool(vllm_async_conflict(version, method, runner, 1)) == (not kept)
        assert not vllm_async_conflict(version, "eagle", runner, 1)
    # the default never keeps a drafter the flag would refuse
    for method in ("draft-model", "ngram"):
        if vllm_async_with_drafter(version, method, "V1"):
            assert vllm_async_with_drafter(version, method, "V1", explicit=True)
    piped = {r["runner"] for r in RULE["explicit_pipeline_refused"]}
    assert piped == {"", "V1"}


def test_a_window_group_keeps_one_batch_in_flight_where_the_drafter_turns_async_off() -> None:
    """gpt-oss keeps window blocks for two batches under async scheduling (v0.26+); vLLM
    0.32 turns it off beside an ngram drafter, so one, as with --no-async-scheduling."""
    dep = Deployment.build(resolve_model("openai/gpt-oss-120b"), resolve_accelerator("h100"),
                           "bf16")

    def in_flight(method: str, **given: bool) -> int:
        s = EngineSettings(engine_version="0.32", max_model_len=28000,
                           speculative_decoding=True, drafter=EngineSpec(3, method), **given)
        return kv_pool(dep, s).in_flight_batches

    assert in_flight("ngram") == in_flight("eagle", async_scheduling=False) == 1
    assert in_flight("eagle") == 2


RAY = ("--distributed-executor-backend", "ray")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_ray_executor_without_async_scheduling_is_priced_synchronous_and_the_flag_refused(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    """vLLM 0.18's Ray executor has no async scheduling: its default turns it off (with a
    warning), --async-scheduling beside it raises; 0.21's default Ray executor (RayExecutorV2)
    has it, so there the pair runs and nothing is said."""
    err = refusal(capsys, *COMMANDS[command], "--engine-version", "0.18", *RAY,
                  "--async-scheduling")
    assert "--async-scheduling with --distributed-executor-backend ray" in err
    assert "vLLM 0.18" in err
    code, _, err = run_cli(capsys, *COMMANDS[command], "--engine-version", "0.18", *RAY)
    assert code == 0
    assert "vLLM 0.18 turns async scheduling off with --distributed-executor-backend ray" in err
    assert "priced synchronous" in err
    code, _, err = run_cli(capsys, *COMMANDS[command], "--engine-version", "0.21", *RAY,
                           "--async-scheduling")
    assert code == 0 and "async scheduling off" not in err, err


@pytest.mark.parametrize("version", ["0.14", "0.18", "0.19", "0.20", "0.21", "0.29", "0.34"])
def test_the_simulator_overlaps_steps_under_ray_only_where_its_executor_can(version: str) -> None:
    """executors_without_async spans ray over 0.14-0.20: the simulator runs those releases
    synchronous under ray, and asynchronous under mp or vLLM's own choice of executor."""
    def overlapped(backend: str | None) -> bool:
        s = EngineSettings(engine_version=version, distributed_executor_backend=backend)
        return sim_config(DEP, s).async_scheduling

    ray_has_it = not any(r["backend"] == "ray" and in_releases(version, r)
                         for r in RULE["executors_without_async"])
    assert overlapped(None) and overlapped("mp")
    assert overlapped("ray") == ray_has_it
    assert bool(vllm_async_conflict(version, "", "V1", 1, "ray")) == (not ray_has_it)
    assert not vllm_async_conflict(version, "", "V1", 1, "mp")


def test_the_ray_flag_is_read_not_noted_as_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    """--distributed-executor-backend is a vLLM setting now (it can turn async scheduling off),
    so the launch note no longer lists it among the flags that change nothing."""
    code, _, err = run_cli(capsys, *COMMANDS["fit"], *RAY, "--port", "8000")
    assert code == 0 and "ignored --port 8000" in err and "distributed" not in err


ENV = "--vllm-use-ray-v2-executor-backend"
ENV_RULE = RULE["ray_v2_env"]


@pytest.mark.parametrize("version", ["0.19", "0.20", "0.21", "0.25", "0.32", "0.33"])
def test_the_ray_v2_variable_picks_rays_executor_where_the_release_reads_it(
        version: str) -> None:
    """VLLM_USE_RAY_V2_EXECUTOR_BACKEND (0.20-0.32, engines.json ray_v2_env): 1 gives
    RayExecutorV2, which schedules asynchronously, 0 the old RayDistributedExecutor, which
    does not; a release outside the window runs its default executor whatever it says."""
    def overlapped(ray_v2: bool | None) -> bool:
        s = EngineSettings(engine_version=version, distributed_executor_backend="ray",
                           ray_v2_executor=ray_v2)
        return sim_config(DEP, s).async_scheduling

    read = in_releases(version, ENV_RULE)
    assert overlapped(True) == (overlapped(None) if not read else True)
    assert overlapped(False) == (overlapped(None) if not read else False)
    assert bool(vllm_async_conflict(version, "", "V1", 1, "ray", False)) == (not overlapped(False))
    mp = EngineSettings(engine_version=version, distributed_executor_backend="mp",
                        ray_v2_executor=False)
    assert sim_config(DEP, mp).async_scheduling  # it picks ray's executor alone


def test_ray_v2_unset_on_0_25_is_asynchronous_and_0_synchronous_with_a_caution(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = (*COMMANDS["simulate"], "--engine-version", "0.25", *RAY)
    code, out, err = run_cli(capsys, *base)
    assert code == 0 and "async scheduling on" in out and "async scheduling off" not in err
    code, out, err = run_cli(capsys, *base, ENV, "0")
    assert code == 0 and "async scheduling on" not in out
    assert "VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0" in err and "priced synchronous" in err
    err = refusal(capsys, *base, ENV, "0", "--async-scheduling")
    assert "VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0" in err and "vLLM 0.25" in err


def test_ray_v2_set_on_0_20_turns_async_scheduling_back_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = (*COMMANDS["simulate"], "--engine-version", "0.20", *RAY)
    default = run_cli(capsys, *base)
    given = run_cli(capsys, *base, ENV, "1", "--async-scheduling")
    assert default[0] == given[0] == 0
    assert "async scheduling on" in given[1] and "async scheduling on" not in default[1]
    assert "async scheduling off" in default[2] and "async scheduling off" not in given[2]


@pytest.mark.parametrize(("argv", "why"), [
    (("--engine-version", "0.19", *RAY), "does not read it"),
    (("--engine-version", "0.34", *RAY), "does not read it"),
    (("--engine-version", "0.25"), "--distributed-executor-backend ray alone")])
def test_ray_v2_where_it_changes_nothing_is_noted_and_ignored(
        capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], why: str) -> None:
    plain = run_cli(capsys, *COMMANDS["simulate"], *argv)
    code, out, err = run_cli(capsys, *COMMANDS["simulate"], *argv, ENV, "0")
    assert code == plain[0] == 0 and out == plain[1]
    assert "VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0 ignored" in err and why in err


def test_ray_v2_takes_0_or_1_and_is_vllms(capsys: pytest.CaptureFixture[str]) -> None:
    assert "is 0 or 1" in refusal(capsys, *COMMANDS["fit"], ENV, "2")
    err = refusal(capsys, *COMMANDS["fit"], "--engine", "sglang", ENV, "1")
    assert "is vLLM's" in err


HYBRID = Deployment.build(resolve_model("Qwen/Qwen3.5-35B-A3B"), resolve_accelerator("h200"),
                          "bf16")
HYBRID_SIM = ("simulate", "Qwen/Qwen3.5-35B-A3B", "--gpu", "h200", "--max-model-len", "32k",
              "--rate", "2", "--num-requests", "20")


@pytest.mark.parametrize("version", ["0.15", "0.16", "0.17", "0.28"])
def test_prefix_caching_of_recurrent_state_is_synchronous_on_0_16_alone(version: str) -> None:
    """vLLM 0.16's VllmConfig turns async scheduling off where mamba_cache_mode is not 'none'
    (engines.json mamba_prefix_caching_refused); without prefix caching it stays on."""
    def overlapped(prefix_caching: bool | None) -> bool:
        s = EngineSettings(engine_version=version, prefix_caching=prefix_caching)
        return sim_config(HYBRID, s).async_scheduling

    refused = in_releases(version, RULE["mamba_prefix_caching_refused"])
    assert overlapped(True) is not refused
    assert overlapped(False)
    assert sim_config(DEP, EngineSettings(engine_version=version,
                                          prefix_caching=True)).async_scheduling  # no state


def test_prefix_caching_on_0_16_is_priced_synchronous_and_refused_with_the_flag(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = (*HYBRID_SIM, "--engine-version", "0.16", "--enable-prefix-caching")
    code, out, err = run_cli(capsys, *base)
    assert code == 0 and "async scheduling on" not in out
    assert "vLLM 0.16 turns async scheduling off for prefix caching" in err
    assert "mamba_cache_mode 'align'" in err
    err = refusal(capsys, *base, "--async-scheduling")
    assert "vLLM 0.16 refuses the pair" in err and "prefix caching" in err
    code, out, err = run_cli(capsys, *HYBRID_SIM, "--engine-version", "0.17",
                             "--enable-prefix-caching", "--async-scheduling")
    assert code == 0 and "async scheduling on" in out
