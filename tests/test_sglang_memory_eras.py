"""SGLang's default memory rule after 0.5.9 (sglang_memory.py, engines.json sglang): the
prefill CUDA-graph reserve from 0.5.10, the drafter's reserve doubled in 0.5.10 and gone from
0.5.14, --disable-cuda-graph dropping the graphs' terms from 0.5.14/0.5.15, the small-card
tier of 0.5.20 and the --max-running-requests cap of 0.5.22; a run without --engine-version
priced as the newest release read (0.5.23)."""

from __future__ import annotations

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.engine_versions import sized_version
from ridgeline.hardware import resolve_accelerator
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.sglang_memory import (
    SGLangPrefillCase,
    sglang_data,
    sglang_eager_drops_graphs,
    sglang_memory_defaults,
    sglang_memory_tier,
    sglang_prefill_capture_sizes,
    sglang_prefill_case,
    sglang_prefill_graph_mib,
    sglang_prefill_graph_off,
    sglang_speculative_reserve_mib,
)
from tests.conftest import run_cli

H100_SMI = 81_559 * 2**20  # nvidia-smi's memory.total of an H100 SXM, as SGLang reads it
RTX5090_SMI = 32_607 * 2**20
D = sglang_data()
PREFILL = D["prefill_graph_reserve"]


def test_0_5_10_adds_eight_mib_a_prefill_capture_size_before_the_floor() -> None:
    """An H100 at TP1: 0.5.9's 13,440 MiB plus 8 MiB for each of the prefill graphs up to the
    8,192-token chunk (58 sizes, 464 MiB): 0.830 of the card, not 0.835."""
    old = sglang_memory_defaults(H100_SMI, version="0.5.9")
    new = sglang_memory_defaults(H100_SMI, version="0.5.10")
    sizes = sglang_prefill_capture_sizes(new.chunked_prefill_size)
    assert sizes == sorted(set(sizes)) and sizes[-1] == new.chunked_prefill_size
    assert new.prefill_graph_mib == PREFILL["per_capture_size_mib"] * len(sizes)
    assert new.reserved_mib - old.reserved_mib == new.prefill_graph_mib
    mib = H100_SMI / 2**20
    assert new.mem_fraction_static == round((mib - new.reserved_mib) / mib, 3) \
        < old.mem_fraction_static
    assert old.prefill_graph_mib == 0 and old.prefill_graph_off
    # a small chunk under the 10 GiB floor: the floor absorbs the graphs
    small = sglang_memory_defaults(H100_SMI, chunked_prefill_size=2048, version="0.5.10")
    assert small.reserved_mib == D["reserved_mib"]["floor_mib"] and small.prefill_graph_mib
    # --max-total-tokens caps the largest prefill graph
    capped = SGLangPrefillCase(token_cap=1024)
    assert sglang_prefill_graph_mib(8192, "0.5.10", capped) == \
        PREFILL["per_capture_size_mib"] * len(sglang_prefill_capture_sizes(1024))


def test_an_mla_model_reserves_a_flat_share_in_the_releases_that_capture_it() -> None:
    """DeepSeek-V3 (MLA) at TP8: 1.5 GiB of prefill graphs in 0.5.10-0.5.14 and from 0.5.18;
    0.5.15-0.5.16's breakable graphs skip MLA (0.5.17 skips MLA without DSA)."""
    v3 = resolve_model("deepseek-v3")
    case = sglang_prefill_case(v3, resolve_accelerator("h200"))
    assert case.mla and not case.dsa
    base = sglang_memory_defaults(H100_SMI, tp=8, version="0.5.9").reserved_mib
    for version, on in (("0.5.10", True), ("0.5.14", True), ("0.5.15", False),
                        ("0.5.16", False), ("0.5.17", False), ("0.5.18", True), (None, True)):
        rule = sglang_memory_defaults(H100_SMI, tp=8, version=version, prefill=case)
        assert rule.reserved_mib - base == (PREFILL["mla_mib"] if on else 0), version
        assert bool(rule.prefill_graph_off) != on


@pytest.mark.parametrize(("facts", "off_in", "on_in"), [
    ({"dp_size": 8}, ("0.5.10", "0.5.16"), ("0.5.17", "0.5.23")),
    ({"pp": 2}, ("0.5.14", "0.5.19"), ("0.5.15", "0.5.18")),
    ({"lora": True}, ("0.5.13", "0.5.16"), ("0.5.17", "0.5.23")),
    ({"drafter": True}, ("0.5.10",), ("0.5.11", "0.5.23")),
    ({"cuda": False}, ("0.5.10", "0.5.23"), ()),
    ({"multimodal": True}, ("0.5.10", "0.5.23"), ()),
    ({"architecture": "Qwen3NextForCausalLM"}, ("0.5.10", "0.5.14"), ("0.5.15", "0.5.23")),
])
def test_the_rules_that_turn_the_prefill_graphs_off_hold_in_their_own_releases(
        facts: dict[str, object], off_in: tuple[str, ...], on_in: tuple[str, ...]) -> None:
    dp_size, pp = int(str(facts.pop("dp_size", 1))), int(str(facts.pop("pp", 1)))
    case = SGLangPrefillCase(**facts)  # type: ignore[arg-type]
    for version in off_in:
        assert sglang_prefill_graph_off(case, version, dp_size, pp), version
    for version in on_in:
        assert sglang_prefill_graph_off(case, version, dp_size, pp) == "", version


