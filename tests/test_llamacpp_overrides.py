"""llama-server's --override-kv: ARCH.context_length=int:N sets n_ctx_train, the slot cap,
before YaRN rescales it; other keys ride along, noted; malformed ones are refused as llama.cpp
refuses them."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import context_refusal, served_context
from ridgeline.context_length import served_positions
from ridgeline.errors import InputError
from ridgeline.llamacpp_overrides import (
    KvOverride,
    context_override,
    gguf_architecture,
    parse_overrides,
)
from ridgeline.llamacpp_rope import RopeLaunch, yarn_n_ctx_train
from ridgeline.memory import EngineSettings
from ridgeline.sim.config import llamacpp_context, sim_config
from tests.conftest import run_cli

MODEL = "mistral-7b"  # converted to a GGUF of architecture "llama"
BASE = (MODEL, "--gpu", "rtx-4090", "--engine", "llama.cpp", "--target-concurrency", "1")


def _trained() -> int:
    trained = served_positions(resolve_model(MODEL), "llama.cpp-cuda")
    assert trained is not None
    return trained


def _start(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("start it with:"))


def test_context_length_override_serves_twice_the_trained_context(
        capsys: pytest.CaptureFixture[str]) -> None:
    long = 2 * _trained()
    code, out, _ = run_cli(capsys, "fit", *BASE, "--max-model-len", str(long))
    assert code == 0 and out.startswith("DOES NOT FIT: llama-server caps each slot")
    flag = f"llama.context_length=int:{long}"
    code, out, _ = run_cli(capsys, "fit", *BASE, "--max-model-len", str(long),
                           "--override-kv", flag)
    assert code == 0 and out.startswith("fits")
    assert f"slot cap is {long:,} tokens" in out
    assert f"--override-kv {flag}" in _start(out)  # without it llama-server keeps the cap


def test_the_refusals_advice_works_when_pasted(capsys: pytest.CaptureFixture[str]) -> None:
    long = 2 * _trained()
    code, out, _ = run_cli(capsys, "fit", *BASE, "--max-model-len", str(long))
    advice = re.search(r"(--override-kv \S+) lifts it", out)
    assert code == 0 and advice is not None
    code, out, _ = run_cli(capsys, "fit", *BASE, "--max-model-len", str(long),
                           *shlex.split(advice.group(1)))
    assert code == 0 and out.startswith("fits")


def test_the_override_applies_before_yarn() -> None:
    """llama.cpp loads n_ctx_train with the overrides applied; YaRN rescales that at context
    init: --override-kv to T then YaRN ×2 serves 2T."""
    model = resolve_model(MODEL)
    dep = Deployment.build(model, resolve_accelerator("rtx-4090"), engine="llama.cpp-cuda")
    trained = _trained()
    both = RopeLaunch("yarn", 0.5, kv_overrides=parse_overrides(
        f"llama.context_length=int:{2 * trained}"))
    lifted = yarn_n_ctx_train(model, both, 2 * trained)
    assert lifted is not None and served_context(replace(dep, rope=both)) == lifted
    assert lifted[0] == 4 * trained


def test_the_override_sets_what_c_0_allocates(capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server's default -c 0 is n_ctx_train as loaded, with --override-kv applied: fit's
    --fit story and simulate's slot cap read the overridden length, as the caution does."""
    long = 2 * _trained()
    flag = ("--override-kv", f"llama.context_length=int:{long}")
    model = resolve_model(MODEL)
    dep = Deployment.build(model, resolve_accelerator("h100"), engine="llama.cpp-cuda")
    dep = replace(dep, rope=RopeLaunch(kv_overrides=parse_overrides(flag[1])))
    assert llamacpp_context(dep, EngineSettings())[0] == long
    assert sim_config(dep, EngineSettings()).max_model_len == long
    code, out, _ = run_cli(capsys, "fit", MODEL, "--gpu", "h100", "--engine", "llama.cpp",
                           *flag)
    assert code == 0 and f"-c {long:,}, the trained context" in out.splitlines()[0]
    code, out, _ = run_cli(capsys, "simulate", MODEL, "--gpu", "h100", "--engine", "llama.cpp",
                           *flag, "--rate", "1", "--num-requests", "4", "--input-len",
                           str(_trained() + 1000), "--output-len", "8")
    assert code == 0 and f"{long:,} KV cells" in out


