"""vLLM's YaRN launch lines, pasted as its docs print them: --hf-overrides' rope keys and the
older JSON --rope-scaling set the rope_scaling a config.json copy would, and
--vllm-allow-long-max-model-len takes a length past the positions with a caution."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.context_length import served_positions
from ridgeline.datafiles import load_data
from ridgeline.vllm_rope import launch_rope_model
from tests.conftest import cli_json, run_cli
from tests.conftest import refused_line as refused

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
# vLLM docs, features/context_extension (rope_parameters), and its v0.10.2 example (rope_scaling)
DOCS = json.dumps({"rope_parameters": {**YARN, "rope_theta": 1000000}})
OLDER_DOCS = json.dumps({"rope_theta": 1000000, "rope_scaling": YARN})
FIT = ("fit", "--gpu", "h100", "--max-model-len", "131072", "--json")


def answer(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """fit's --json answer (FIT carries --json)."""
    return cli_json(capsys, *(a for a in argv if a != "--json"))


def yarn_copy(tmp_path: Path) -> str:
    """Qwen3-8B's config.json with Qwen's YaRN block, as its card says to edit it."""
    config = dict(load_data("models/Qwen--Qwen3-8B.json"))
    config["rope_scaling"] = YARN
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def held(report: dict[str, Any]) -> tuple[Any, ...]:
    return report["verdict"], report["conversations"], report["pool_bytes_per_gpu"]


@pytest.mark.parametrize("flags", [("--hf-overrides", DOCS), ("--hf-overrides", OLDER_DOCS),
                                   ("--rope-scaling", json.dumps(YARN))])
def test_a_pasted_yarn_launch_serves_what_the_edited_config_serves(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: tuple[str, str]) -> None:
    version = ("--engine-version", "0.9.2") if flags[0] == "--rope-scaling" else ()
    pasted = answer(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], *version, *flags)
    edited = answer(capsys, *FIT[:1], yarn_copy(tmp_path), *FIT[1:], *version)
    assert pasted["verdict"] != "does not fit" and held(pasted) == held(edited)
    bare = answer(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], *version)
    assert bare["verdict"] == "does not fit" and bare["conversations"] == 0


def test_the_override_stretches_the_positions_vllm_derives() -> None:
    spec = resolve_model("qwen3-8b")
    stretched = launch_rope_model(spec, DOCS, None, ["vllm"])
    assert served_positions(stretched, "vllm") == YARN["factor"] * \
        YARN["original_max_position_embeddings"] > served_positions(spec, "vllm")
    # rope_theta alone, or rope_type default, leaves no stretch
    assert launch_rope_model(spec, '{"rope_theta": 5e6}', None, ["vllm"]) == spec
    plain = launch_rope_model(spec, '{"rope_parameters": {"rope_type": "default"}}', None,
                              ["vllm"])
    assert served_positions(plain, "vllm") == served_positions(spec, "vllm")


def test_other_override_keys_and_other_engines_are_refused_by_name(
        capsys: pytest.CaptureFixture[str]) -> None:
    extra = json.dumps({"rope_scaling": YARN, "max_model_len": 131072})
    err = refused(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], "--hf-overrides", extra)
    assert "'max_model_len' is not modelled" in err and "rope_parameters" in err
    err = refused(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], "--engine", "sglang",
                  "--hf-overrides", DOCS)
    assert "--hf-overrides is vLLM's" in err
    err = refused(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], "--engine", "llama.cpp-cuda",
                  "--rope-scaling", json.dumps(YARN))
    assert "JSON --rope-scaling is vLLM's" in err
    # vLLM removed --rope-scaling (PR #28006): 0.11.1's arg_utils.py has it no more, 0.11.0's
    # still does (with a deprecation warning)
    for version in ("0.11.1", "0.12", "0.13"):
        err = refused(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], "--engine-version", version,
                      "--rope-scaling", json.dumps(YARN))
        assert f"vLLM {version} has no --rope-scaling" in err and "--hf-overrides" in err
    assert answer(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], "--engine-version", "0.11.0",
                  "--rope-scaling", json.dumps(YARN))["verdict"] != "does not fit"
    assert "takes a JSON object" in refused(capsys, *FIT[:1], "qwen3-8b", *FIT[1:],
                                            "--hf-overrides", "yarn")
    # llama.cpp's word under vLLM names the way vLLM takes it
    assert "--hf-overrides" in refused(capsys, *FIT[:1], "qwen3-8b", *FIT[1:],
                                       "--rope-scaling", "yarn")