def test_disable_cuda_graph_drops_the_graphs_terms_from_0_5_14() -> None:
    """Through 0.5.13 the reserve counts the graphs on or off; 0.5.14 drops the prefill
    graphs' term under --disable-cuda-graph, 0.5.15 the decode graphs' 2 MiB a batch too."""
    eager = SGLangPrefillCase(graphs_off=True)
    graphs = D["reserved_mib"]["per_graph_batch"]
    for version in ("0.5.13", "0.5.14", "0.5.15", None):
        on = sglang_memory_defaults(H100_SMI, version=version)
        off = sglang_memory_defaults(H100_SMI, version=version, prefill=eager)
        dropped = (on.prefill_graph_mib if sglang_eager_drops_graphs(version) else 0) + (
            graphs * on.cuda_graph_max_bs if version != "0.5.14" and
            sglang_eager_drops_graphs(version) else 0)
        assert on.reserved_mib - off.reserved_mib == dropped, version
    assert not sglang_eager_drops_graphs("0.5.13") and sglang_eager_drops_graphs(None)


def test_the_drafter_reserve_doubles_in_0_5_10_and_goes_in_0_5_14() -> None:
    d = D["speculative_reserve_mib"]
    assert sglang_speculative_reserve_mib("eagle", "0.5.9") == d["model_drafter"]
    assert sglang_speculative_reserve_mib("eagle", "0.5.10") == \
        sglang_speculative_reserve_mib("mtp", "0.5.13") == d["model_drafter_doubled"]
    assert sglang_speculative_reserve_mib("draft-model", "0.5.13") == d["standalone"]
    for method in ("eagle", "mtp", "draft-model"):
        assert sglang_speculative_reserve_mib(method, "0.5.14") == 0
        assert sglang_speculative_reserve_mib(method) == 0


def test_a_card_below_35_gib_gets_a_longer_chunk_and_more_graphs_from_0_5_20() -> None:
    """An RTX 5090 (32,607 MiB): 2,048 tokens and 24 graph batches through 0.5.19, 4,096 and
    48 from 0.5.20, so a larger reserve and a smaller fraction."""
    old, new = (sglang_memory_defaults(RTX5090_SMI, version=v) for v in ("0.5.19", "0.5.20"))
    gib = RTX5090_SMI / 2**30
    assert (old.chunked_prefill_size, old.cuda_graph_max_bs) == \
        tuple(sglang_memory_tier(gib, "0.5.19")[1:3])
    assert (new.chunked_prefill_size, new.cuda_graph_max_bs) == \
        tuple(sglang_memory_tier(gib, "0.5.20")[1:3])
    assert new.chunked_prefill_size > old.chunked_prefill_size
    assert new.cuda_graph_max_bs > old.cuda_graph_max_bs
    assert new.mem_fraction_static < old.mem_fraction_static
    assert sglang_memory_tier(80, "0.5.9") == sglang_memory_tier(80)  # the others as they were


def test_a_given_max_running_requests_caps_the_graph_batch_from_0_5_22() -> None:
    tier = sglang_memory_defaults(H100_SMI, version="0.5.21", max_running_requests=64)
    capped = sglang_memory_defaults(H100_SMI, version="0.5.22", max_running_requests=64)
    assert tier.cuda_graph_max_bs > 64 == capped.cuda_graph_max_bs
    assert tier.reserved_mib - capped.reserved_mib == \
        D["reserved_mib"]["per_graph_batch"] * (tier.cuda_graph_max_bs - 64)


def test_a_run_without_a_version_is_priced_as_the_newest_release_read() -> None:
    """Llama-3.1-8B on one H100: no --engine-version sizes the pool as 0.5.23, whose prefill
    graphs leave it smaller than 0.5.9's by their reserve's share of the card."""
    newest = D["newest_checked"]
    assert sized_version("sglang", None) == newest
    dep = Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                           num_gpus=1, engine="sglang")
    default, named, old = (kv_pool(dep, EngineSettings(engine_version=v))
                           for v in (None, newest, "0.5.9"))
    assert default.pool_bytes == named.pool_bytes < old.pool_bytes
    assert default.reserved_fraction < old.reserved_fraction


def test_0_5_10_alone_captured_no_prefill_graphs_under_a_drafter() -> None:
    """0.5.10's _handle_piecewise_cuda_graph turned them off for speculative decoding (0.5.11
    dropped that rule): an EAGLE drafter there holds its 4 GiB but frees the graphs' share."""
    plain = sglang_memory_defaults(H100_SMI, version="0.5.10")
    eagle = sglang_memory_defaults(H100_SMI, version="0.5.10", draft_method="eagle")
    assert eagle.prefill_graph_off and eagle.prefill_graph_mib == 0
    assert eagle.reserved_mib - plain.reserved_mib == eagle.drafter_mib - plain.prefill_graph_mib
    later = sglang_memory_defaults(H100_SMI, version="0.5.11", draft_method="eagle")
    assert later.prefill_graph_mib == plain.prefill_graph_mib


def test_explain_names_the_prefill_graphs_share_or_why_there_is_none(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang",
                           "--max-model-len", "8k", "--explain")
    graphs = sglang_memory_defaults(H100_SMI).prefill_graph_mib
    assert code == 0 and f"{graphs:,.0f} MiB of it for prefill CUDA graphs" in out
    v3 = ("fit", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8", "--engine", "sglang",
          "--max-model-len", "8k", "--explain")
    code, out, _ = run_cli(capsys, *v3, "--engine-version", "0.5.16")
    assert code == 0 and "no prefill CUDA graphs (off under an MLA model)" in out
    code, out, _ = run_cli(capsys, *v3, "--engine-version", "0.5.9")
    assert code == 0 and "prefill CUDA graphs" not in out
