"""--explain's line on a step's CUDA graph: where a decode (or speculative verify) step ran
padded up to the engine's next captured size, or without graphs above the largest.

The decision is cost.graph_mode's (graph_batches.graph_tokens); this module only says it,
with the sizes the engine captured (graph_batches.captured). vLLM's sizes count a step's
tokens, SGLang's its sequences.
"""

from __future__ import annotations

from ridgeline.deployment import Deployment
from ridgeline.engine_names import engine_name
from ridgeline.explain import Step, q, step
from ridgeline.graph_batches import TOKENS, captured

SOURCE = "graph_batches.py: the engine's captured sizes (vllm_graphs.captured_sizes, " \
    "sglang_capture_sizes)"


def graph_line(dep: Deployment, tokens: int, sequences: int, run_tokens: int | None) -> str:
    """The plain sentence for a graphed-or-not step of ``tokens`` over ``sequences`` whose
    matmuls ran ``run_tokens`` (None: no graph), or "" where there is nothing to say (run at
    a captured size exactly, or an engine whose sizes are not modelled). On vLLM's defaults
    batch 13 reads "batch 13 runs as vLLM's captured CUDA-graph size 16: the matmuls read 16
    rows"; batch 600, "batch 600 is above vLLM's largest captured CUDA-graph size 512: priced
    without CUDA graphs (launch cost per kernel)"."""
    capture = captured(dep)
    if capture is None or not tokens or (run_tokens is not None and run_tokens <= tokens):
        return ""
    engine = engine_name(dep.engine)
    per_row = tokens // sequences
    by_tokens = capture.unit == TOKENS
    what = (f"batch {sequences:,}" if tokens == sequences or not by_tokens else
            f"the verify step's {tokens:,} tokens ({sequences:,} sequences)")
    what += " (the busiest data-parallel rank's)" if dep.data_parallel_size > 1 else ""
    word = "size" if by_tokens else "batch"
    if run_tokens is None:
        if not capture.sizes:
            return (f"{engine} captured no CUDA graphs: {what} is priced without them "
                    "(launch cost per kernel)")
        largest = capture.sizes[-1]
        asked = tokens if by_tokens else sequences
        if asked > largest:
            verb = "is" if what.startswith("batch") else "are"
            return (f"{what} {verb} above {engine}'s largest captured CUDA-graph {word} "
                    f"{largest:,}: priced without CUDA graphs (launch cost per kernel)")
        return (f"{what} is not one of {engine}'s captured CUDA-graph {word}s, and it pads "
                "none: priced without CUDA graphs (launch cost per kernel)")
    size = run_tokens if by_tokens else run_tokens // max(per_row, 1)
    rows = f"{run_tokens:,} rows" + (f" ({size:,} × {per_row} tokens)"
                                      if not by_tokens and per_row > 1 else "")
    verb = "runs" if what.startswith("batch") else "run"
    return (f"{what} {verb} as {engine}'s captured CUDA-graph {word} {size:,}: the matmuls "
            f"read {rows}")


def graph_step(dep: Deployment, tokens: int, sequences: int, run_tokens: int | None,
               label: str = "CUDA graph") -> tuple[Step, ...]:
    """graph_line as one --explain step, its figure the rows the matmuls read (padded) or
    the largest captured size (ungraphed); () where the line has nothing to say."""
    line = graph_line(dep, tokens, sequences, run_tokens)
    if not line:
        return ()
    capture = captured(dep)
    assert capture is not None
    unit = "tokens" if capture.unit == TOKENS else "sequences"
    if run_tokens is None and not capture.sizes:
        result = q("captured sizes", 0, "", "--enforce-eager, or SGLang's --disable-cuda-graph")
    elif run_tokens is None:
        result = q("largest captured size", capture.sizes[-1], unit, SOURCE)
    else:
        result = q("matmul rows", run_tokens, "", SOURCE)
    return (step(label, line, result),)
