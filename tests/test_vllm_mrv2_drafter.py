"""What Model Runner V2 holds for a drafter that the V1 runner did not: n-gram's token ids on
the GPU (v0.32+), a draft model's speculator and the profile forward it cuts (v0.31+), and the
drafts' logits under draft_sample_method 'probabilistic'."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.engine_spec import EngineSpec, vllm_speculative_config
from ridgeline.errors import InputError
from ridgeline.memory import EngineSettings, kv_pool, stage_pools
from ridgeline.vllm_memory import activation_bytes_per_token
from ridgeline.vllm_mrv2_drafter import (
    draft_logits_bytes,
    draft_model_buffer_bytes,
    ngram_buffer_bytes,
    ngram_scan_block,
    ngram_token_table_bytes,
    profile_forward_tokens,
)
from tests.conftest import run_cli

DRAFT = EngineSpec(3, "draft-model", "meta-llama/Llama-3.2-1B")
NGRAM = EngineSpec(3, "ngram")


def l8(gpus: int = 1, pp: int = 1) -> Deployment:
    return Deployment.build(resolve_model("llama-3.1-8b"), resolve_accelerator("h100"),
                            num_gpus=gpus, pipeline_parallel_size=pp, engine="vllm")


def settings(version: str, drafter: EngineSpec | None, length: int = 8192) -> EngineSettings:
    return EngineSettings(max_model_len=length, engine_version=version,
                          speculative_decoding=drafter is not None, drafter=drafter)


def test_ngram_on_mrv2_holds_every_seats_token_ids_on_the_gpu() -> None:
    """From 0.32 (Model Runner V2): seats × max_model_len × 4 B, plus the scan's buffers; on
    0.31's V1 runner nothing. The table grows with the length served, the cache a token not."""
    short, long = (kv_pool(l8(), settings("0.32", NGRAM, n)) for n in (8192, 32768))
    seats = short.max_num_seqs
    assert short.runner == "MRV2"
    for pool, length in ((short, 8192), (long, 32768)):
        assert pool.drafter_buffer_bytes == pytest.approx(
            ngram_token_table_bytes(seats, length) + ngram_buffer_bytes(seats, length, 3))
    assert long.drafter_buffer_bytes - short.drafter_buffer_bytes > \
        ngram_token_table_bytes(seats, 32768 - 8192)
    plain = kv_pool(l8(), settings("0.32", None))
    assert plain.drafter_buffer_bytes == 0
    assert short.rest_bytes == pytest.approx(
        plain.rest_bytes - short.drafter_buffer_bytes
        - (short.cuda_graph_bytes - plain.cuda_graph_bytes))
    on_v1 = kv_pool(l8(), settings("0.31", NGRAM))
    assert on_v1.runner == "V1" and on_v1.drafter_buffer_bytes == 0


def test_ngrams_table_is_on_every_stage_its_buffers_on_the_last() -> None:
    """RequestState lives on every pipeline stage; the speculator only on the last."""
    first, last = stage_pools(l8(2, 2), settings("0.32", NGRAM))
    seats = first.max_num_seqs
    assert first.drafter_buffer_bytes == pytest.approx(ngram_token_table_bytes(seats, 8192))
    assert last.drafter_buffer_bytes == pytest.approx(
        ngram_token_table_bytes(seats, 8192) + ngram_buffer_bytes(seats, 8192, 3))


@pytest.mark.parametrize("length", [1, 5, 16, 63, 64, 255, 256, 1023, 1024, 131072])
def test_the_ngram_scan_block_is_a_power_of_two_of_at_least_16(length: int) -> None:
    block = ngram_scan_block(length)
    assert block >= 16 and block & (block - 1) == 0
    assert block <= max(16, 2 * length)
    assert ngram_scan_block(2 * length) >= block  # never narrower for a longer table


