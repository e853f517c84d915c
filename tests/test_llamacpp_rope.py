"""llama-server's RoPE flags: YaRN at a new scale lifts n_ctx_train, the slot cap (PR #28030);
linear scaling, or a build before the PR, leaves it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.capacity import context_refusal, served_context
from ridgeline.context_length import served_positions
from ridgeline.llamacpp_rope import RopeLaunch, yarn_n_ctx_train, yarn_since_build
from ridgeline.model import RopeScaling
from tests.conftest import run_cli

MODEL = "mistral-7b"  # a GGUF-style config with no rope_scaling: n_ctx_train 32,768
BASE = (MODEL, "--gpu", "rtx-4090", "--engine", "llama.cpp", "--target-concurrency", "1")


def _trained() -> int:
    trained = served_positions(resolve_model(MODEL), "llama.cpp-cuda")
    assert trained is not None
    return trained


def test_yarn_at_twice_the_scale_serves_the_context_refused_without_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    long = 2 * _trained()
    code, out, _ = run_cli(capsys, "fit", *BASE, "--max-model-len", str(long))
    assert code == 0 and out.startswith("DOES NOT FIT: llama-server caps each slot")
    code, out, _ = run_cli(capsys, "fit", *BASE, "--max-model-len", str(long),
                           "--rope-scaling", "yarn", "--rope-scale", "2")
    assert code == 0 and out.startswith("fits")
    lifted = yarn_n_ctx_train(resolve_model(MODEL), RopeLaunch("yarn", 0.5), _trained())
    assert lifted is not None and lifted[0] == long
    assert f"slot cap is {lifted[1]} tokens" in out  # the cap used, and why
    # the start line carries the flags: without them llama-server keeps the trained cap
    start = next(line for line in out.splitlines() if line.startswith("start it with:"))
    assert "--rope-scaling yarn --rope-scale 2" in start


def test_linear_scaling_leaves_the_cap(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", *BASE, "--max-model-len", str(2 * _trained()),
                           "--rope-scaling", "linear", "--rope-scale", "2")
    assert code == 0 and out.startswith("DOES NOT FIT: llama-server caps each slot")
    assert "linear RoPE scaling leaves it" in out
    # --rope-scale alone is the GGUF's own type: linear where it names none
    model = resolve_model(MODEL)
    assert yarn_n_ctx_train(model, RopeLaunch(None, 0.5), _trained()) is None


def test_yarn_orig_ctx_sets_the_base(capsys: pytest.CaptureFixture[str]) -> None:
    trained = _trained()
    model = resolve_model(MODEL)
    half = RopeLaunch("yarn", 0.5, trained // 2)
    assert yarn_n_ctx_train(model, half, trained) == (
        trained, f"--yarn-orig-ctx {trained // 2:,} × YaRN 2 = {trained:,}")
    code, out, _ = run_cli(capsys, "fit", *BASE, "--max-model-len", str(2 * trained),
                           "--rope-scaling", "yarn", "--rope-scale", "2",
                           "--yarn-orig-ctx", str(trained // 2))
    assert code == 0 and out.startswith("DOES NOT FIT")


def test_a_gguf_trained_with_yarn_lifts_from_its_original_context_at_a_new_scale() -> None:
    """Qwen3's YaRN block (factor 4, original 32,768) as a GGUF states it: its own scale
    leaves n_ctx_train; ×2 takes the original context × 2."""
    model = replace(resolve_model(MODEL), rope_scaling=RopeScaling("yarn", 4.0, 32768))
    trained = _trained()
    assert yarn_n_ctx_train(model, RopeLaunch("yarn", 0.25), trained) is None
    assert yarn_n_ctx_train(model, RopeLaunch(None, 0.5), trained) == (
        2 * 32768, f"original context {32768:,} × YaRN 2 = {2 * 32768:,}")


def test_a_build_before_the_pr_keeps_the_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    long = 2 * _trained()
    yarn = ("--max-model-len", str(long), "--rope-scaling", "yarn", "--rope-scale", "2")
    old = f"b{yarn_since_build() - 1}"
    code, out, _ = run_cli(capsys, "fit", *BASE, *yarn, "--engine-version", old)
    assert code == 0 and out.startswith("DOES NOT FIT")
    assert f"{old} predates PR #28030" in out
    code, out, _ = run_cli(capsys, "fit", *BASE, *yarn,
                           "--engine-version", f"b{yarn_since_build()}")
    assert code == 0 and out.startswith("fits")


def test_the_one_cap_reads_the_launch() -> None:
    """served_context is what the refusal reads: lifted under YaRN, the config's without."""
    dep = Deployment.build(resolve_model(MODEL), resolve_accelerator("rtx-4090"),
                           engine="llama.cpp-cuda")
    trained = _trained()
    assert served_context(dep)[0] == trained and context_refusal(dep, 2 * trained)
    lifted = replace(dep, rope=RopeLaunch("yarn", 0.5))
    assert served_context(lifted)[0] == 2 * trained and not context_refusal(lifted, 2 * trained)


@pytest.mark.parametrize("flags", [
    ("--rope-scaling", "ntk"), ("--rope-scale", "0"), ("--rope-scale", "-2"),
    ("--rope-freq-scale", "nan"), ("--yarn-orig-ctx", "-1"), ("--yarn-orig-ctx", "1.5"),
])
def test_bad_rope_flags_exit_2_in_one_line(capsys: pytest.CaptureFixture[str],
                                           flags: tuple[str, str]) -> None:
    code, _, err = run_cli(capsys, "fit", *BASE, *flags)
    assert code == 2 and len(err.strip().splitlines()) == 1 and flags[0] in err


