"""Why the attention kernel matters at long context."""

from __future__ import annotations

import pytest

from ridgeline.attention_memory import attention_memory, score_matrix_bytes
from ridgeline.catalog import resolve_model


def test_64k_scores_are_8_6_gb_per_head_per_layer_in_bf16() -> None:
    assert score_matrix_bytes(65_536, 65_536, 2) / 1e9 == pytest.approx(8.6, abs=0.05)


def test_tiling_moves_orders_of_magnitude_fewer_bytes_at_long_context() -> None:
    report = attention_memory(resolve_model("llama-3.1-8b"), 65_536)
    assert report.total_naive_bytes > 100 * report.total_tiled_bytes
    assert report.total_tiled_bytes < report.total_tiled_worst_bytes


def test_sliding_layers_only_score_their_window() -> None:
    gpt_oss = attention_memory(resolve_model("gpt-oss-120b"), 65_536)
    full_only = 18 * 64 * score_matrix_bytes(65_536, 65_536, 2)
    windowed = 18 * 64 * score_matrix_bytes(65_536, 128, 2)
    assert gpt_oss.total_score_bytes == pytest.approx(full_only + windowed)
