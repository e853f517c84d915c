"""A split's pools launched as one disaggregated deployment: each pool's command carries its
engine's KV hand-off and role (vLLM's NixlConnector, SGLang's --disaggregation-mode, TensorRT-
LLM's cache_transceiver_config: test_disaggregated), the router names every replica at the
port its pool listens on, and a pool's command pasted into fit or simulate is read, not
refused (TensorRT-LLM's, with its transfer buffers priced: test_trtllm_transceiver)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from ridgeline.candidate import Candidate
from ridgeline.catalog import resolve_model
from ridgeline.datafiles import engine_defaults
from ridgeline.disaggregated import split_connector
from ridgeline.plan import PlanResult
from ridgeline.reports.launch_commands import command_line
from ridgeline.reports.plan_commands import PlanCommands
from ridgeline.serving_load import Load
from tests.conftest import run_cli, same_answer

LOAD = Load(2.0, "2000", "200")
MODEL_ID = "llama-3.1-8b"  # printed as MODEL, so ridgeline reads the command back by name


def _split(prefill: int = 1, decode: int = 2) -> Candidate:
    return Candidate("h100-sxm", 1, 1, "bf16", "bf16", None, 64, 0.02, 0.3, 1.0,
                     prefill + decode, 2.0, False, "", (1.0, 1.0),
                     disaggregated=f"{prefill}P{decode}D", prefill_replicas=prefill,
                     max_model_len=16384, pool_knobs=((None, None), (64, None)))


def _launch(engine: str) -> PlanCommands:
    result = cast(PlanResult, SimpleNamespace(engine=engine, engine_version=None, load=LOAD))
    return PlanCommands(resolve_model(MODEL_ID), MODEL_ID, result, 16384)


def _flag(command: str, flag: str) -> list[str]:
    """The words after ``flag`` up to the next flag, as a shell splits ``command``."""
    words = shlex.split(command)
    at = words.index(flag) + 1
    end = next((i for i in range(at, len(words)) if words[i].startswith("--")), len(words))
    return words[at:end]


def _pasted(engine: str, command: str) -> list[str]:
    """A pool's command as pasted after `ridgeline fit`: without the environment it sets and
    the engine's launch words (``vllm serve``, SGLang's through --model-path), MODEL first."""
    words = shlex.split(command)
    while re.fullmatch(r"[A-Z_]+=.*", words[0]):
        words.pop(0)
    return words[len(engine_defaults(engine)["cli"]["launch"].split()):]


def test_vllms_pools_carry_the_nixl_connector_and_the_router_names_each_replica() -> None:
    commands, _ = _launch("vllm").pool_launch(_split(2, 3))
    for role in ("prefill", "decode"):
        config = json.loads(_flag(commands[role], "--kv-transfer-config")[0])
        assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        # the NIXL side channel's address, on a node apart from its peer (default localhost)
        env = shlex.split(commands[role])[0]
        assert env.startswith("VLLM_NIXL_SIDE_CHANNEL_HOST=") and role.upper() in env
    router = commands["router"]
    assert _flag(router, "--prefiller-hosts") == ["PREFILL_HOST_1", "PREFILL_HOST_2"]
    assert _flag(router, "--decoder-hosts") == ["DECODE_HOST_1", "DECODE_HOST_2", "DECODE_HOST_3"]
    assert set(_flag(router, "--prefiller-ports")) == set(_flag(commands["prefill"], "--port"))
    assert set(_flag(router, "--decoder-ports")) == set(_flag(commands["decode"], "--port"))


def test_sglangs_pools_carry_their_mode_and_backend_and_the_router_their_urls() -> None:
    commands, extra = _launch("sglang").pool_launch(_split(1, 2))
    for role in ("prefill", "decode"):
        assert _flag(commands[role], "--disaggregation-mode") == [role]
        assert _flag(commands[role], "--disaggregation-transfer-backend") == ["mooncake"]
        assert _flag(commands[role], "--host") == ["0.0.0.0"]  # SGLang binds 127.0.0.1
    router = shlex.split(commands["router"])
    assert router[:3] == ["python", "-m", "sglang_router.launch_router"]
    assert "--pd-disaggregation" in router
    port = {role: _flag(commands[role], "--port")[0] for role in ("prefill", "decode")}
    assert _flag(commands["router"], "--prefill") == [f"http://PREFILL_HOST:{port['prefill']}"]
    assert router.count("--decode") == 2
    assert f"http://DECODE_HOST_2:{port['decode']}" in router
    # the placeholders, said once: the decode pool's command names each replica's own
    assert _flag(commands["decode"], "--host") == ["0.0.0.0"]
    assert any("PREFILL_HOST and DECODE_HOST_i (i = 1 … 2)" in line for line in extra)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_a_pasted_pool_command_is_read_by_fit_and_simulate(
        capsys: pytest.CaptureFixture[str], engine: str, role: str) -> None:
    """The pool's own flags (its port, the connector and role) change neither its memory
    nor its steps, but for vLLM 0.34's NixlConnector keeping the extensible KV cache off on
    an H100 host without an IMEX channel: fit and simulate note them and answer as for the
    command without them (and, on vLLM, with --no-enable-extensible-kv-cache)."""
    command = _launch(engine).pool_commands(_split())[role]
    pasted = _pasted(engine, command)
    plain = _pasted(engine, command_line(engine, MODEL_ID, _split().pool(role == "prefill"),
                                         16384, model=resolve_model(MODEL_ID),
                                         connector=split_connector(engine, "nvidia")))
    plain += ["--no-enable-extensible-kv-cache"] if engine == "vllm" else []
    where = ("--gpu", "h100", "--engine", engine, "--json")
    code, out, err = run_cli(capsys, "fit", *pasted, *where)
    assert code == 0, err
    fit = json.loads(out)
    assert same_answer(out, run_cli(capsys, "fit", *plain, *where)[1])
    assert "note: ignored" in err and ("--kv-transfer-config" in err or
                                       f"--disaggregation-mode {role}" in err)
    if engine == "vllm":  # the launch line's fraction is the one its pool is sized at
        assert _flag(command, "--gpu-memory-utilization") == [str(fit["reserved_fraction"])]
    load = ("--rate", "1", "--num-requests", "12", "--input-len", "500", "--output-len", "20")
    code, out, err = run_cli(capsys, "simulate", *pasted, *where, *load)
    assert code == 0, err
    assert same_answer(out, run_cli(capsys, "simulate", *plain, *where, *load)[1])


def test_another_connector_is_refused_and_a_hybrid_is_sized_by_release(
        capsys: pytest.CaptureFixture[str]) -> None:
    """LMCache's connector keeps a cache tier of its own: not priced, so refused. gpt-oss's
    sliding-window layers lose vLLM's hybrid KV cache manager to the NixlConnector on v0.11
    (every layer cached in full: half the conversations of 32K, its window and full layers
    half and half); v0.23 and later keep it. On v0.34 the connector keeps the extensible KV
    cache off (an H100 host without an IMEX channel): the pool is the one sized with
    --no-enable-extensible-kv-cache, and with --enable-extensible-kv-cache the one without
    the connector."""
    lmcache = json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})
    nixl = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
    code, out, err = run_cli(capsys, "fit", MODEL_ID, "--gpu", "h100", "--kv-transfer-config",
                             lmcache)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "--kv-transfer-config" in err and "not modelled" in err
    oss = ("fit", "gpt-oss-20b", "--gpu", "h100", "--max-model-len", "32768", "--json")
    held = {}
    for version in ("0.11", "0.34"):
        for extra in ((), ("--kv-transfer-config", nixl)):
            code, out, err = run_cli(capsys, *oss, "--engine-version", version, *extra)
            assert code == 0, err
            held[version, bool(extra)] = json.loads(out)["conversations"]
    assert 0 < held["0.11", True] < held["0.11", False]
    assert held["0.34", True] < held["0.34", False]
    for flag, alone in (("--no-enable-extensible-kv-cache", ()), ("--enable-extensible-kv-cache",
                                                                  ("--kv-transfer-config", nixl))):
        code, out, err = run_cli(capsys, *oss, "--engine-version", "0.34", flag, *alone)
        assert code == 0, err
        assert json.loads(out)["conversations"] == held["0.34", not flag.startswith("--enable")]


def test_a_pasted_trtllm_pool_is_priced_with_its_transfer_buffer(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: Any) -> None:
    """TensorRT-LLM sets its KV transfer buffers aside before it sizes the KV cache: the pool's
    command, its YAML beside it, is read with them (their size: test_trtllm_transceiver)."""
    launch = _launch("trtllm")
    commands, _ = launch.pool_launch(_split())
    for name, text in launch.pool_files(_split()).items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "fit", *_pasted("trtllm", commands["decode"]),
                             "--gpu", "h100", "--engine", "trtllm")
    assert code == 0, err
    assert "− KV transfer buffer (cache_transceiver_config)" in out


@pytest.mark.parametrize("engine, model_id", [
    ("vllm", "gpt-oss-20b"),  # sliding windows beside full attention: a hybrid
    ("vllm", MODEL_ID),  # one cache kind
])
def test_a_vllm_split_of_a_hybrid_is_priced_as_fit_reads_its_commands(
        capsys: pytest.CaptureFixture[str], engine: str, model_id: str) -> None:
    """The pools' commands carry vLLM's NixlConnector, which fit reads (test above: on v0.9.1
    to v0.21 vLLM turns a hybrid's KV cache manager off beside it) as plan sizes the pools
    (disaggregated.pool_connector): no caution on the split but vLLM 0.34's sizing beside it
    (plan_cautions.split_extensible_caution), and fit takes the pasted decode command."""
    from dataclasses import replace

    from ridgeline.engines import profile_for
    from ridgeline.plan_cautions import candidate_cautions, split_extensible_caution
    from ridgeline.serving_load import Slo

    model = resolve_model(model_id)
    split = replace(_split(), weights="as stored")
    said = candidate_cautions(split, engine, profile_for(engine), Slo(1.0, 0.05), model)
    assert [why for why in said if "NixlConnector" in why] \
        == [split_extensible_caution(split, engine, None)]
    command = _launch(engine).pool_commands(_split())["decode"]
    assert "--kv-transfer-config" in command
    pasted = _pasted(engine, command.replace(MODEL_ID, model_id))
    code, _, err = run_cli(capsys, "fit", *pasted, "--gpu", "h100", "--engine-version", "0.11")
    assert code == 0, err


# The release before each engine's first with the printed hand-off, and that release
# (engines.json <engine>.cli.disaggregated.since: vLLM's NixlConnector, SGLang's
# --disaggregation-mode with --disaggregation-transfer-backend).
BOUNDARY = [("vllm", "0.8.5", "0.9.0"), ("sglang", "0.4.5.post3", "0.4.6")]


def _versioned(engine: str, version: str | None) -> PlanCommands:
    result = cast(PlanResult, SimpleNamespace(engine=engine, engine_version=version, load=LOAD))
    return PlanCommands(resolve_model(MODEL_ID), MODEL_ID, result, 16384)


@pytest.mark.parametrize("engine, before, since", BOUNDARY)
def test_a_split_before_the_hand_off_came_gets_one_line_and_no_commands(
        engine: str, before: str, since: str) -> None:
    """A release before the one whose hand-off the commands print gets no pool commands and
    no router, only the line that says which release it needs; that release itself gets each
    pool's command with the hand-off and the router."""
    assert since == engine_defaults(engine)["cli"]["disaggregated"]["since"]
    commands, extra = _versioned(engine, before).pool_launch(_split())
    assert commands == {} and len(extra) == 1
    assert f" {before} cannot launch this split" in extra[0] and f"came in v{since}" in extra[0]
    commands = _versioned(engine, since).pool_launch(_split())[0]
    flag = engine_defaults(engine)["cli"]["disaggregated"]["connector"][0]
    assert set(commands) == {"prefill", "decode", "router"}
    assert all(flag in commands[role] for role in ("prefill", "decode"))
    assert _versioned(engine, since).split_problem() == ""


def test_vllms_v0_engine_gets_no_nixl_commands() -> None:
    """NixlConnector is a V1 connector: a release that runs V0 (VLLM_USE_V1=0) gets the line,
    the same release on V1 the commands."""
    launch = _versioned("vllm", "0.9.0 V0")
    assert launch.pool_launch(_split())[0] == {}
    assert "V1" in launch.split_problem()
    assert _versioned("vllm", "0.9.0 V1").pool_launch(_split())[0]


@pytest.mark.parametrize("engine, before, since", BOUNDARY)
def test_the_plans_text_and_json_say_the_same_of_a_split_it_cannot_launch(
        engine: str, before: str, since: str) -> None:
    """A split the named release cannot launch: --json has no commands and the text's line
    as launch_problem; the release it needs has the commands in both and no problem."""
    from dataclasses import replace

    from ridgeline.reports.plan import PlanReport
    from ridgeline.serving_load import Slo

    split = replace(_split(), verified=True, sim_ttft_s=0.3, sim_tpot_s=0.02)
    for version in (before, since):
        result = PlanResult(LOAD, Slo(1.0, 0.05), (), (), (split,), (), 0, 200.0, "", engine,
                            (), version)
        report = PlanReport(resolve_model(MODEL_ID), MODEL_ID, result, 16384)
        text = "\n".join(report.text_lines())
        row = report.to_dict()["disaggregated"][0]
        if version == before:
            assert row["pool_commands"] is None and row["router_command"] is None
            assert f"no launch: {row['launch_problem']}" in text
            assert "prefill pool," not in text and "router:" not in text
        else:
            assert row["launch_problem"] is None and "no launch" not in text
            assert all(command in text for command in row["pool_commands"].values())
            assert row["router_command"] in text
