#!/usr/bin/env python3
"""How fast `torch._grouped_mm` reads expert weights at decode shapes (a benchmark for a GPU).

    PYTHONPATH=src python3 scripts/grouped_mm_probe.py [--device cuda] [--scale N]

`ridgeline measure` runs a MoE model's experts through torch._grouped_mm. On the H200 its MoE
decode steps came out 1.6-1.9x slower than the profile fitted on dense models predicted, while
they grew with batch roughly as the experts-touched model says. This probe separates the two:
for each MoE model's expert shapes and a batch, it routes random tokens (top-k of uniform
scores, as random weights route), times the grouped up-projection over the experts picked,
and times one dense matmul that reads the same bytes. Bytes over time give each its achieved
bandwidth: if the grouped kernel's is far below the dense one's, the gap is the kernel's, not
the traffic model's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from functools import partial
from typing import Any

from ridgeline.device_probes import timed_s  # warm-up, CUDA events, the median

# name: (experts, experts per token, hidden, expert intermediate), from the catalog's configs
SHAPES = {"qwen3-30b-a3b": (128, 8, 2048, 768), "mixtral-8x7b": (8, 2, 4096, 14336),
          "gpt-oss-20b": (32, 4, 2880, 2880)}
BATCHES = (1, 4, 16, 64, 256)


def routings(torch: Any, experts: int, k: int, batch: int, hidden: int, device: Any,
             dtype: Any, draws: int) -> list[tuple[Any, Any, int, int]]:
    """``draws`` random routings of ``batch`` tokens: (sorted rows, group ends, experts
    touched, most rows in one group)."""
    out = []
    for _ in range(draws):
        x = torch.randn(batch, hidden, device=device, dtype=dtype)
        picks = torch.rand(batch, experts, device=device).topk(k, dim=-1).indices.reshape(-1)
        order = picks.argsort(stable=True)
        counts = torch.zeros(experts, dtype=torch.int64, device=device)
        counts.scatter_add_(0, picks, torch.ones_like(picks))
        out.append((x[order // k], counts.cumsum(0).to(torch.int32), int((counts > 0).sum()),
                    int(counts.max())))
    return out


def run_all(torch: Any, calls: list[Any]) -> None:
    for call in calls:
        call()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scale", type=int, default=1,
                        help="divide every dimension (a CPU rehearsal)")
    args = parser.parse_args()
    import torch

    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    draws = 8  # routings cycled in one timing, so the experts read are not all in L2
    torch.manual_seed(0)
    print(torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
          torch.__version__, "- each figure the median of 30 timings of 8 routings")
    print("model          batch  touched  MB read  grouped µs  grouped GB/s  dense µs  dense GB/s")
    for name, (experts, k, hidden, inter) in SHAPES.items():
        hidden, inter = hidden // args.scale, inter // args.scale
        up_t = torch.randn(experts, 2 * inter, hidden, device=device, dtype=dtype).transpose(1, 2)
        for batch in BATCHES:
            draw = routings(torch, experts, k, batch, hidden, device, dtype, draws)
            touched = statistics.fmean(t for _, _, t, _ in draw)
            nbytes = touched * 2 * inter * hidden * up_t.element_size()
            grouped = [partial(torch._grouped_mm, rows, up_t, offs=ends)
                       for rows, ends, _, _ in draw]
            seconds = timed_s(torch, device, partial(run_all, torch, grouped), repeats=30, warmup=3) / draws
            # the same bytes as one dense weight, rows as many as the fullest group
            rows_dense = max(m for _, _, _, m in draw)
            n = round(touched * 2 * inter)
            big = torch.randn(draws * n, hidden, device=device, dtype=dtype)
            x = torch.randn(rows_dense, hidden, device=device, dtype=dtype)
            dense = [partial(torch.matmul, x, big[i * n:(i + 1) * n].T) for i in range(draws)]
            dense_s = timed_s(torch, device, partial(run_all, torch, dense), repeats=30, warmup=3) / draws
            print(f"{name:14s} {batch:5d} {touched:8.1f} {nbytes / 1e6:8.1f} {seconds * 1e6:11.1f} "
                  f"{nbytes / seconds / 1e9:13.0f} {dense_s * 1e6:9.1f} "
                  f"{nbytes / dense_s / 1e9:11.0f}")
            del big, draw, grouped, dense
    return 0


if __name__ == "__main__":
    sys.exit(main())