def test_a_draft_model_on_mrv2_cuts_the_profile_forward_by_a_slot_a_request() -> None:
    """0.31+: the dummy batch runs tokens less one a dummy request (min(tokens, seats)); the
    sampler still samples a row each. On 0.30's V1 runner the forward runs every token."""
    mrv2 = kv_pool(l8(), settings("0.31", DRAFT))
    seats, tokens = mrv2.max_num_seqs, mrv2.profile_tokens
    run = profile_forward_tokens(tokens, seats, "draft-model")
    assert mrv2.runner == "MRV2" and mrv2.forward_tokens == run == tokens - min(tokens, seats)
    assert mrv2.forward_bytes == pytest.approx(run * activation_bytes_per_token(l8()))
    assert mrv2.drafter_buffer_bytes == pytest.approx(draft_model_buffer_bytes(seats, tokens, 3))
    v1 = kv_pool(l8(), settings("0.30", DRAFT))
    assert v1.runner == "V1" and v1.forward_tokens == 0 and v1.forward_tokens_run == tokens
    assert v1.forward_bytes == pytest.approx(tokens * activation_bytes_per_token(l8()))
    assert profile_forward_tokens(tokens, seats, "ngram") == tokens


def test_probabilistic_drafts_keep_their_logits_on_mrv2_and_are_refused_elsewhere() -> None:
    """draft_sample_method 'probabilistic' (greedy is the default) keeps seats × drafts × vocab
    logits in the head dtype; the V1 runner's table of draft probabilities is not sized, nor an
    EAGLE head's vocabulary."""
    config = ('{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B", '
              '"num_speculative_tokens": 3, "draft_sample_method": "%s"}')
    greedy, sampled = (vllm_speculative_config(config % m) for m in ("greedy", "probabilistic"))
    assert replace(greedy, draft_sample_method="") == DRAFT
    base, logits = (kv_pool(l8(), settings("0.32", d)) for d in (greedy, sampled))
    vocab = l8().model.vocab_size
    assert logits.drafter_buffer_bytes - base.drafter_buffer_bytes == pytest.approx(
        draft_logits_bytes(base.max_num_seqs, 3, vocab))
    with pytest.raises(InputError, match="V1 runner"):
        kv_pool(l8(), settings("0.30", sampled))
    eagle = replace(sampled, method="eagle")
    with pytest.raises(InputError, match="EAGLE head"):
        kv_pool(l8(), settings("0.32", eagle))
    with pytest.raises(InputError, match="draft_sample_method is one of"):
        vllm_speculative_config(config % "top_k")


def test_fit_shows_the_drafter_buffers_and_refuses_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    ngram = ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}')
    argv = ("fit", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "--max-model-len",
            "8192", "--speculative-config", ngram)
    code, out, err = run_cli(capsys, *argv, "--explain")
    assert code == 0, err
    assert "− drafter buffers (Model Runner V2)" in out
    assert "n-gram's token ids on the GPU" in out
    code, out, err = run_cli(capsys, *argv, "--engine-version", "0.31", "--json")
    assert code == 0 and json.loads(out)["taken_bytes_per_gpu"]["drafter_buffers"] == 0
    sampled = ngram.replace("}", ', "draft_sample_method": "probabilistic"}')
    code, _, err = run_cli(capsys, *argv[:-1], sampled, "--engine-version", "0.31")
    assert code == 2 and "V1 runner" in err and len(err.strip().splitlines()) == 1


def test_probabilistic_mtp_keeps_logits_and_ngram_none() -> None:
    """MTP's draft logits take the target's vocabulary; n-gram's speculator keeps none, so
    'probabilistic' changes nothing there, and --explain does not name them."""
    from ridgeline.vllm_mrv2_drafter import describe_drafter_buffers

    v3 = Deployment.build(resolve_model("deepseek-v3"), resolve_accelerator("h200"),
                          num_gpus=8, engine="vllm")
    mtp = EngineSpec(1, "mtp")
    greedy = kv_pool(v3, replace(settings("0.32", mtp), draft_mtp=True))
    sampled = kv_pool(v3, replace(settings("0.32", replace(mtp, draft_sample_method=(
        "probabilistic"))), draft_mtp=True))
    assert sampled.drafter_buffer_bytes - greedy.drafter_buffer_bytes == pytest.approx(
        draft_logits_bytes(greedy.max_num_seqs, 1, v3.model.vocab_size))
    ngram = replace(NGRAM, draft_sample_method="probabilistic")
    assert kv_pool(l8(), settings("0.32", ngram)).drafter_buffer_bytes == \
        kv_pool(l8(), settings("0.32", NGRAM)).drafter_buffer_bytes
    assert "logits" not in describe_drafter_buffers(ngram, 1024, 8192)