def test_an_unrelated_key_is_accepted_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    flag = "tokenizer.ggml.add_bos_token=bool:false"
    code, out, _ = run_cli(capsys, "fit", *BASE, "--max-model-len", "8192", "--override-kv", flag)
    assert code == 0 and out.startswith("fits")
    assert f"--override-kv {flag}: ridgeline does not model this key" in out
    assert f"--override-kv {flag}" in _start(out)


def test_another_architectures_key_leaves_the_cap(capsys: pytest.CaptureFixture[str]) -> None:
    long = 2 * _trained()
    code, out, _ = run_cli(capsys, "fit", *BASE, "--max-model-len", str(long),
                           "--override-kv", f"qwen3.context_length=int:{long}")
    assert code == 0 and out.startswith("DOES NOT FIT")
    assert f"llama.cpp reads {gguf_architecture(resolve_model(MODEL))}.context_length" in out


def test_comma_separated_and_first_of_a_key_wins() -> None:
    model = resolve_model(MODEL)
    trained = _trained()
    overrides = parse_overrides(f"llama.context_length=int:{trained // 2},"
                                f"llama.context_length=int:{trained * 2},\"general.name=str:a,b\"")
    assert len(overrides) == 3 and overrides[2].value == "a,b"
    chosen = context_override(model, overrides)
    assert chosen is overrides[0]
    # a float override of the key: llama.cpp warns of the type and keeps the GGUF's value
    assert context_override(model, parse_overrides("llama.context_length=float:65536")) is None


@pytest.mark.parametrize("bad", ["llama.context_length", "llama.context_length=65536",
                                 "llama.context_length=long:65536", "llama.context_length=int:",
                                 "llama.context_length=int:1.5", "llama.context_length=int:0",
                                 "x=bool:yes", "x=float:abc", "=int:1"])
def test_malformed_overrides_exit_2_in_one_line(capsys: pytest.CaptureFixture[str],
                                                bad: str) -> None:
    code, _, err = run_cli(capsys, "fit", *BASE, "--override-kv", bad)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--override-kv" in err
    with pytest.raises(InputError):
        parse_overrides(bad)


def test_another_engine_refuses_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", MODEL, "--gpu", "h100", "--engine", "vllm",
                           "--override-kv", "llama.context_length=int:65536")
    assert code == 2 and "--override-kv is llama.cpp's" in err
    assert len(err.strip().splitlines()) == 1


def test_an_unnamed_architecture_takes_any_context_length_key() -> None:
    """A model_type ridgeline cannot name a GGUF architecture for: any *.context_length."""
    model = replace(resolve_model(MODEL), model_type="not_a_gguf_arch")
    assert gguf_architecture(model) is None
    override = KvOverride("whatever.context_length", "int", "1000")
    assert context_override(model, (override,)) is override
    dep = Deployment.build(model, resolve_accelerator("rtx-4090"), engine="llama.cpp-cuda")
    assert "ARCH.context_length=int:" in context_refusal(dep, 10 * _trained())


def test_a_context_length_past_a_uint32_is_refused() -> None:
    """n_ctx_train is a uint32_t: an override past it would wrap, not serve that long."""
    most = KvOverride.parse(f"llama.context_length=int:{2**32 - 1}")
    assert context_override(resolve_model(MODEL), (most,)) == most
    with pytest.raises(InputError, match="uint32"):
        KvOverride.parse(f"llama.context_length=int:{2**32}")
