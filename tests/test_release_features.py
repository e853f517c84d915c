"""Old releases are no longer priced with what they lacked (release_features.py): before,
`plan llama-3.1-8b ... --engine-version 0.1` put an MI300X on fp8 weights and an fp8 cache
behind a `vllm serve` line, and fit took fp8, NVFP4, gpt-oss and ROCm under vLLM 0.1. Each
gate refuses the release before the one its wheels first show it in and takes that one."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.datafiles import engine_defaults
from ridgeline.deployment import Deployment
from ridgeline.errors import InputError
from ridgeline.hardware import resolve_accelerator
from ridgeline.release_features import format_since, kv_since
from ridgeline.reports.launch_commands import command_line
from tests.conftest import refused_line, run_cli
from tests.test_engine_launch_flags import _replica

FEATURES = engine_defaults("vllm")["release_features"]
SGLANG = engine_defaults("sglang")["release_features"]


def problem(model: str, gpu: str, version: str | None, engine: str = "vllm",
            weights: str | None = None, kv: str | None = None) -> str:
    """Deployment.build's refusal of one GPU of ``gpu`` at ``version``, or ""."""
    try:
        Deployment.build(resolve_model(model), resolve_accelerator(gpu), weights=weights, kv=kv,
                         engine=engine, engine_version=version)
    except InputError as exc:
        return str(exc)
    return ""


# (model, gpu, weights, kv, engine, the release read before the first that has it, that one)
GATES = [
    ("llama-2-7b", "mi300x", None, None, "vllm", "0.2.3", FEATURES["vendors"]["amd"]["since"]),
    ("llama-2-7b", "h100", "fp8", None, "vllm", "0.4.0", format_since("vllm", "fp8")[0]),
    ("llama-2-7b", "mi300x", "fp8", None, "vllm", "0.5.4",
     format_since("vllm", "fp8", "amd")[0]),
    ("llama-2-7b", "h100", None, "fp8", "vllm", "0.2.7", kv_since("vllm", "fp8")),
    ("llama-2-7b", "mi300x", None, "fp8", "vllm", "0.4.0", kv_since("vllm", "fp8", "amd")),
    ("llama-3.1-8b", "b200", "nvfp4", None, "vllm", "0.8.5", format_since("vllm", "nvfp4")[0]),
    ("llama-3.1-8b", "b200", "nvfp4", None, "sglang", "0.4.5",
     format_since("sglang", "nvfp4")[0]),
    ("llama-3.1-8b", "h100", None, None, "vllm", "0.5.2",
     FEATURES["rope_types"]["llama3"]["since"]),
    ("qwen3-8b", "h100", None, None, "vllm", "0.8.3",
     FEATURES["architectures"]["Qwen3ForCausalLM"]),
    ("qwen3-30b-a3b", "h100", None, None, "vllm", "0.8.3",
     FEATURES["architectures"]["Qwen3MoeForCausalLM"]),
    ("gpt-oss-20b", "h100", None, None, "vllm", "0.10.0",
     FEATURES["architectures"]["GptOssForCausalLM"]),
    ("qwen3-8b", "h100", None, None, "sglang", "0.4.5.post1",
     SGLANG["architectures"]["Qwen3ForCausalLM"]),
    ("gpt-oss-20b", "h100", None, None, "sglang", "0.4.10.post2",
     SGLANG["architectures"]["GptOssForCausalLM"]),
]


@pytest.mark.parametrize(("model", "gpu", "weights", "kv", "engine", "before", "since"), GATES)
def test_the_release_before_is_refused_naming_the_first_and_that_one_is_taken(
        model: str, gpu: str, weights: str | None, kv: str | None, engine: str, before: str,
        since: str) -> None:
    refusal = problem(model, gpu, before, engine, weights, kv)
    assert f"v{since}" in refusal and before in refusal
    assert problem(model, gpu, since, engine, weights, kv) == ""


