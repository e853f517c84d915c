"""How many requests SGLang runs at once beside a hybrid's state pool, release by release:
max_num_reqs = min(max_num_reqs, max_mamba_cache_size // ratio), the ratio 3 with the radix
cache on and 1 with it off, except that 0.5.7 added the extra buffer's two slots under the
default no_buffer strategy too (a fifth), and that releases before 0.5.6.post1 turned the
radix cache off for Mamba-2 models (Nemotron-H, Falcon-H1) whatever the flags, while gated
DeltaNet's (Qwen3-Next) kept it. Read in the release wheels 0.5.3.post2-0.5.9
(engines.json sglang.mamba_pool)."""

from __future__ import annotations

import json
import re

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sglang_hybrid import (
    sglang_fixed_state_slots,
    sglang_radix_cache,
    sglang_running_cap,
    sglang_slots_per_request,
)
from ridgeline.sglang_memory import sglang_data, sglang_release

QWEN3_NEXT, NEMOTRON_H = "qwen3-next-80b-a3b", "nemotron-h-56b"
V059 = "0.5.9"  # the figures below: the last release before the prefill CUDA-graph reserve


def fit_json(capsys: pytest.CaptureFixture[str], model: str, gpus: int, context: str,
             version: str | None, *flags: str) -> dict[str, object]:
    from ridgeline.cli import main

    args = ["fit", model, "--gpu", "h100", "--num-gpus", str(gpus), "--max-model-len", context,
            "--engine", "sglang", "--json", *flags]
    if version is not None:
        args += ["--engine-version", version]
    assert main(args) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def state_slots(model: str, gpus: int, context: int, version: str | None) -> int:
    dep = Deployment.build(resolve_model(model), resolve_accelerator("h100"), num_gpus=gpus,
                           engine="sglang")
    return kv_pool(dep, EngineSettings(max_model_len=context, engine_version=version)).state_slots


def test_every_boundary_names_the_release_and_lines_it_was_read_in() -> None:
    pool = sglang_data()["mamba_pool"]
    rules = [*pool["slots_per_running_request_by_release"], pool["radix_cache_off_for_mamba"],
             pool["state_pool_radix_off"]]
    for rule in rules:
        assert sglang_release(rule["from"]) < sglang_release(rule["before"])
        assert re.search(r"\w\.py:\d+", rule["source"])  # file:line
        assert re.search(r"\b0\.5\.\d+\b", rule["source"])  # the release it was read in
        assert sglang_release(rule["before"]) <= sglang_release(sglang_data()["newest_checked"])
    assert re.search(r"\.py:\d+", pool["slots_source"])


def test_a_post_release_follows_the_one_before_it() -> None:
    """0.5.3.post1 kept a fixed state pool of --max-running-requests (or 512) and no ratio;
    0.5.3.post2 first carved mamba_full_memory_ratio's share: the .post numbers order them."""
    assert sglang_release("0.5.3.post1") < sglang_release("0.5.3.post2") \
        < sglang_release("0.5.3.post3") < sglang_release("0.5.4")
    assert state_slots(QWEN3_NEXT, 4, 32768, "0.5.3.post1") == 0
    assert state_slots(QWEN3_NEXT, 4, 32768, "0.5.3.post2") > 200  # its ratio 0.2, below


def test_the_newest_release_keeps_todays_rule() -> None:
    """No version: 0.5.9's ratio, 3 with the radix cache on and 1 with it off, for every
    hybrid; 1,368 slots run 456."""
    for name in (QWEN3_NEXT, NEMOTRON_H):
        model = resolve_model(name)
        for radix in (True, False):
            assert sglang_slots_per_request(radix, None, model) \
                == sglang_slots_per_request(radix, "0.5.9", model) == (3 if radix else 1)
    assert sglang_running_cap(1368) == sglang_running_cap(1368, True, "0.5.9") == 456
    assert sglang_running_cap(1368, False, "0.5.9") == 1368


