"""What vLLM's Model Runner V2 holds for a drafter that its V1 runner did not: a draft model's
speculator (v0.31+), the n-gram lookup on the GPU (v0.32+), and the drafts' logits under
draft_sample_method 'probabilistic'; earlier releases send those drafters to the V1 runner
(vllm_memory.mrv2_spec_fallback).

Model Runner V2 builds its request state and its speculator in GPUModelRunner.__init__, after
the worker's memory snapshot, so every buffer here is taken before the KV cache
(engines.json vllm.mrv2_drafter, read in the 0.31.0 to 0.33.0 wheels). Three terms matter:

- n-gram keeps every seat's token ids on the GPU, not in host memory (UVA), so its GPU lookup can
  scan them: seats × max_model_len × 4 B on every pipeline stage. Llama-3.1-70B's 1,024 seats at
  8,192 tokens hold 32 MiB; at its full 131,072, 0.5 GiB.
- A draft model asks one extra query slot per request, so the profile's dummy batch runs
  max_num_batched_tokens less one token per dummy request: 8,192 − 1,024 = 7,168 tokens, an
  eighth less forward peak than the V1 runner profiles.
- Under 'probabilistic' sampling (the default is 'greedy'), the drafts' logits are kept for
  every seat: seats × drafts × vocab × 2 B, 0.98 GiB for 1,024 seats drafting 4 from Llama's
  128,256 tokens.

The rest (draft-token and input buffers) is well under 1 MiB. Neither drafter captures CUDA
graphs of its own ('CUDA graph not yet supported'; the n-gram kernels run eagerly).

The n-gram lookup also costs each step GPU time, where the V1 runner's ran on the CPU: its
two eager kernels (``ngram_lookup_s``), priced as the step-cost model prices a kernel and a
byte, so a verify step of Llama-3.1-8B on an H100 pays about 30 µs for it. The draft
model's own pass in the profile is not sized. It runs over the same tokens beside the target's
hidden states, at the target's tensor-parallel size. Its logits have the same rows and
vocabulary as the sampler's bf16 logits. A pass past the target's would need a drafter nearly
as wide as the target.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ridgeline.units import GIB

if TYPE_CHECKING:
    from ridgeline.deployment import Deployment
    from ridgeline.engine_spec import EngineSpec
    from ridgeline.engines import EngineProfile

DRAFT_MODEL = "draft-model"
NGRAM = "ngram"
HEAD_BYTES = 2  # draft_logits in the target's head_dtype: the model dtype, bf16
# the drafters whose draft logits are sized: their vocabulary is the target's (a draft model's
# must be, use_heterogeneous_vocab refused; MTP's config is the target's); n-gram keeps none
LOGIT_DRAFTERS = (DRAFT_MODEL, "mtp")


def _data() -> dict[str, Any]:
    from ridgeline.vllm_memory import vllm_data

    data: dict[str, Any] = vllm_data()["mrv2_drafter"]
    return data


def profile_forward_tokens(tokens: int, seats: int, method: str) -> int:
    """The tokens Model Runner V2's profile forward runs beside ``method``'s drafter: a draft
    model's speculator asks one extra query slot a request (num_extra_query_per_req), so
    _dummy_run cuts its batch to ``tokens`` less one for each of its min(tokens, seats) dummy
    requests: 8,192 − 1,024 = 7,168; every other drafter runs them all."""
    if method != DRAFT_MODEL:
        return tokens
    return tokens - min(tokens, seats)


def ngram_scan_block(max_model_len: int) -> int:
    """The positions one program of the n-gram scan covers (NgramGPUSpeculator.block_l): 256
    from 1,024 positions, 128 from 256, 64 from 64, else the next power of 2, at least 16."""
    for least, block in _data()["ngram_scan_blocks"]:
        if max_model_len >= least:
            return int(block)
    floor = int(_data()["ngram_scan_block_floor"])
    return max(floor, 1 << max(0, max_model_len - 1).bit_length())


def ngram_token_table_bytes(seats: int, max_model_len: int) -> float:
    """Every seat's token ids, int32, which an n-gram drafter keeps on the GPU for its lookup
    (RequestState.all_token_ids, dense; other runs keep it in host memory): 1,024 seats ×
    8,192 × 4 B = 32 MiB."""
    return seats * max_model_len * float(_data()["ngram_token_table_bytes"])


def ngram_lookup_bytes(rows: int, context: int, max_model_len: int, drafts: int) -> float:
    """The bytes Model Runner V2's n-gram lookup moves in one step (NgramGPUSpeculator.propose;
    engines.json vllm.mrv2_drafter._ngram_kernels_source). Its scan reads each row's token ids
    up to its context, in whole ngram_scan_block blocks, once (the loads for each n-gram size
    and shift hit what the first brought in), and writes one int64 of scratch for every block
    of max_model_len, scanned or not, which the finalize kernel reads back; it then gathers
    each row's drafts (int32) and writes them (int64). 64 rows at 4,096 of 131,072, drafting 4:
    64 × (4,096 × 4 + 512 × 8 × 2 + 4 × 12) B = 1,575,936 B."""
    d = _data()
    block = ngram_scan_block(max_model_len)
    blocks = -(-max_model_len // block)
    scanned = min(max_model_len, -(-context // block) * block)
    table = float(d["ngram_token_table_bytes"])
    scratch = float(d["ngram_scratch_bytes"])
    return rows * (scanned * table + blocks * scratch * 2 + drafts * (table + scratch))


def ngram_lookup_s(dep: Deployment, profile: EngineProfile, rows: int, context: int,
                   max_model_len: int, drafts: int) -> float:
    """One step's n-gram lookup on Model Runner V2 (vLLM 0.32+), on each GPU that runs the
    speculator: its two eager kernels (engines.json vllm.mrv2_drafter.ngram_kernels), each at
    the profile's cost of a kernel's ramp, tail and wait (matmul_overhead_s, the launches
    model's), and the bytes they move (ngram_lookup_bytes) at the step's bandwidth
    (cost.StepRates). Every scheduled row is scanned, a match found or not. Llama-3.1-8B on
    an H100 under vLLM's profile, 64 rows at 4,096 tokens of a 131,072 max_model_len drafting
    4: 2 × 14.3 µs + 1.58 MB at 2.5 TB/s = 29.3 µs."""
    kernels = int(_data()["ngram_kernels"])
    moved = ngram_lookup_bytes(rows, context, max_model_len, drafts)
    return kernels * profile.matmul_overhead_s + moved / _bytes_per_s(dep, profile)


@lru_cache(maxsize=64)
def _bytes_per_s(dep: Deployment, profile: EngineProfile) -> float:
    """The step's bandwidth on one GPU (cost.StepRates), once per deployment and profile: the
    simulator asks it every speculative step."""
    from ridgeline.cost import StepRates

    return StepRates(dep, profile).bytes_per_s


def gpu_lookup_len(dep: Deployment, settings: object, method: str,
                   max_model_len: int | None = None) -> int:
    """The max_model_len Model Runner V2's n-gram lookup spans where vLLM runs ``method``'s
    drafter on it (sim.config.vllm_runner: ngram from v0.32, vllm_memory.mrv2_spec_fallback),
    the launch's (``max_model_len``, else ``settings``', else the model's served positions);
    0 where the lookup runs on the CPU, the V1 runner's (Llama-3.1-8B on 0.31), or the
    drafter is no n-gram lookup or the engine not vLLM."""
    if method != NGRAM or dep.engine != "vllm":
        return 0
    from ridgeline.context_length import served_positions
    from ridgeline.sim.config import vllm_runner

    if vllm_runner(dep, settings, NGRAM) != "MRV2":
        return 0
    return max_model_len or getattr(settings, "max_model_len", None) \
        or served_positions(dep.model, dep.engine) or 0


def ngram_buffer_bytes(seats: int, max_model_len: int, drafts: int) -> float:
    """The n-gram speculator's own buffers: the scan's int64 scratch of one entry per
    ngram_scan_block positions, and its drafts with the request state's (int64, twice):
    1,024 seats at 8,192 tokens drafting 4: 1,024 × (32 × 8 + 4 × 16) B = 320 KiB."""
    d = _data()
    blocks = -(-max_model_len // ngram_scan_block(max_model_len))
    return seats * (blocks * float(d["ngram_scratch_bytes"])
                    + drafts * float(d["ngram_bytes_per_seat_per_draft"]))


def draft_model_buffer_bytes(seats: int, tokens: int, drafts: int) -> float:
    """A draft model's speculator: 44 B a seat (its input buffers' per-request part, request
    index, temperature, seed, last-token index, arange), 20 B a seat a draft (draft tokens,
    their confidence, the request state's), 13 B a token of its own input buffers and 20 B for
    each of tokens + seats expanded slots (ids, positions, one KV group's slot mapping):
    1,024 seats, 8,192 tokens, 4 drafts: 45,056 + 81,920 + 106,496 + 184,320 B = 0.40 MiB."""
    d = _data()
    return (seats * (float(d["draft_model_bytes_per_seat"])
                     + drafts * float(d["draft_model_bytes_per_seat_per_draft"]))
            + tokens * float(d["draft_model_bytes_per_token"])
            + (tokens + seats) * float(d["draft_model_bytes_per_slot"]))


def draft_logits_bytes(seats: int, drafts: int, vocab: int) -> float:
    """The drafts' logits a drafter keeps under draft_sample_method 'probabilistic'
    (DraftModelSpeculator.draft_logits, [seats, drafts, vocab] in the target's head dtype):
    1,024 × 4 × 128,256 × 2 B = 0.98 GiB."""
    return seats * drafts * vocab * float(HEAD_BYTES)


def draft_sample_problem(version: str, runner: str, drafter: EngineSpec | None) -> str:
    """Why ridgeline does not price ``drafter``'s draft_sample_method 'probabilistic' on vLLM
    ``version``'s ``runner``, or "": the V1 runner's profile then samples a fp32 table of draft
    probabilities that is not sized here; Model Runner V2's draft logits are sized, from 0.29
    (where they were read) for a draft model, MTP and n-gram (which keeps none); an EAGLE
    head's vocabulary is its own config's, not read."""
    from ridgeline.vllm_memory import parse_version

    if drafter is None or drafter.draft_sample_method != "probabilistic":
        return ""
    what = "--speculative-config's draft_sample_method 'probabilistic'"
    since = str(_data()["draft_logits_from"])
    if runner != "MRV2":
        return (f"{what} is not modelled on vLLM {version}'s {runner} runner (its profile "
                "samples a fp32 table of draft probabilities, not sized): leave it greedy, or "
                f"price Model Runner V2 (v{since}+: a draft model from v0.31, n-gram from v0.32)")
    if parse_version(version) < parse_version(since):
        return (f"{what}: Model Runner V2's draft logits are read from v{since}; vLLM "
                f"{version} is not modelled with it")
    if drafter.method == "eagle":
        return (f"{what} with an EAGLE head is not modelled: its draft logits take the head's "
                "own vocabulary, which ridgeline does not read")
    return ""


def drafter_buffer_bytes(dep: Deployment, drafter: EngineSpec | None, seats: int, tokens: int,
                         max_model_len: int, last: bool) -> float:
    """What Model Runner V2 holds for ``drafter`` on one GPU of a stage (``last``: the
    pipeline's last, where the speculator is built): n-gram's token table on every stage and
    its buffers on the last; a draft model's buffers; the drafts' logits under 'probabilistic'
    sampling, from a draft model or MTP (the target's vocabulary). 0 for any other drafter,
    whose speculator ridgeline does not size. Llama-3.1-70B on 4 H100s, 1,024 seats at 8,192
    tokens, n-gram drafting 4: 32 MiB + 320 KiB."""
    if drafter is None:
        return 0.0
    drafts = drafter.tokens or dep.model.mtp_layers
    total = 0.0
    if drafter.method == NGRAM:
        total += ngram_token_table_bytes(seats, max_model_len)
        if last:
            total += ngram_buffer_bytes(seats, max_model_len, drafts)
    elif drafter.method == DRAFT_MODEL and last:
        total += draft_model_buffer_bytes(seats, tokens, drafts)
    if last and drafter.draft_sample_method == "probabilistic" \
            and drafter.method in LOGIT_DRAFTERS:
        total += draft_logits_bytes(seats, drafts, dep.model.vocab_size)
    return total


def describe_drafter_buffers(drafter: EngineSpec, seats: int, max_model_len: int) -> str:
    """The drafter buffers' line for fit --explain: what they hold."""
    parts = []
    if drafter.method == NGRAM:
        parts.append(f"n-gram's token ids on the GPU ({seats:,} seats × max_model_len "
                     f"{max_model_len:,} × 4 B = "
                     f"{ngram_token_table_bytes(seats, max_model_len) / GIB:,.2f} GiB) and its "
                     "scan buffers")
    elif drafter.method == DRAFT_MODEL:
        parts.append("the draft model's speculator buffers (draft tokens, inputs)")
    if drafter.draft_sample_method == "probabilistic" and drafter.method in LOGIT_DRAFTERS:
        parts.append(f"the drafts' logits ({seats:,} seats × drafts × vocab × 2 B, "
                     "draft_sample_method 'probabilistic')")
    return "Model Runner V2's, held from start-up: " + "; ".join(parts)