@pytest.mark.parametrize(("engine", "before"), [("vllm", "0.6.5"), ("sglang", "0.4.0.post2")])
def test_deepseek_v3_is_refused_before_its_architecture_came(engine: str, before: str) -> None:
    since = engine_defaults(engine)["release_features"]["architectures"]["DeepseekV3ForCausalLM"]
    assert f"DeepseekV3ForCausalLM came in v{since}" in problem("deepseek-v3", "h200", before,
                                                                engine)
    # the first release reads it: what may refuse one H200 then is not the release
    assert "DeepseekV3ForCausalLM" not in problem("deepseek-v3", "h200", since, engine)


def test_the_newest_release_has_every_feature() -> None:
    for model, gpu, weights, kv, engine, _, _ in GATES:
        assert problem(model, gpu, None, engine, weights, kv) == ""


def test_fit_refuses_the_audits_commands_in_one_line(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    for argv in (("--gpu", "h100", "--kv-dtype", "fp8"), ("--gpu", "h100", "-q", "fp8"),
                 ("--gpu", "mi300x"), ("--gpu", "b200", "--weights", "nvfp4")):
        line = refused_line(capsys, "fit", "llama-2-7b", "--engine-version", "0.2.3", *argv)
        assert line.startswith("ridgeline: error: vLLM 0.2.3 ")
    line = refused_line(capsys, "fit", "gpt-oss-20b", "--gpu", "h100", "--engine-version", "0.1")
    assert "GptOssForCausalLM" in line
    line = refused_line(capsys, "fit", "llama-3.1-8b", "--gpu", "b200", "--engine", "sglang",
                        "--engine-version", "0.3", "--weights", "nvfp4")
    assert "SGLang 0.3 serves no nvfp4 weights" in line


def test_decode_and_simulate_refuse_what_the_release_lacked(
        capsys: pytest.CaptureFixture[str]) -> None:
    line = refused_line(capsys, "decode", "llama-2-7b", "--gpu", "h100", "--engine-version",
                        "0.2.7", "--kv-dtype", "fp8")
    assert f"v{kv_since('vllm', 'fp8')}" in line
    line = refused_line(capsys, "simulate", "llama-2-7b", "--gpu", "h100", "--engine-version",
                        "0.4.0", "--weights", "fp8", "--rate", "1", "--num-requests", "10")
    assert "serves no fp8 weights" in line


def test_before_vllm_serve_the_launch_line_is_the_api_servers() -> None:
    cli = engine_defaults("vllm")["cli"]
    old = cli["launch_before"]
    c = _replica(1)
    assert command_line("vllm", "m", c, 4096, old["before"]).startswith(cli["launch"] + " m ")
    line = command_line("vllm", "m", c, 4096, "0.5.1")
    assert line.startswith(old["launch"] + " m ") and "--max-model-len 4096" in line
    # before --max-model-len came, the line leaves it out rather than name a flag it lacks
    assert "--max-model-len" not in command_line("vllm", "m", c, 4096, "0.1.7")


def test_the_fp8_cache_is_spelt_as_each_release_spells_it() -> None:
    for engine in ("vllm", "sglang"):
        cli = engine_defaults(engine)["cli"]
        first = cli["kv_fp8_before"]["before"]
        c = replace(_replica(1), kv="fp8")
        old = command_line(engine, "m", c, 4096, "0.3.0").split()
        new = command_line(engine, "m", c, 4096, first).split()
        assert old[old.index("--kv-cache-dtype") + 1] == cli["kv_fp8_before"]["value"]
        assert new[new.index("--kv-cache-dtype") + 1] == cli["kv_fp8"]


def test_plan_on_an_old_release_picks_what_it_ran_and_prints_its_launch(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.4.0 on an H100 or an MI300X: no fp8 weights anywhere, no fp8 cache on the
    MI300X (0.4.1 there), and the api_server launch (vllm serve came in 0.5.2)."""
    code, out, err = run_cli(capsys, "plan", "llama-2-7b", "--slo-ttft-ms", "500",
                             "--slo-tpot-ms", "50", "--rate", "2", "--engine-version", "0.4.0",
                             "--gpus", "h100,mi300x", "--json")
    assert code == 0, err
    result = json.loads(out)
    text = json.dumps(result)
    assert "vllm serve" not in text and "vllm.entrypoints.openai.api_server" in text
    assert "--quantization fp8" not in text