def test_qwen3_next_kept_its_radix_cache_and_runs_a_third_of_its_slots_but_in_0_5_7(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next (gated DeltaNet) had the mamba radix cache (PR #11214) from 0.5.3.post2:
    on four H100s at 32K it runs a third of its state slots under 0.5.3.post3 as under 0.5.9,
    and a fifth under 0.5.7, whose default no_buffer strategy still took the extra buffer's
    two slots (model_runner_kv_cache_mixin.py:291-304)."""
    slots = state_slots(QWEN3_NEXT, 4, 32768, V059)
    assert slots > 300
    for version, ratio in (("0.5.3.post3", 3), ("0.5.6.post2", 3), ("0.5.7", 5), ("0.5.8", 3),
                           ("0.5.9", 3)):
        assert state_slots(QWEN3_NEXT, 4, 32768, version) == slots
        assert fit_json(capsys, QWEN3_NEXT, 4, "32k", version)["max_num_seqs"] == slots // ratio
    # --no-prefix-caching (--disable-radix-cache): one slot a request in every release, the
    # pool set at 512 requests before 0.5.9 (handle_max_mamba_cache), carved in 0.5.9
    for version, pool in (("0.5.3.post3", 512), ("0.5.7", 512), ("0.5.9", slots)):
        off = fit_json(capsys, QWEN3_NEXT, 4, "32k", version, "--no-prefix-caching")
        assert off["max_num_seqs"] == pool
    # the newest release (no version) keeps the ratio; its prefill CUDA graphs, off for
    # Qwen3-Next through 0.5.14, reserve 464 MiB more, so a few slots fewer
    newest = state_slots(QWEN3_NEXT, 4, 32768, None)
    assert 300 < newest < slots
    assert fit_json(capsys, QWEN3_NEXT, 4, "32k", None)["max_num_seqs"] == newest // 3
    assert state_slots(QWEN3_NEXT, 4, 32768, "0.5.14") == slots


def test_nemotron_h_ran_every_state_slot_until_0_5_6_post1(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang 0.5.3.post2-0.5.6 turned the radix cache off for Mamba-2 models (model_runner.py
    'NemotronHConfig model detected, disable radix cache'), so its state pool was
    --max-running-requests' (64 here) and max_mamba_cache_size // 1 of them ran: on eight H100s
    at 8K Nemotron-H-56B runs every state slot; from 0.5.6.post1 (PR #13584) the pool is
    carved and a third of it runs, in 0.5.7 a fifth."""
    slots = state_slots(NEMOTRON_H, 8, 8192, None)
    assert slots > 100
    for version in ("0.5.3.post2", "0.5.5", "0.5.6"):
        fixed = fit_json(capsys, NEMOTRON_H, 8, "8k", version, "--max-running-requests", "64")
        assert fixed["max_num_seqs"] == fixed["conversations"] == 64
    for version, ratio in (("0.5.6.post1", 3), ("0.5.7", 5), ("0.5.8.post1", 3), ("0.5.9", 3),
                           (None, 3)):
        assert fit_json(capsys, NEMOTRON_H, 8, "8k", version)["max_num_seqs"] == slots // ratio


def test_only_models_with_mamba_layers_lost_the_radix_cache() -> None:
    qwen, nemotron = resolve_model(QWEN3_NEXT), resolve_model(NEMOTRON_H)
    assert qwen.mamba is None and qwen.linear_attention is not None and nemotron.mamba is not None
    assert sglang_radix_cache(True, "0.5.6", qwen)
    assert not sglang_radix_cache(True, "0.5.6", nemotron)
    assert sglang_radix_cache(True, "0.5.6.post1", nemotron)
    assert sglang_radix_cache(True, None, nemotron)  # the newest keeps it
    assert sglang_radix_cache(True, "0.5.6")  # no model: nothing to turn it off for
    assert not sglang_radix_cache(False, "0.5.9", qwen)


def test_without_its_radix_cache_sglang_set_the_state_pool_at_512_before_0_5_9() -> None:
    """handle_max_mamba_cache before 0.5.9: with the radix cache off, max_mamba_cache_size =
    --max-running-requests, else 512, whatever the memory; 0.5.9 carves the ratio's share
    unless --max-running-requests is given. None: the pool is carved."""
    qwen, nemotron = resolve_model(QWEN3_NEXT), resolve_model(NEMOTRON_H)
    assert sglang_fixed_state_slots(True, "0.5.5", nemotron) == 512
    assert sglang_fixed_state_slots(True, "0.5.5", nemotron, 64) == 64
    assert sglang_fixed_state_slots(True, "0.5.5", qwen) is None
    assert sglang_fixed_state_slots(True, "0.5.6.post1", nemotron) is None
    assert sglang_fixed_state_slots(False, "0.5.8.post1", qwen) == 512
    assert sglang_fixed_state_slots(False, "0.5.9", qwen) is None
    assert sglang_fixed_state_slots(False, None, qwen, 64) == 64


GIB = 2**30
ROW = re.compile(r"^− state pool \((.*)\)\s+([\d.,]+) GiB$", re.M)


def fit_text(capsys: pytest.CaptureFixture[str], model: str, gpus: int, context: str,
             version: str | None, *flags: str) -> str:
    from ridgeline.cli import main

    args = ["fit", model, "--gpu", "h100", "--num-gpus", str(gpus), "--max-model-len", context,
            "--engine", "sglang", *flags]
    if version is not None:
        args += ["--engine-version", version]
    assert main(args) == 0
    return capsys.readouterr().out


def test_sglang_0_5_6_cannot_start_nemotron_h_56b_on_eight_h100s_at_its_512_state_slots(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before 0.5.6.post1 SGLang ran Nemotron-H without its radix cache, and without the radix
    cache handle_max_mamba_cache (model_runner.py:1463-1469 in 0.5.6) sets the state pool at
    --max-running-requests or 512 requests whatever the memory: 512 × 0.1062 GiB = 54.40 GiB
    of state per GPU at TP8 against a 50.26 GiB static pool (SGLang's fraction read off
    nvidia-smi's 81,559 MiB) leaves the KV cache nothing, and
    init_memory_pool raises 'Not enough memory' (:1748-1751). 0.5.6.post1 carves a share and
    fits."""
    for version in ("0.5.3.post2", "0.5.5", "0.5.6"):
        r = fit_json(capsys, NEMOTRON_H, 8, "8k", version)
        assert r["verdict"] == "does not fit" and r["conversations"] == 0 and r["tokens"] == 0
        state, pool = r["slot_cache_bytes_per_gpu"], r["pool_bytes_per_gpu"]
        assert round(state / GIB, 1) == 54.4 and round(pool / GIB, 1) == 50.3
        assert r["shortfall_bytes_per_gpu"] == pytest.approx(
            state + r["per_conversation_bytes_per_gpu"] - pool)
    text = fit_text(capsys, NEMOTRON_H, 8, "8k", "0.5.6")
    headline = text.splitlines()[0]
    assert headline.startswith("DOES NOT FIT: SGLang 0.5.6 sizes the state pool at "
                               "--max-running-requests, default 512, with its radix cache off "
                               "(turned off for a model with Mamba-2 layers before 0.5.6.post1)")
    assert "512 requests' recurrent state × 0.1062 GiB = 54.40 GiB per GPU, more than the " \
        "50.26 GiB static pool" in headline
    assert "'Not enough memory. Please try to increase --mem-fraction-static'" in headline
    assert "--max-running-requests 472 or fewer leaves room for 1 conversation" in headline
    row = ROW.search(text)
    assert row is not None and row.groups() == (
        "512 requests' state × 0.1062 GiB: SGLang's default with its radix cache off", "54.40")
    # none, not a negative pool: the overrun in words, beside the product
    assert re.search(r"^= KV pool \(none: the state pool is 4\.13 GiB more than the static pool; "
                     r"SGLang stops at start-up, 'Not enough memory'\)\s+0\.00 GiB per GPU$",
                     text, re.M)
    assert fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6.post1")["verdict"] != "does not fit"


def test_fewer_running_requests_make_the_state_pool_fit(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--max-running-requests 64 sets 64 states (6.80 GiB) and the KV cache gets the rest; the
    bound the refusal names holds: 472 leaves room for a conversation of 8K (three), 473
    none."""
    r = fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--max-running-requests", "64")
    assert r["verdict"] != "does not fit" and r["max_num_seqs"] == r["conversations"] == 64
    per_request = r["slot_cache_bytes_per_gpu"] / 64
    assert round(per_request / GIB, 4) == 0.1062
    assert r["blocks_per_gpu"] == int((r["pool_bytes_per_gpu"] - 64 * per_request)
                                      // (r["per_conversation_bytes_per_gpu"] / 8000))
    text = fit_text(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--max-running-requests", "64")
    assert "− state pool (64 requests' state × 0.1062 GiB: --max-running-requests 64)" in text
    assert "SGLang 0.5.6 sizes the state pool at --max-running-requests 64 with its radix cache " \
        "off (turned off for a model with Mamba-2 layers before 0.5.6.post1), whatever the " \
        "memory; a running request takes one slot" in text
    assert fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--max-running-requests",
                    "472")["conversations"] >= 1
    assert fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--max-running-requests",
                    "473")["verdict"] == "does not fit"


def test_a_set_state_pool_explains_its_one_product(capsys: pytest.CaptureFixture[str]) -> None:
    """--explain: slots × state per request = the state pool, pool − state pool = the KV
    cache, and the blocks and conversations counted beside it."""
    text = fit_text(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--max-running-requests", "64",
                    "--explain")
    assert "state pool per GPU: state slots × state per request (SGLang sets the slots, not a " \
        "share of the pool)" in text
    assert "state slots = 64  [SGLang 0.5.6 sizes the state pool at --max-running-requests 64" \
        in text
    assert "state per request = 0.1062 GiB  [54 Mamba layers' conv state (bf16) and SSM " \
        "state (fp32) ÷ TP 8]" in text
    assert "=> state pool = 6.799 GiB" in text and "=> KV cache = 43.47 GiB" in text
    assert "blocks the KV cache holds: floor(KV cache ÷ bytes per block)" in text
    overrun = fit_text(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--explain")
    assert "=> state pool = 54.4 GiB" in overrun and "=> KV cache = 0 GiB" in overrun
    assert "the states are 4.131 GiB more than the static pool, so SGLang stops" in overrun
    assert "shortfall per GPU: target × per conversation + max(state slots, target) × state " \
        "per request − the static pool" in overrun


def test_a_set_state_pool_short_of_the_target_counts_a_slot_for_each(
        capsys: pytest.CaptureFixture[str]) -> None:
    """64 slots hold 64 conversations; 600 need 600 states beside their KV cache, so the
    shortfall is 600 × (per conversation + per request) − the pool, not the KV cache alone."""
    r = fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--max-running-requests", "64",
                 "--target-concurrency", "600")
    per_request = r["slot_cache_bytes_per_gpu"] / 64
    assert r["verdict"] == "does not fit" and r["conversations"] == 64
    assert r["shortfall_bytes_per_gpu"] == pytest.approx(
        600 * (r["per_conversation_bytes_per_gpu"] + per_request) - r["pool_bytes_per_gpu"])
    headline = fit_text(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--max-running-requests", "64",
                        "--target-concurrency", "600").splitlines()[0]
    assert "its state pool holds 64 requests' states, --max-running-requests 64: " \
        "--max-running-requests 600 gives each conversation one" in headline


def test_without_its_radix_cache_qwen3_next_gets_512_states_until_0_5_9(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--no-prefix-caching on Qwen3-Next (four H100s, 32K): 512 states (9.21 GiB) under 0.5.8,
    whatever the memory; 0.5.9 carves 0.9 ÷ 1.9 unless --max-running-requests sets it."""
    r = fit_json(capsys, QWEN3_NEXT, 4, "32k", "0.5.8", "--no-prefix-caching")
    assert round(r["slot_cache_bytes_per_gpu"] / GIB, 2) == 9.21 and r["max_num_seqs"] == 512
    carved = fit_json(capsys, QWEN3_NEXT, 4, "32k", "0.5.9", "--no-prefix-caching")
    per_request = r["slot_cache_bytes_per_gpu"] / 512
    share = carved["pool_bytes_per_gpu"] * 0.9 / 1.9  # whole requests' states of it
    assert 0 <= share - carved["slot_cache_bytes_per_gpu"] < per_request
    given = fit_json(capsys, QWEN3_NEXT, 4, "32k", "0.5.9", "--no-prefix-caching",
                     "--max-running-requests", "100")
    assert given["slot_cache_bytes_per_gpu"] == pytest.approx(100 * per_request)
    # with the radix cache on, 0.5.9 carves whatever --max-running-requests says
    on = fit_json(capsys, QWEN3_NEXT, 4, "32k", "0.5.9", "--max-running-requests", "100")
    assert on["slot_cache_bytes_per_gpu"] == carved["slot_cache_bytes_per_gpu"]


def test_qwen3_next_under_0_5_3_post2_carves_a_sixth_of_the_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    """mamba_full_memory_ratio was 0.2 in 0.5.3.post2 (server_args.py:374) and 0.9 from
    0.5.3.post3: the state pool is 0.2 ÷ 1.2 of the static pool, 246 requests' states on four
    H100s at 32K, not 0.9 ÷ 1.9 (701), and a third of them run."""
    from ridgeline.sglang_hybrid import sglang_state_ratio

    assert sglang_state_ratio("0.5.3.post2") == 0.2
    assert sglang_state_ratio("0.5.3.post3") == sglang_state_ratio() == 0.9
    old = fit_json(capsys, QWEN3_NEXT, 4, "32k", "0.5.3.post2")
    new = fit_json(capsys, QWEN3_NEXT, 4, "32k", "0.5.3.post3")
    per_request = new["slot_cache_bytes_per_gpu"] / state_slots(QWEN3_NEXT, 4, 32768,
                                                                 "0.5.3.post3")
    slots = int(old["pool_bytes_per_gpu"] * 0.2 / 1.2 // per_request)
    assert slots == 246 == state_slots(QWEN3_NEXT, 4, 32768, "0.5.3.post2")
    assert old["slot_cache_bytes_per_gpu"] == pytest.approx(slots * per_request)
    assert old["max_num_seqs"] == 246 // 3 and old["conversations"] == 60
    text = fit_text(capsys, QWEN3_NEXT, 4, "32k", "0.5.3.post2")
    row = ROW.search(text)
    assert row is not None and row.group(1) == \
        "246 requests' recurrent state, mamba_full_memory_ratio 0.2"
    short = fit_json(capsys, QWEN3_NEXT, 4, "32k", "0.5.3.post2", "--target-concurrency", "100")
    assert short["shortfall_bytes_per_gpu"] == pytest.approx(
        100 * short["per_conversation_bytes_per_gpu"] * 1.2 - short["pool_bytes_per_gpu"])


def test_the_no_request_headline_divides_by_the_releases_slots(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two state slots: 2 // 3 = 0 under 0.5.9, 2 // 5 = 0 under 0.5.7 (its no_buffer
    strategy's extra two), both refusing to start."""
    for version, per in (("0.5.9", 3), ("0.5.7", 5)):
        head = fit_text(capsys, "qwen3.5-35b-a3b", 1, "2048", version, "--mem-fraction-static",
                        "0.835").splitlines()[0]
        assert f"max_running_requests at 2 // {per} = 0" in head


STEP = re.compile(r"^  (\S[^:]*): (.*)$")
QUANTITY = re.compile(r"^      (?:=> )?(.+?) = (-?[\d,.]+(?:e[-+]?\d+)?)\b")


def explain_steps(text: str) -> dict[str, dict[str, float]]:
    """--explain's steps: each step's label → its quantities (the result too) by name."""
    steps: dict[str, dict[str, float]] = {}
    current: dict[str, float] | None = None
    for line in text.split("How each number was computed:", 1)[1].splitlines():
        head, value = STEP.match(line), QUANTITY.match(line)
        if head is not None:
            current = steps.setdefault(head.group(1), {})
        elif value is not None and current is not None:
            current[value.group(1)] = float(value.group(2).replace(",", ""))
    return steps


def shown(value: float) -> float:
    """A value as --explain shows it: four significant figures."""
    return float(f"{value:.4g}")


def test_a_carved_state_pool_explains_each_step_from_the_ones_above(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next on four H100s at 32K under SGLang's defaults (the radix cache on): the
    static pool, the ratio's whole slots, slots × one request's state, the KV cache the rest,
    the conversations it holds beside a slot each, its blocks and the requests that run; each
    number the one operation on the numbers above it (as printed, and exactly from --json),
    and no llama.cpp slot wording."""
    r = fit_json(capsys, QWEN3_NEXT, 4, "32k", V059)
    state = r["state_pool"]
    assert isinstance(state, dict) and state["sized"] == "carved"
    text = fit_text(capsys, QWEN3_NEXT, 4, "32k", V059, "--explain")
    steps = explain_steps(text)
    assert "(-np)" not in text and "KV pool per GPU" not in steps
    pool, per = state["static_pool_bytes_per_gpu"], state["bytes_per_request_per_gpu"]
    assert pool == r["pool_bytes_per_gpu"]
    # exactly, from the JSON
    slots = int(pool * 0.9 / 1.9 // per)
    kv = pool - slots * per
    per_conversation = r["per_conversation_bytes_per_gpu"]
    conversations = min(int(kv // per_conversation), slots)
    assert (state["slots"], state["bytes_per_gpu"], state["kv_cache_bytes_per_gpu"]) \
        == (slots, slots * per, kv)
    assert r["conversations"] == conversations == 38
    assert r["blocks_per_gpu"] == int(kv // (per_conversation / 32000))
    assert r["max_num_seqs"] == min(4096, slots // 3) == 233  # 1.2M tokens: 4,096 asked
    # as printed, each step from the printed numbers above it
    static = steps["static pool per GPU"]["static pool"]
    assert static == shown(pool / GIB)
    carve = steps["state slots"]
    assert carve["static pool"] == static and carve["ratio"] == 0.9
    assert carve["state slots"] == slots == int(static * 0.9 / 1.9 / carve["state per request"])
    product = steps["state pool per GPU"]
    assert product["state slots"] == slots
    assert product["state pool"] == shown(slots * product["state per request"])
    rest = steps["KV cache beside the state pool"]
    assert rest["static pool"] == static and rest["state pool"] == product["state pool"]
    # within the printed precision: three numbers each rounded to 0.01 GiB
    assert rest["KV cache"] == pytest.approx(static - rest["state pool"], abs=0.015)
    held = steps["conversations"]
    assert held["KV cache"] == rest["KV cache"] and held["state slots"] == slots
    assert held["conversations"] == conversations \
        == min(int(held["KV cache"] / held["per conversation"]), slots)
    blocks = steps["blocks the KV cache holds"]
    assert blocks["KV cache"] == rest["KV cache"]
    assert blocks["blocks"] == r["blocks_per_gpu"]
    assert blocks["blocks"] == pytest.approx(blocks["KV cache"] * 1024 / blocks["bytes per block"],
                                             rel=1e-3)
    running = steps["max_running_requests"]
    assert running["state slots"] == slots and running["slots per running request"] == 3
    assert running["max_running_requests"] == min(running["SGLang's own"], slots // 3) == 233
    # the shortfall for 100: (1 + ratio) × the KV cache they need, against the static pool
    short = fit_json(capsys, QWEN3_NEXT, 4, "32k", V059, "--target-concurrency", "100")
    assert short["shortfall_bytes_per_gpu"] == pytest.approx(
        1.9 * 100 * short["per_conversation_bytes_per_gpu"] - short["pool_bytes_per_gpu"])
    step_text = fit_text(capsys, QWEN3_NEXT, 4, "32k", V059, "--explain",
                         "--target-concurrency", "100")
    shortfall = explain_steps(step_text)["shortfall per GPU"]
    assert shortfall["shortfall"] == pytest.approx(
        (1 + shortfall["ratio"]) * shortfall["target"] * shortfall["per conversation"]
        - shortfall["static pool"], abs=0.01)


def test_a_carved_pool_short_of_slots_counts_the_states_in_its_shortfall(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Nemotron-H-56B on eight H100s at 8K: a request's state (0.106 GiB) outweighs its 8K
    conversation (0.038), so the 224 carved slots bind, not the KV cache. 300 conversations
    need 300 states, 0.9 ÷ 1.9 of a static pool of 1.9 × 300 × per request ÷ 0.9 — not
    (1 + 0.9) × their KV cache, which the pool already holds (a shortfall of 0.0 GiB)."""
    r = fit_json(capsys, NEMOTRON_H, 8, "8k", V059, "--target-concurrency", "300")
    state = r["state_pool"]
    assert isinstance(state, dict) and r["conversations"] == state["slots"] == 224
    per = state["bytes_per_request_per_gpu"]
    assert r["shortfall_bytes_per_gpu"] == pytest.approx(1.9 * 300 * per / 0.9
                                                          - r["pool_bytes_per_gpu"])
    assert round(r["shortfall_bytes_per_gpu"] / GIB, 1) == 17.0
    # a static pool that much bigger holds them, one a little smaller does not: 230 (1.4 GiB
    # short) on the same cards, the fraction raised by the shortfall ÷ what it applies to
    # (the card less the start-up memory)
    r = fit_json(capsys, NEMOTRON_H, 8, "8k", V059, "--target-concurrency", "230")
    assert r["conversations"] == 224 and 1 < r["shortfall_bytes_per_gpu"] / GIB < 2
    reserved = r["reserved_fraction"]
    applies = (r["reserved_bytes_per_gpu"] - r["taken_bytes_per_gpu"]["non_torch"]) / reserved
    for margin, holds in ((0.02, True), (-0.05, False)):
        raised = reserved + (r["shortfall_bytes_per_gpu"] + margin * GIB) / applies
        bigger = fit_json(capsys, NEMOTRON_H, 8, "8k", V059, "--target-concurrency", "230",
                          "--mem-fraction-static", f"{raised:.4f}")
        assert (bigger["conversations"] >= 230) is holds


def test_an_overrun_state_pool_shows_the_requests_sglang_was_asked(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Where the fixed states fill the static pool SGLang stops at 'Not enough memory' with
    the request pool it asked for (min(2,048, 512 slots // 1) = 512), before it halves the
    tokens, so max_running_requests reads 512 (the flag's 600 where given), not 1."""
    r = fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6")
    assert r["max_num_seqs"] == 512 and r["engine_max_batch"] == 0 and r["tokens"] == 0
    assert fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--max-running-requests",
                    "600")["max_num_seqs"] == 600
    text = fit_text(capsys, NEMOTRON_H, 8, "8k", "0.5.6")
    assert "conversations of 8,000 tokens at once: min(0 conversations, max_running_requests 512) = 0" \
        in text
    explain = explain_steps(fit_text(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--explain"))
    running = explain["max_running_requests"]
    assert running["SGLang's own"] == 2048 and running["slots per running request"] == 1
    assert running["max_running_requests"] == min(2048, 512 // 1) == 512


def test_an_overrun_state_pool_offers_the_max_running_requests_that_fits(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The lever is the headline's bound (472 for one 8K conversation, 437 for 100), and
    the fit it names holds what the lever says."""
    text = fit_text(capsys, NEMOTRON_H, 8, "8k", "0.5.6")
    assert "--max-running-requests 472 or fewer leaves room" in text.splitlines()[0]
    assert re.search(r"^  --max-running-requests 472\s+3 conversations, batch 3$", text, re.M)
    levers = fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--target-concurrency",
                      "100")["levers"]
    assert isinstance(levers, list)
    lever = next(lv for lv in levers if lv["name"].startswith("--max-running-requests"))
    assert lever["name"] == "--max-running-requests 437"
    held = fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--target-concurrency", "100",
                    "--max-running-requests", "437")
    assert held["verdict"] != "does not fit"
    assert lever["conversations"] == held["conversations"] >= 100
    assert fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--target-concurrency", "100",
                    "--max-running-requests", "438")["verdict"] == "does not fit"
    # a pool that fits its slots gets no such lever
    names = [lv["name"] for lv in fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6",
                                            "--max-running-requests", "64")["levers"]]
    assert not any(name.startswith("--max-running-requests") for name in names)


def test_max_total_tokens_caps_what_the_state_pool_leaves(
        capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang takes the state pool from the uncapped rest, then caps the tokens: Qwen3-Next
    at --max-total-tokens 200,000 keeps the uncapped run's 701 slots, and its KV cache holds
    200,000 tokens, six conversations of 32K; a cap above what the states leave binds
    nothing. The budget shows the state rows before the cap."""
    free = fit_json(capsys, QWEN3_NEXT, 4, "32k", V059)
    capped = fit_json(capsys, QWEN3_NEXT, 4, "32k", V059, "--max-total-tokens", "200000")
    state, free_state = capped["state_pool"], free["state_pool"]
    assert isinstance(state, dict) and isinstance(free_state, dict)
    assert state["slots"] == free_state["slots"] == 701
    assert capped["pool_bytes_per_gpu"] == free["pool_bytes_per_gpu"]
    assert capped["tokens"] == 200000 and capped["conversations"] == 200000 // 32000 == 6
    assert capped["max_total_tokens"] == {"cap": 200000, "binds": True}
    assert state["kv_cache_bytes_per_gpu"] == pytest.approx(
        200000 * capped["per_conversation_bytes_per_gpu"] / 32000)
    text = fit_text(capsys, QWEN3_NEXT, 4, "32k", V059, "--max-total-tokens", "200000")
    rows = [line for line in text.splitlines() if line.startswith(("= ", "− "))]
    assert [row.split(" (")[0].split("  ")[0] for row in rows[-3:]] == \
        ["= static pool", "− state pool", "= KV pool, capped at --max-total-tokens 200,000"]
    leave = (free["pool_bytes_per_gpu"] - free["slot_cache_bytes_per_gpu"]) / GIB
    assert round(leave, 2) == 14.05  # on nvidia-smi's 81,559 MiB
    assert f"(the states leave {leave:.2f} GiB)" in rows[-1] \
        and rows[-1].endswith("2.29 GiB per GPU")
    loose = fit_json(capsys, QWEN3_NEXT, 4, "32k", V059, "--max-total-tokens", "2000000")
    assert loose["max_total_tokens"] == {"cap": 2000000, "binds": False}
    assert (loose["tokens"], loose["conversations"]) == (free["tokens"], free["conversations"])
    short = fit_json(capsys, QWEN3_NEXT, 4, "32k", V059, "--max-total-tokens", "200000",
                     "--target-concurrency", "20")
    assert short["shortfall_bytes_per_gpu"] == pytest.approx(
        20 * short["per_conversation_bytes_per_gpu"] - state["kv_cache_bytes_per_gpu"])


def test_json_says_how_the_state_pool_was_sized(capsys: pytest.CaptureFixture[str]) -> None:
    """carved: mamba_full_memory_ratio's share (0.2 in 0.5.3.post2); fixed: slots SGLang set
    with its radix cache off, and why; no key for a model without recurrent state."""
    carved = fit_json(capsys, QWEN3_NEXT, 4, "32k", "0.5.3.post2")["state_pool"]
    assert isinstance(carved, dict)
    assert (carved["sized"], carved["mamba_full_memory_ratio"], carved["slots"],
            carved["radix_cache"], carved["slots_per_running_request"]) \
        == ("carved", 0.2, 246, True, 3)
    fixed = fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6", "--max-running-requests",
                     "64")["state_pool"]
    assert isinstance(fixed, dict)
    assert (fixed["sized"], fixed["mamba_full_memory_ratio"], fixed["slots"],
            fixed["radix_cache"], fixed["overrun_bytes_per_gpu"]) == ("fixed", None, 64, False, 0)
    assert fixed["why"].startswith("SGLang 0.5.6 sizes the state pool at "
                                   "--max-running-requests 64 with its radix cache off")
    over = fit_json(capsys, NEMOTRON_H, 8, "8k", "0.5.6")["state_pool"]
    assert isinstance(over, dict) and over["kv_cache_bytes_per_gpu"] == 0
    assert over["overrun_bytes_per_gpu"] == pytest.approx(
        over["bytes_per_gpu"] - over["static_pool_bytes_per_gpu"])
    assert "state_pool" not in fit_json(capsys, "llama-3.1-8b", 1, "32k", None)


def test_a_carved_pool_of_no_slots_runs_no_request(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3.5-35B-A3B on one H100 at --mem-fraction-static 0.8333: 0.9 ÷ 1.9 of its 0.12 GiB
    static pool (after the 100 MiB multimodal embedding cache, v0.5.18+) is less than one
    request's state, so no slot, max_num_reqs = 0 // 3 = 0, and SGLang asserts
    'max_running_request is zero'; not a pool without a state pool that runs 2,048."""
    r = fit_json(capsys, "qwen3.5-35b-a3b", 1, "2048", None, "--mem-fraction-static", "0.8333")
    state = r["state_pool"]
    assert isinstance(state, dict) and state["slots"] == 0
    assert state["static_pool_bytes_per_gpu"] * 0.9 / 1.9 < state["bytes_per_request_per_gpu"]
    assert r["tokens"] > 2048  # the KV cache alone would hold a conversation
    assert (r["max_num_seqs"], r["conversations"], r["engine_max_batch"], r["verdict"]) \
        == (0, 0, 0, "does not fit")
    head = fit_text(capsys, "qwen3.5-35b-a3b", 1, "2048", None, "--mem-fraction-static",
                    "0.8333").splitlines()[0]
    assert head.startswith("DOES NOT FIT: SGLang runs no request at once: its state pool "
                           "holds no request's state (mamba_full_memory_ratio 0.9: 0.1158 GiB "
                           "static pool × 0.9 ÷ 1.9 = 0.0549 GiB, less than one request's "
                           "0.0600 GiB)")
    assert "max_running_requests at 0 // 3 = 0" in head and "'max_running_request is zero'" in head
    # its shortfall: a static pool whose share holds a running request's three slots
    assert r["shortfall_bytes_per_gpu"] == pytest.approx(
        1.9 * 3 * state["bytes_per_request_per_gpu"] / 0.9 - r["pool_bytes_per_gpu"])
    # decode says why SGLang runs none: the slots, not a pool capping the request's length
    from ridgeline.cli import main

    assert main(["decode", "qwen3.5-35b-a3b", "--gpu", "h100", "--engine", "sglang",
                 "--gpu-memory-utilization", "0.8333", "--context", "2048"]) == 0
    assert "its state pool's 0 slots are fewer than one running request takes, so " \
        "max_running_requests is 0 and SGLang would refuse to start ('max_running_request is " \
        "zero')" in capsys.readouterr().out


def test_when_the_state_pool_caps_the_running_requests_the_flag_cannot_raise_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next at 4K holds 306 conversations but runs 701 // 3 = 233: the caution names the
    division, not --max-running-requests (which leaves 233), and the radix cache off runs a
    request a slot."""
    r = fit_json(capsys, QWEN3_NEXT, 4, "4k", V059, "--target-concurrency", "300")
    assert r["conversations"] >= 300 and r["max_num_seqs"] == 701 // 3
    assert any(c.startswith("the pool holds the 300 conversations, but at most 233 run at once: "
                            "max_running_requests is the state pool's 701 slots // 3")
               for c in r["cautions"])
    assert fit_json(capsys, QWEN3_NEXT, 4, "4k", V059, "--target-concurrency", "300",
                    "--max-running-requests", "300")["max_num_seqs"] == 233
    from ridgeline.cli import main

    assert main(["fit", QWEN3_NEXT, "--gpu", "h100", "--num-gpus", "4", "--max-model-len",
                 "4k", "--engine", "sglang", "--engine-version", V059,
                 "--target-concurrency", "300"]) == 0
    head = capsys.readouterr().out.splitlines()[0]  # the flag is no lever: none is named
    assert head.startswith("fits") and "; target 300 not met: the state pool's slots run " \
        "233 at once, which --max-running-requests cannot raise" in head and "held" not in head
    assert fit_json(capsys, QWEN3_NEXT, 4, "4k", V059, "--target-concurrency", "300",
                    "--no-prefix-caching")["engine_max_batch"] >= 300


def test_jambas_mamba1_layers_keep_the_radix_cache_in_the_releases_that_drop_nemotrons(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before 0.5.6.post1 SGLang turned the radix cache off only for its mamba2_config's
    architectures (Nemotron-H, Falcon-H1); Jamba's Mamba-1 layers kept a carved pool, and its
    running cap stays slots // 3, where Nemotron-H's pool was fixed at 512 slots."""
    jamba = fit_json(capsys, "jamba-1.5-mini", 2, "8000", "0.5.6")
    assert jamba["state_pool"]["sized"] == "carved"
    assert jamba["max_num_seqs"] <= jamba["state_pool"]["slots"] // 3
    nemotron = fit_json(capsys, "nemotron-h-56b", 8, "8000", "0.5.6",
                        "--max-running-requests", "64")
    assert nemotron["state_pool"]["sized"] == "fixed"


def test_fit_json_names_the_kv_cache_apart_from_the_static_pool(
        capsys: pytest.CaptureFixture[str]) -> None:
    """For an SGLang hybrid pool_bytes_per_gpu is the static pool the states are carved from;
    kv_cache_bytes_per_gpu is the cache beside them, as the budget's '= KV pool' line says
    (Qwen3-Next on 4 x H100 at 32k: 26.58 and 14.01 GiB); elsewhere the two are one."""
    hybrid = fit_json(capsys, "qwen3-next-80b-a3b", 4, "32k", None)
    assert hybrid["kv_cache_bytes_per_gpu"] == pytest.approx(
        hybrid["pool_bytes_per_gpu"] - hybrid["state_pool"]["bytes_per_gpu"])
    assert hybrid["kv_cache_bytes_per_gpu"] == hybrid["state_pool"]["kv_cache_bytes_per_gpu"]
    dense = fit_json(capsys, "llama-3.1-8b", 1, "32k", None)
    assert dense["kv_cache_bytes_per_gpu"] == dense["pool_bytes_per_gpu"]