def test_allow_long_max_model_len_is_the_advice_made_actionable(
        capsys: pytest.CaptureFixture[str]) -> None:
    bare = answer(capsys, *FIT[:1], "qwen3-8b", *FIT[1:])
    assert "--vllm-allow-long-max-model-len 1" in bare["refusal"]
    code, out, err = run_cli(capsys, *FIT[:1], "qwen3-8b", *FIT[1:],
                             "--vllm-allow-long-max-model-len", "1")
    assert code == 0 and "unvalidated" in err and "40,960 positions" in err
    allowed = json.loads(out)
    # the same memory as a YaRN stretch of the same length: only the validation differs
    stretched = answer(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], "--hf-overrides", DOCS)
    assert held(allowed) == held(stretched) and allowed["conversations"] > 0
    assert any("unvalidated" in c for c in allowed["cautions"])
    off = answer(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], "--vllm-allow-long-max-model-len", "0")
    assert held(off) == held(bare)
    assert "is vLLM's" in refused(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], "--engine", "sglang",
                                  "--vllm-allow-long-max-model-len", "1")
    assert "0 or 1" in refused(capsys, *FIT[:1], "qwen3-8b", *FIT[1:],
                               "--vllm-allow-long-max-model-len", "yes")


# one deployment each command sizes past Qwen3-32B's 40,960 positions, at 50,000 tokens
PAST = {
    "fit": ("fit", "qwen3-32b", "--gpu", "a100-sxm-40gb", "--num-gpus", "4",
            "--max-model-len", "50000"),
    "decode": ("decode", "qwen3-32b", "--gpu", "a100-sxm-40gb", "--num-gpus", "4",
               "--batch", "1", "--context", "50000"),
    "prefill": ("prefill", "qwen3-32b", "--gpu", "a100-sxm-40gb", "--num-gpus", "4",
                "--prompt-len", "50000"),
    "simulate": ("simulate", "qwen3-32b", "--gpu", "a100-sxm-40gb", "--num-gpus", "4",
                 "--max-model-len", "50000", "--rate", "1", "--num-requests", "4"),
    "utilization": ("utilization", "--model", "qwen3-32b", "--gpu", "a100-sxm-40gb",
                    "--num-gpus", "4", "--running", "1", "--context", "50000"),
    "amdahl": ("amdahl", "--model", "qwen3-32b", "--gpu", "a100-sxm-40gb", "--num-gpus", "4",
               "--context", "50000", "--speedup", "2"),
}


def command_flags(command: str) -> set[str]:
    """Every option string ``command``'s parser takes."""
    import argparse

    from ridgeline.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {o for action in sub.choices[command]._actions for o in action.option_strings}


@pytest.mark.parametrize("command", sorted(PAST))
def test_a_refusal_past_the_positions_advises_only_flags_its_command_takes(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    """utilization's refusal had advised --vllm-allow-long-max-model-len, which it refused as
    `decode`'s, `prefill`'s, `fit`'s and `simulate`'s; amdahl's alike. Every flag the refusal
    names, but the engine's own it says the engine refuses, is one the command takes, and
    each advised way out, given, is taken."""
    import re

    _, out, err = run_cli(capsys, *PAST[command])
    said = out + err
    assert "40,960 positions" in said
    advised = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", said)) - set(
        re.findall(r"refuses (--[a-z][a-z0-9-]+)", said))
    assert {"--hf-overrides", "--vllm-allow-long-max-model-len"} <= advised
    assert advised <= command_flags(command), advised - command_flags(command)
    for way_out in (("--hf-overrides", json.dumps({"rope_scaling": YARN})),
                    ("--vllm-allow-long-max-model-len", "1")):
        _, out, err = run_cli(capsys, *PAST[command], *way_out)
        assert "40,960 positions (max_position_embeddings); --hf" not in out + err


def test_utilization_reads_a_yarn_deployment_as_fit_sizes_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-32B served at 131,072 with its card's YaRN: utilization had no way to read a
    request of 50,000 tokens on it."""
    override = ("--hf-overrides", json.dumps({"rope_scaling": YARN}))
    running = cli_json(capsys, *PAST["utilization"], *override)
    sized = cli_json(capsys, *PAST["fit"], *override)
    assert running["refusal"] is None and running["conversations"] == sized["conversations"] > 0
    assert "give --model" in refused(capsys, "utilization", "--gpu", "h100", "--running", "1",
                                     *override)


def test_a_refusal_past_the_positions_names_the_cards_yarn_before_the_unsafe_override(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3's card ('Processing Long Texts') documents YaRN, factor 4 over 32,768, for 131,072
    tokens: the refusal names that override, pasteable, ahead of VLLM_ALLOW_LONG_MAX_MODEL_LEN;
    a model whose card documents none, or a length past what it reaches, gets the latter
    alone."""
    import re

    refusal = answer(capsys, *FIT[:1], "qwen3-8b", *FIT[1:])["refusal"]
    pasted = re.search(r"--hf-overrides '([^']+)'", refusal)
    assert pasted and refusal.index("--hf-overrides") < refusal.index("VLLM_ALLOW_LONG")
    served = answer(capsys, *FIT[:1], "qwen3-8b", *FIT[1:], "--hf-overrides", pasted[1])
    assert served["refusal"] is None and served["conversations"] > 0
    for model, length in (("qwen3-8b", "200000"), ("llama-3.1-8b", "200000")):
        refusal = answer(capsys, "fit", model, "--gpu", "h100", "--max-model-len",
                         length)["refusal"]
        assert "VLLM_ALLOW_LONG" in refusal and "--hf-overrides" not in refusal