def test_another_engine_refuses_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "fit", MODEL, "--gpu", "h100", "--engine", "vllm",
                           "--rope-scaling", "yarn", "--rope-scale", "2")
    assert code == 2 and "are llama.cpp's" in err and len(err.strip().splitlines()) == 1


def test_the_launch_refuses_what_llama_cpp_refuses() -> None:
    from ridgeline.errors import InputError

    for bad in ({"scaling": "ntk"}, {"freq_scale": 0.0}, {"yarn_orig_ctx": -1},
                {"yarn_orig_ctx": 1.5}):
        with pytest.raises(InputError):
            RopeLaunch(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("flags", [
    ("--rope-freq-scale", "1e-320"),  # 0 as a 32-bit float: llama.cpp would divide by it
    ("--rope-scale", "1e300"),  # rope_freq_scale 1e-300, likewise 0
    ("--rope-scale", "1e7"),  # n_ctx_train × 1e7, past a uint32_t
    ("--rope-freq-scale", "1e-36"),  # past even a float
])
def test_a_scale_no_context_can_take_exits_2_in_one_line(
        capsys: pytest.CaptureFixture[str], flags: tuple[str, str]) -> None:
    code, _, err = run_cli(capsys, "fit", *BASE, "--max-model-len", str(2 * _trained()),
                           "--rope-scaling", "yarn", *flags)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "internal error" not in err


@pytest.mark.parametrize("freq_scale", [0.5, 0.25, 1 / 1.7, 0.56792, 0.123456789, 0.3])
def test_the_start_line_gives_llama_cpp_the_scale_modelled(freq_scale: float) -> None:
    """The printed flag, read as llama.cpp reads it (--rope-scale F: 1.0f / F; --rope-freq-scale
    S: S, both in 32 bits), is the rope_freq_scale the cap was computed with: a rounded
    --rope-scale (0.56792 as 1.76081) would move the cap of a 131,072-token GGUF a token."""
    from ridgeline.llamacpp_rope import _f32, rope_scale_freq

    flag, value = RopeLaunch("yarn", freq_scale).flags().split()[-2:]
    read = rope_scale_freq(float(value)) if flag == "--rope-scale" else _f32(float(value))
    assert read == _f32(freq_scale)
    if freq_scale in (0.5, 0.25):  # a whole factor keeps the user's spelling
        assert flag == "--rope-scale"


def test_under_yarn_from_an_original_context_the_advice_is_the_scale(
        capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss's GGUF keeps YaRN's original context (4,096): at a new scale llama.cpp sets the
    cap to that × F whatever n_ctx_train is, so --override-kv would leave it (the refusal does
    not advise it) and a larger --rope-scale lifts it; a cap under the GGUF's is 'lowered'."""
    model = resolve_model("gpt-oss-20b")
    assert model.rope_scaling is not None and model.rope_scaling.original_positions
    original = model.rope_scaling.original_positions
    trained = served_positions(model, "llama.cpp-cuda")
    assert trained is not None and trained > 2 * original
    base = ("gpt-oss-20b", "--gpu", "h100", "--engine", "llama.cpp", "--target-concurrency",
            "1", "--rope-scaling", "yarn", "--max-model-len", str(4 * original))
    code, out, _ = run_cli(capsys, "fit", *base, "--rope-scale", "2")
    first = out.splitlines()[0]
    assert code == 0 and first.startswith("DOES NOT FIT") and "a larger --rope-scale" in first
    assert "--override-kv gpt-oss.context_length" in first and "lifts it, as does" not in first
    code, out, _ = run_cli(capsys, "fit", *base, "--rope-scale", "2", "--override-kv",
                           f"gpt-oss.context_length=int:{4 * original}")
    assert code == 0 and out.startswith("DOES NOT FIT")  # the override indeed leaves it
    code, out, _ = run_cli(capsys, "fit", *base, "--rope-scale", "4")
    assert code == 0 and out.startswith("fits")
    code, out, _ = run_cli(capsys, "fit", *base[:-2], "--max-model-len", str(original),
                           "--rope-scale", "2")
    assert code == 0 and f"lowered from {trained:,}" in out


def test_simulate_caps_each_request_at_the_launchs_slot_cap() -> None:
    """Without --max-model-len, -c 0 is the GGUF's n_ctx_train, but each slot takes no more
    than the launch's YaRN leaves it: gpt-oss at ×2 serves original × 2, not 131,072."""
    from ridgeline.memory import EngineSettings
    from ridgeline.sim.config import sim_config

    model = resolve_model("gpt-oss-20b")
    assert model.rope_scaling is not None and model.rope_scaling.original_positions
    dep = Deployment.build(model, resolve_accelerator("h100"), engine="llama.cpp-cuda")
    yarn = replace(dep, rope=RopeLaunch("yarn", 0.5))
    assert sim_config(yarn, EngineSettings()).max_model_len \
        == 2 * model.rope_scaling.original_positions == served_context(yarn)[0]
    assert sim_config(dep, EngineSettings()).max_model_len == served_positions(
        model, "llama.cpp-cuda")
