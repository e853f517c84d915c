"""A float32 checkpoint quantized at load (--weights/-q fp8, int4, a bf16 row) keeps what the
format leaves unquantized (embedding, lm_head, norms) at the 16 bits the engine loads it in,
not at 4 B: vLLM's --dtype auto downcasts float32 to bf16 from compute capability 8.0
(_resolve_auto_dtype, platforms/cuda.py supported_dtypes). OLMo-2-7B at fp8: 7.56 GiB of
weights, not 9.09."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ridgeline.config_reader import spec_from_hf_config
from ridgeline.params import count_params
from ridgeline.precision import unquantized_dtype, weight_bytes, weight_plan
from tests.conftest import run_cli


def olmo2_7b() -> dict[str, Any]:
    """OLMo-2-1124-7B's sizing fields (allenai/OLMo-2-1124-7B config.json, float32)."""
    return {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_size": 4096,
            "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 32, "vocab_size": 100352, "max_position_embeddings": 4096,
            "tie_word_embeddings": False, "torch_dtype": "float32"}


def test_fp8_of_a_float32_checkpoint_keeps_the_rest_at_two_bytes() -> None:
    spec = spec_from_hf_config(olmo2_7b(), "olmo2")
    params = count_params(spec).by_category
    unquantized = sum(params[c] for c in ("embedding", "lm_head", "other"))
    fp8 = weight_bytes(spec, weight_plan(spec, "fp8"))
    assert fp8 == pytest.approx(count_params(spec).total + unquantized)  # 1 B each, 1 B more


@pytest.mark.parametrize(("weights", "dtype"), [
    ("fp8", "bf16"), ("awq-int4", "bf16"), ("bf16", "bf16"), ("fp16", "fp16"),
    ("fp32", "fp32"), (None, "fp32"), ("stored", "fp32")])
def test_the_unquantized_tensors_load_at_the_engine_dtype(weights: str | None,
                                                          dtype: str) -> None:
    """A named format: the 16 bits --dtype auto loads; a float named: that float; as stored:
    the checkpoint's dtype (the deployment serves it at 16 bits)."""
    spec = spec_from_hf_config(olmo2_7b(), "olmo2")
    assert unquantized_dtype(spec, weights) == dtype
    assert weight_plan(spec, weights).format_of("embedding").id == dtype


def test_a_bf16_checkpoint_is_unchanged() -> None:
    spec = spec_from_hf_config({**olmo2_7b(), "torch_dtype": "bfloat16"}, "olmo2")
    assert unquantized_dtype(spec, "fp8") == "bf16"
    assert unquantized_dtype(spec, "fp32") == "bf16"  # as before: the checkpoint's own


def test_fit_with_fp8_counts_the_embedding_and_head_at_16_bits(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(olmo2_7b()), "utf-8")
    code, out, err = run_cli(capsys, "fit", str(path), "--gpu", "h100", "--max-model-len",
                             "4096", "-q", "fp8", "--json")
    assert code == 0, err
    spec = spec_from_hf_config(olmo2_7b(), "olmo2")
    taken = json.loads(out)["taken_bytes_per_gpu"]["weights"]
    assert taken == pytest.approx(weight_bytes(spec, weight_plan(spec, "fp8")))
    assert taken / 2**30 == pytest.approx(7.56, abs=0.01)
