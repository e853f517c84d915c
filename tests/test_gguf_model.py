"""A .gguf file's header read as a model: synthetic files written here by a small GGUF writer
(ggml docs/gguf.md), read back, and checked against the bundled config.json of the same model."""

from __future__ import annotations

import json
import struct
import sys
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.deployment import Deployment
from ridgeline.engine_platforms import flash_attention_unsupported
from ridgeline.errors import InputError
from ridgeline.gguf_model import (
    format_for,
    ggml_types,
    gguf_size_caution,
    gguf_weight_bytes,
    spec_from_gguf,
    tensor_bytes,
    tensor_category,
)
from ridgeline.gguf_reader import KEEP_ARRAY_ITEMS, SkippedArray, TensorInfo, read_gguf_header
from ridgeline.hardware import resolve_accelerator
from ridgeline.kvcache import attention_kv_bytes_per_token
from ridgeline.params import count_params
from ridgeline.precision import weight_bytes, weight_formats, weight_plan
from tests.conftest import run_cli

UINT32, FLOAT32, BOOL, STRING, ARRAY, UINT64 = 4, 6, 7, 8, 9, 10
TYPE_IDS = {t.name: t.id for t in ggml_types().values()}


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


@lru_cache(maxsize=8)
def _strings(items: tuple[str, ...]) -> bytes:
    """A vocabulary's strings, encoded once per module: most files here carry one of the same
    few token lists, and encoding 128k strings at each file was most of the writer's time."""
    return b"".join(_string(v) for v in items)


def _value(kind: int, value: Any) -> bytes:
    if kind == STRING:
        return _string(value)
    if kind == ARRAY:
        item_kind, items = value
        if item_kind == STRING and isinstance(items, tuple):
            return struct.pack("<IQ", item_kind, len(items)) + _strings(items)
        return struct.pack("<IQ", item_kind, len(items)) + b"".join(
            _value(item_kind, v) for v in items)
    return struct.pack({UINT32: "<I", FLOAT32: "<f", BOOL: "<?", UINT64: "<Q"}[kind], value)


def write_gguf(path: Path, metadata: list[tuple[str, int, Any]],
               tensors: list[tuple[str, tuple[int, ...], str]], version: int = 3) -> Path:
    """A GGUF as docs/gguf.md lays it out: the header, padded to its general.alignment (32
    where it states none), then each tensor's data at its padded offset.
    The data is left a hole (the file is extended, never written), so an 8B model's file
    takes the header's bytes on disk."""
    alignment = next((v for k, _, v in metadata if k == "general.alignment"), 32)
    # the header's pieces joined once: a vocabulary's worth of bytes grown tensor by tensor
    # was copied whole at each of them
    parts = [b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata))]
    for key, kind, value in metadata:
        parts.append(_string(key) + struct.pack("<I", kind) + _value(kind, value))
    offset = 0
    for name, dims, kind in tensors:
        parts.append(_string(name) + struct.pack("<I", len(dims))
                     + struct.pack(f"<{len(dims)}Q", *dims)
                     + struct.pack("<IQ", TYPE_IDS[kind], offset))
        info = TensorInfo(name, dims, TYPE_IDS[kind], offset)
        size = tensor_bytes(info) if info.ggml_type in ggml_types() else 0  # no size: refused
        offset += size + -size % alignment
    out = b"".join(parts)
    with path.open("wb") as f:
        f.write(out)
        if tensors:
            f.truncate(len(out) + -len(out) % alignment + offset)
    return path


# a vocabulary for the claims not about it: reading a header walks its token list string by
# string, 128,256 of them in Llama-3.1-8B's
SMALL_VOCAB = 512


@lru_cache(maxsize=8)
def _tokens(pattern: str, vocab: int) -> tuple[str, ...]:
    """``vocab`` token strings, ``pattern`` formatted with each one's index."""
    return tuple(pattern.format(i) for i in range(vocab))


def _arch_keys(arch: str, **fields: int) -> list[tuple[str, int, Any]]:
    return [(f"{arch}.{k.replace('__', '.')}", UINT32, v) for k, v in fields.items()]


def llama_8b_q4_k_m(path: Path, retype: dict[str, str] | None = None,
                    vocab: int = 128256) -> Path:
    """Llama-3.1-8B's shapes as llama.cpp's converter writes them, with Q4_K_M's tensor types
    (Q6_K output, attn_v and ffn_down Q6_K in half the layers, norms F32); ``retype``: another
    type for the tensors whose name ends so ("ffn_up.weight": "IQ1_S"); ``vocab`` tokens (a
    claim not about the vocabulary takes SMALL_VOCAB: every read skips the token list)."""
    hidden, ffn, kv, layers = 4096, 14336, 1024, 32
    tensors: list[tuple[str, tuple[int, ...], str]] = [
        ("token_embd.weight", (hidden, vocab), "Q4_K"), ("output_norm.weight", (hidden,), "F32"),
        ("output.weight", (hidden, vocab), "Q6_K"), ("rope_freqs.weight", (64,), "F32")]
    for i in range(layers):
        high = "Q6_K" if i % 2 == 0 else "Q4_K"
        tensors += [(f"blk.{i}.attn_norm.weight", (hidden,), "F32"),
                    (f"blk.{i}.attn_q.weight", (hidden, hidden), "Q4_K"),
                    (f"blk.{i}.attn_k.weight", (hidden, kv), "Q4_K"),
                    (f"blk.{i}.attn_v.weight", (hidden, kv), high),
                    (f"blk.{i}.attn_output.weight", (hidden, hidden), "Q4_K"),
                    (f"blk.{i}.ffn_norm.weight", (hidden,), "F32"),
                    (f"blk.{i}.ffn_gate.weight", (hidden, ffn), "Q4_K"),
                    (f"blk.{i}.ffn_up.weight", (hidden, ffn), "Q4_K"),
                    (f"blk.{i}.ffn_down.weight", (ffn, hidden), high)]
    metadata = [("general.architecture", STRING, "llama"), ("general.name", STRING, "Llama 3.1 8B"),
                ("general.file_type", UINT32, 15),
                *_arch_keys("llama", block_count=layers, context_length=131072,
                            embedding_length=hidden, feed_forward_length=ffn,
                            attention__head_count=32, attention__head_count_kv=8,
                            rope__dimension_count=128),
                ("llama.rope.freq_base", FLOAT32, 500000.0),
                ("tokenizer.ggml.tokens", ARRAY, (STRING, _tokens("t{}", vocab)))]
    retyped = [(n, d, next((t for end, t in (retype or {}).items() if n.endswith(end)), k))
               for n, d, k in tensors]
    return write_gguf(path, metadata, retyped)


def qwen3_30b_a3b(path: Path, extra: list[tuple[str, int, Any]] | None = None,
                  part: slice = slice(None), alignment: int = 32,
                  alignment_type: int = UINT32, vocab: int = 151936) -> Path:
    """Qwen3-30B-A3B's shapes, Q8_0 throughout but F32 norms and router; ``extra`` keys and
    only the ``part`` of the tensors, for a split file's first part; general.alignment
    ``alignment``, stored as ``alignment_type``; ``vocab`` tokens (as llama_8b_q4_k_m's)."""
    hidden, layers, experts, expert_ffn = 2048, 48, 128, 768
    q_dim, kv_dim = 32 * 128, 4 * 128
    tensors: list[tuple[str, tuple[int, ...], str]] = [
        ("token_embd.weight", (hidden, vocab), "Q8_0"), ("output_norm.weight", (hidden,), "F32"),
        ("output.weight", (hidden, vocab), "Q8_0")]
    for i in range(layers):
        tensors += [(f"blk.{i}.attn_norm.weight", (hidden,), "F32"),
                    (f"blk.{i}.attn_q.weight", (hidden, q_dim), "Q8_0"),
                    (f"blk.{i}.attn_k.weight", (hidden, kv_dim), "Q8_0"),
                    (f"blk.{i}.attn_v.weight", (hidden, kv_dim), "Q8_0"),
                    (f"blk.{i}.attn_q_norm.weight", (128,), "F32"),
                    (f"blk.{i}.attn_k_norm.weight", (128,), "F32"),
                    (f"blk.{i}.attn_output.weight", (q_dim, hidden), "Q8_0"),
                    (f"blk.{i}.ffn_norm.weight", (hidden,), "F32"),
                    (f"blk.{i}.ffn_gate_inp.weight", (hidden, experts), "F32"),
                    (f"blk.{i}.ffn_gate_exps.weight", (hidden, expert_ffn, experts), "Q8_0"),
                    (f"blk.{i}.ffn_up_exps.weight", (hidden, expert_ffn, experts), "Q8_0"),
                    (f"blk.{i}.ffn_down_exps.weight", (expert_ffn, hidden, experts), "Q8_0")]
    metadata = [("general.architecture", STRING, "qwen3moe"),
                ("general.alignment", alignment_type, alignment),
                *_arch_keys("qwen3moe", block_count=layers, context_length=40960,
                            embedding_length=hidden, feed_forward_length=6144,
                            attention__head_count=32, attention__head_count_kv=4,
                            attention__key_length=128, attention__value_length=128,
                            expert_count=experts, expert_used_count=8,
                            expert_feed_forward_length=expert_ffn),
                ("tokenizer.ggml.tokens", ARRAY, (STRING, _tokens("x", vocab))),
                ("tokenizer.ggml.add_bos_token", BOOL, False), *(extra or [])]
    return write_gguf(path, metadata, tensors[part], version=2)


def _same_model(gguf: Any, bundled: Any) -> None:
    for field in ("hidden_size", "vocab_size", "tie_word_embeddings", "layers", "attention",
                  "dense_mlp", "moe", "max_position_embeddings", "num_layers"):
        assert getattr(gguf, field) == getattr(bundled, field), field
    assert count_params(gguf).total == count_params(bundled).total
    assert count_params(gguf).active == count_params(bundled).active


def test_a_llama_3_1_8b_gguf_is_the_bundled_llama_3_1_8b(tmp_path: Path) -> None:
    spec = resolve_model(str(llama_8b_q4_k_m(tmp_path / "Llama-3.1-8B-Q4_K_M.gguf")))
    _same_model(spec, resolve_model("llama-3.1-8b"))
    assert spec.name == "Llama-3.1-8B-Q4_K_M" and spec.model_type == "llama"


def test_a_qwen3_moe_gguf_is_the_bundled_qwen3_30b_a3b(tmp_path: Path) -> None:
    spec = spec_from_gguf(qwen3_30b_a3b(tmp_path / "qwen3-30b-a3b.gguf"))
    bundled = resolve_model("Qwen/Qwen3-30B-A3B")
    _same_model(spec, bundled)
    assert spec.moe is not None and spec.moe.num_experts == 128
    assert spec.attention is not None and spec.attention.qk_norm == bundled.attention.qk_norm


def test_the_token_list_is_counted_not_kept(tmp_path: Path) -> None:
    header = read_gguf_header(llama_8b_q4_k_m(tmp_path / "l.gguf"))
    tokens = header.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, SkippedArray) and tokens.length > KEEP_ARRAY_ITEMS
    assert header.array_length("tokenizer.ggml.tokens") == resolve_model("llama-3.1-8b").vocab_size
    assert header.version == 3 and len(header.tensors) == 4 + 32 * 9


def test_a_file_cut_inside_the_skipped_token_list_is_refused(tmp_path: Path) -> None:
    """The skipped token list is stepped over string by string, each by its length: a file
    cut inside it is refused as cut short, and a string whose length runs past the limit as
    corrupt, as when the strings were read."""
    from ridgeline.errors import InputError
    from ridgeline.gguf_reader import MAX_STRING_BYTES

    with llama_8b_q4_k_m(tmp_path / "l.gguf").open("rb") as f:
        whole = f.read(4 * 2**20)  # the header (the weights are a hole of gigabytes)
    at = whole.index(b"tokenizer.ggml.tokens") + len("tokenizer.ggml.tokens") + 4 + 4 + 8
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:at + 1000])  # some of the 128,256 strings, then nothing
    with pytest.raises(InputError, match="cut short"):
        read_gguf_header(cut)
    long = tmp_path / "long.gguf"  # the 100th string's length past the limit
    hundredth = at + sum(8 + len(f"t{i}") for i in range(99))
    long.write_bytes(whole[:hundredth] + struct.pack("<Q", MAX_STRING_BYTES + 1)
                     + whole[hundredth + 8:])
    with pytest.raises(InputError, match=r"string.s length .* is past"):
        read_gguf_header(long)


def test_the_tensor_types_are_the_stored_formats(tmp_path: Path) -> None:
    """Q4_K_M's Q6_K output is q6_k; its Q4_K attention with Q6_K attn_v in half the layers
    is a Q4_K family format; a Q8_0 file is q8_0 throughout; the bytes follow the blocks."""
    header = read_gguf_header(llama_8b_q4_k_m(tmp_path / "l.gguf"))
    llama = spec_from_gguf(tmp_path / "l.gguf")
    formats = llama.stored_format_map
    assert formats["lm_head"] == "q6_k" and formats["embedding"].startswith("q4_k")
    assert formats["attention"].startswith("q4_k") and formats["mlp"].startswith("q4_k")
    exact = gguf_weight_bytes(header)
    q4_k = ggml_types()[TYPE_IDS["Q4_K"]]
    embedding = count_params(llama).by_category["embedding"]
    assert exact["embedding"] == embedding // q4_k.block_elements * q4_k.block_bytes
    modelled = weight_bytes(llama, weight_plan(llama))
    stored = sum(exact.values())
    assert abs(modelled - stored) / stored < 0.05  # the nearest formats' bits, within 5 %
    qwen = spec_from_gguf(qwen3_30b_a3b(tmp_path / "q.gguf"))
    assert set(qwen.stored_format_map.values()) == {"q8_0"}


def test_a_gguf_runs_on_llama_cpp_as_stored(tmp_path: Path) -> None:
    spec = spec_from_gguf(llama_8b_q4_k_m(tmp_path / "l.gguf"))
    deployment = Deployment.build(spec, resolve_accelerator("h100"), None, None, 1,
                                  engine="llama.cpp-cuda")
    assert deployment.weight_bytes < Deployment.build(
        resolve_model("llama-3.1-8b"), resolve_accelerator("h100"), None, None, 1,
        engine="llama.cpp-cuda").weight_bytes / 3  # ~4.9 bits a weight against 16


def test_tensor_names_fall_in_their_categories() -> None:
    assert [tensor_category(n) for n in (
        "blk.3.ffn_down_exps.weight", "blk.3.ffn_up_shexp.weight", "blk.3.ffn_gate_inp.weight",
        "blk.3.attn_kv_b.weight", "blk.3.attn_q.bias", "blk.3.ffn_up_exps.bias",
        "blk.3.attn_sinks.weight", "output_norm.weight")] == [
        "experts", "shared_experts", "router", "attention", "other", "expert_bias", "other",
        "other"]


def test_the_cli_reads_a_gguf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = llama_8b_q4_k_m(tmp_path / "Llama-3.1-8B-Q4_K_M.gguf")
    code, out, _ = run_cli(capsys, "model", str(path))
    assert code == 0 and "Llama-3.1-8B-Q4_K_M" in out and "q6_k" in out


def _header_bytes(path: Path) -> bytes:
    """The file's bytes up to its tensor data (a GGUF's data here is a hole of gigabytes)."""
    with path.open("rb") as f:
        return f.read(read_gguf_header(path).data_offset_bytes)


def _refusal(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    code, out, err = run_cli(capsys, "model", str(path))
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    return err


def test_bad_gguf_files_are_refused_in_one_line(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    good = _header_bytes(llama_8b_q4_k_m(tmp_path / "good.gguf"))
    (tmp_path / "json.gguf").write_bytes(b'{"model_type": "llama"}')
    assert "not a GGUF file" in _refusal(capsys, tmp_path / "json.gguf")
    (tmp_path / "empty.gguf").write_bytes(b"")
    empty = _refusal(capsys, tmp_path / "empty.gguf")
    assert "empty.gguf is empty (0 bytes): not a GGUF file" in empty and "b''" not in empty
    (tmp_path / "cut.gguf").write_bytes(good[: len(good) // 2])
    assert "truncated" in _refusal(capsys, tmp_path / "cut.gguf")
    (tmp_path / "header.gguf").write_bytes(good[:10])
    assert "truncated" in _refusal(capsys, tmp_path / "header.gguf")
    (tmp_path / "huge.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2**60, 1))
    assert "tensor_count" in _refusal(capsys, tmp_path / "huge.gguf")
    (tmp_path / "v1.gguf").write_bytes(b"GGUF" + struct.pack("<III", 1, 0, 0))
    assert "version 1" in _refusal(capsys, tmp_path / "v1.gguf")
    long_key = write_gguf(tmp_path / "key.gguf", [], [])
    long_key.write_bytes(b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**40))
    assert "length" in _refusal(capsys, long_key)
    nested = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("a") + struct.pack("<I", ARRAY)
    (tmp_path / "nested.gguf").write_bytes(nested + struct.pack("<IQ", ARRAY, 1) * 100)
    assert "nests arrays" in _refusal(capsys, tmp_path / "nested.gguf")
    (tmp_path / "be.gguf").write_bytes(b"GGUF" + struct.pack(">IQQ", 3, 0, 0))
    assert "big-endian" in _refusal(capsys, tmp_path / "be.gguf")
    odd = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("a") + struct.pack("<I", 13)
    (tmp_path / "odd.gguf").write_bytes(odd)
    assert "value type 13" in _refusal(capsys, tmp_path / "odd.gguf")


def test_an_architecture_not_mapped_is_named(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = write_gguf(tmp_path / "m.gguf", [("general.architecture", STRING, "mamba")], [])
    assert "'mamba'" in _refusal(capsys, path)
    with pytest.raises(InputError, match=r"no llama\.embedding_length"):
        spec_from_gguf(write_gguf(tmp_path / "l.gguf",
                                  [("general.architecture", STRING, "llama")], []))


# (bundled model, general.architecture, {arch}.* keys as llama.cpp's converter writes them,
# tied embeddings, whether the spec's parameters compare: a bundled Gemma 3 has a vision
# tower, and a GGUF of DeepSeek-V3 drops its MTP layer)
ARCHITECTURE_CASES = [
    ("Qwen/Qwen2.5-7B", "qwen2", dict(block_count=28, context_length=131072,
     embedding_length=3584, feed_forward_length=18944, attention__head_count=28,
     attention__head_count_kv=4), 152064, False, True),
    ("Qwen/Qwen3-8B", "qwen3", dict(block_count=36, context_length=40960, embedding_length=4096,
     feed_forward_length=12288, attention__head_count=32, attention__head_count_kv=8,
     attention__key_length=128, attention__value_length=128), 151936, False, True),
    ("mistralai/Mixtral-8x7B-v0.1", "llama", dict(block_count=32, context_length=32768,
     embedding_length=4096, feed_forward_length=14336, attention__head_count=32,
     attention__head_count_kv=8, expert_count=8, expert_used_count=2), 32000, False, True),
    ("google/gemma-2-9b-it", "gemma2", dict(block_count=42, context_length=8192,
     embedding_length=3584, feed_forward_length=14336, attention__head_count=16,
     attention__head_count_kv=8, attention__key_length=256, attention__value_length=256,
     attention__sliding_window=4096), 256000, True, True),
    ("google/gemma-3-27b-it", "gemma3", dict(block_count=62, context_length=131072,
     embedding_length=5376, feed_forward_length=21504, attention__head_count=32,
     attention__head_count_kv=16, attention__key_length=128, attention__value_length=128,
     attention__sliding_window=1024), 262208, True, False),
    ("microsoft/phi-4", "phi3", dict(block_count=40, context_length=16384, embedding_length=5120,
     feed_forward_length=17920, attention__head_count=40, attention__head_count_kv=10),
     100352, False, True),
    ("openai/gpt-oss-20b", "gpt-oss", dict(block_count=24, context_length=131072,
     embedding_length=2880, feed_forward_length=2880, attention__head_count=64,
     attention__head_count_kv=8, attention__key_length=64, attention__value_length=64,
     expert_count=32, expert_used_count=4, expert_feed_forward_length=2880,
     attention__sliding_window=128, rope__scaling__original_context_length=4096), 201088, False,
     True),
    ("deepseek-ai/DeepSeek-V3", "deepseek2", dict(block_count=61, context_length=163840,
     embedding_length=7168, feed_forward_length=18432, attention__head_count=128,
     attention__head_count_kv=1, attention__key_length=576, attention__value_length=512,
     attention__key_length_mla=192, attention__value_length_mla=128, attention__q_lora_rank=1536,
     attention__kv_lora_rank=512, rope__dimension_count=64, expert_count=256,
     expert_used_count=8, expert_feed_forward_length=2048, expert_shared_count=1,
     leading_dense_block_count=3, expert_gating_func=2), 129280, False, False),
]


@pytest.mark.parametrize(("bundled", "arch", "keys", "vocab", "tied", "params"),
                         ARCHITECTURE_CASES, ids=[c[0] for c in ARCHITECTURE_CASES])
def test_each_mapped_architecture_reads_as_its_bundled_config(
        tmp_path: Path, bundled: str, arch: str, keys: dict[str, int], vocab: int, tied: bool,
        params: bool) -> None:
    hidden = keys["embedding_length"]
    tensors = [("token_embd.weight", (hidden, vocab), "Q8_0")]
    tensors += [] if tied else [("output.weight", (hidden, vocab), "Q8_0")]
    metadata = [("general.architecture", STRING, arch), *_arch_keys(arch, **keys)]
    if arch == "gpt-oss":
        metadata += [(f"{arch}.rope.scaling.type", STRING, "yarn"),
                     (f"{arch}.rope.scaling.factor", FLOAT32, 32.0)]
    spec = spec_from_gguf(write_gguf(tmp_path / "m.gguf", metadata, tensors))
    expected = resolve_model(bundled)
    for field in ("hidden_size", "vocab_size", "tie_word_embeddings", "layers", "attention",
                  "dense_mlp", "moe", "max_position_embeddings"):
        assert getattr(spec, field) == getattr(expected, field), field
    if params:
        assert count_params(spec).total == count_params(expected).total
    assert spec.stored_format_map["embedding"] == "q8_0"


def test_a_4096_square_q4_k_matrix_is_9_437_184_bytes() -> None:
    tensor = TensorInfo("blk.0.attn_q.weight", (4096, 4096), TYPE_IDS["Q4_K"], 0)
    assert tensor_bytes(tensor) == 4096 * 4096 * 4.5 / 8 == 9_437_184


def test_the_block_types_agree_with_their_weight_formats() -> None:
    """A block type formats.json sizes by its block has that format's bits per weight (q2_k
    is instead the Q2_K file type's average, 3.35 bits over its higher-bit tensors)."""
    formats = weight_formats()
    for name in ("Q8_0", "Q6_K", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "IQ4_XS", "IQ4_NL", "MXFP4"):
        kind = ggml_types()[TYPE_IDS[name]]
        assert kind.block_bytes * 8 / kind.block_elements == \
            formats[name.lower()].bits_per_weight, name
    q2_k = ggml_types()[TYPE_IDS["Q2_K"]]
    assert q2_k.block_bytes * 8 / q2_k.block_elements < formats["q2_k"].bits_per_weight


def test_a_q4_k_category_takes_the_nearest_q4_k_mix() -> None:
    """Q4_K at 4.6 bits is nearer q4_k_s's 4.58 than q4_k_m's 4.84; Q8_0 is q8_0; a type with
    no weight format of its family is refused by name."""
    assert format_for("Q4_K", 4.6, "attention", "m") == "q4_k_s"
    assert format_for("Q4_K", 4.9, "mlp", "m") == "q4_k_m"
    assert format_for("BF16", 16, "mlp", "m") == "bf16"
    with pytest.raises(InputError, match="Q8_K"):
        format_for("Q8_K", 9.125, "mlp", "m")


def _split_qwen(folder: Path, name: str = "Qwen3-30B-A3B-Q8_0") -> list[Path]:
    """gguf-split's layout: the metadata and the first tensors in part 1, the rest in part 2
    with only the split keys."""
    keys = [("split.no", UINT32, 0), ("split.count", UINT32, 2)]
    first = qwen3_30b_a3b(folder / f"{name}-00001-of-00002.gguf", keys, slice(0, 200),
                          vocab=SMALL_VOCAB)
    whole = read_gguf_header(qwen3_30b_a3b(folder / "whole.gguf", vocab=SMALL_VOCAB))
    rest = [(t.name, t.dims, {v: k for k, v in TYPE_IDS.items()}[t.ggml_type])
            for t in whole.tensors[200:]]
    second = write_gguf(folder / f"{name}-00002-of-00002.gguf",
                        [("split.no", UINT32, 1), ("split.count", UINT32, 2)], rest)
    return [first, second]


def test_a_split_gguf_is_read_from_all_its_parts(tmp_path: Path) -> None:
    """Either part of a two-part file gives the whole model: the metadata from the first,
    every part's tensors counted (part 1 alone holds no lm_head and few experts)."""
    first, second = _split_qwen(tmp_path)
    whole = spec_from_gguf(tmp_path / "whole.gguf")
    for part in (first, second):
        spec = spec_from_gguf(part)
        assert spec.name == "Qwen3-30B-A3B-Q8_0"
        assert spec.stored_format_map == whole.stored_format_map
        assert count_params(spec).total == count_params(whole).total
    assert len(read_gguf_header(first).tensors) < len(read_gguf_header(tmp_path / "whole.gguf")
                                                      .tensors)


def test_a_split_gguf_missing_a_part_is_refused(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _split_qwen(tmp_path)
    second.unlink()
    err = _refusal(capsys, first)
    assert "00002-of-00002.gguf is not beside it" in err
    renamed = first.rename(tmp_path / "renamed.gguf")
    assert "one of 2 parts of a split GGUF" in _refusal(capsys, renamed)


def _cut_at(path: Path, size: int) -> tuple[str, int]:
    """Cut ``path`` to ``size`` bytes; the first tensor whose data then runs past the end and
    the bytes the tensors need, from the header read back."""
    header = read_gguf_header(path)
    ends = [(header.data_offset_bytes + t.offset_bytes + tensor_bytes(t), t.name)
            for t in header.tensors]
    with path.open("r+b") as f:
        f.truncate(size)
    return next(name for end, name in ends if end > size), max(end for end, _ in ends)


def test_a_gguf_cut_short_of_its_tensor_data_is_refused_naming_the_tensor(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unfinished download keeps its header whole, so only the tensors' offsets show it:
    llama.cpp stops at the first tensor past the end ("data is not within the file bounds"),
    and so does ridgeline, in one line with the file's bytes and the bytes it needs; the
    same file whole loads."""
    path = llama_8b_q4_k_m(tmp_path / "Llama-3.1-8B-Q4_K_M.gguf", vocab=SMALL_VOCAB)
    assert run_cli(capsys, "model", str(path))[0] == 0
    size = path.stat().st_size // 2
    first, needed = _cut_at(path, size)
    err = _refusal(capsys, path)
    assert f"'{first}' is the first past the end" in err and first.startswith("blk.")
    assert f"{size:,} bytes and its tensors need {needed:,}" in err
    assert "truncated" in err and "Traceback" not in err and err.count("caution") == 0


def test_a_split_gguf_part_is_checked_against_its_own_size(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each part's offsets count from its own data section: both parts whole load, and the
    second cut by one byte is refused by its own name and its last tensor."""
    first, second = _split_qwen(tmp_path)
    assert spec_from_gguf(first).name == "Qwen3-30B-A3B-Q8_0"
    last = read_gguf_header(second).tensors[-1].name
    cut, _ = _cut_at(second, second.stat().st_size - 1)
    err = _refusal(capsys, first)
    assert cut == last and second.name in err and f"'{last}'" in err


def test_the_tensor_data_starts_at_the_header_padded_to_the_alignment(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With general.alignment 4096 the data starts at the next multiple of 4096 past the
    header, so a file one byte short of its last tensor is refused, though the header plus
    the tensors' bytes, unpadded, would still fit; an alignment no power of 2 is refused, as
    gguf_init_from_file refuses it."""
    path = qwen3_30b_a3b(tmp_path / "aligned.gguf", alignment=4096, vocab=SMALL_VOCAB)
    header = read_gguf_header(path)
    # the same header, at 32
    plain = read_gguf_header(qwen3_30b_a3b(tmp_path / "plain.gguf", vocab=SMALL_VOCAB))
    assert header.data_offset_bytes % 4096 == 0
    assert plain.data_offset_bytes % 32 == 0 and plain.data_offset_bytes != header.data_offset_bytes
    assert spec_from_gguf(path).name == "aligned"
    cut, _ = _cut_at(path, path.stat().st_size - 1)
    assert f"'{cut}' is the first past the end" in _refusal(capsys, path)
    odd = qwen3_30b_a3b(tmp_path / "odd.gguf", alignment=48, vocab=SMALL_VOCAB)
    assert "general.alignment 48 is not a power of 2" in _refusal(capsys, odd)
    wide = qwen3_30b_a3b(tmp_path / "wide.gguf", alignment=32, alignment_type=UINT64,
                         vocab=SMALL_VOCAB)
    assert f"general.alignment is of GGUF type {UINT64}, not uint32" in _refusal(capsys, wide)


def _retyped(path: Path, type_of: Any) -> Path:
    """Llama-3.1-8B's tensors with each matrix's ggml type given by ``type_of(name)``."""
    header = read_gguf_header(llama_8b_q4_k_m(path))
    names = {v: k for k, v in TYPE_IDS.items()}
    tensors = [(t.name, t.dims, names[t.ggml_type] if len(t.dims) < 2 else type_of(t.name))
               for t in header.tensors]
    metadata = [(k, STRING if isinstance(v, str) else UINT32, v)
                for k, v in header.metadata.items() if k.startswith(("general.", "llama."))
                and not isinstance(v, float)]
    metadata.append(("tokenizer.ggml.tokens", ARRAY, (STRING, _tokens("t", 128256))))
    return write_gguf(path, metadata, tensors)


def test_an_iq2_xxs_gguf_reads_as_the_iq2_xxs_mix(tmp_path: Path) -> None:
    """llama-quantize IQ2_XXS's types (Q2_K token_embd, Q5_K output, Q4_K attn_v for a GQA
    model, IQ2_XXS elsewhere) are read, not refused, and size as --weights iq2_xxs does."""
    def iq2_xxs(name: str) -> str:
        return {"token_embd.weight": "Q2_K", "output.weight": "Q5_K"}.get(
            name, "Q4_K" if "attn_v" in name else "IQ2_XXS")
    path = _retyped(tmp_path / "Llama-3.1-8B-IQ2_XXS.gguf", iq2_xxs)
    spec = spec_from_gguf(path)
    stored = sum(gguf_weight_bytes(read_gguf_header(path)).values())
    assert abs(weight_bytes(spec, weight_plan(spec)) - stored) / stored < 0.03
    bundled = resolve_model("llama-3.1-8b")
    mix = weight_bytes(bundled, weight_plan(bundled, "iq2_xxs"))
    assert abs(mix - stored) / stored < 0.03


def test_a_pure_block_type_is_that_block_not_a_file_type() -> None:
    """One type alone (llama-quantize --pure) is the block's own bits: Q4_K is 4.5 bits, not
    q4_k_s's 4.58; Q2_K is 2.625, not the Q2_K file type's 3.35."""
    for name in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "IQ1_S", "IQ2_XXS", "IQ3_S", "TQ1_0"):
        kind = ggml_types()[TYPE_IDS[name]]
        bits = kind.block_bytes * 8 / kind.block_elements
        assert weight_formats()[format_for(name, bits, "mlp", "m")].bits_per_weight == bits, name


def test_a_split_part_numbered_past_its_count_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("m-00001-of-00000.gguf", "m-00003-of-00002.gguf"):
        llama_8b_q4_k_m(tmp_path / name, vocab=SMALL_VOCAB)
        assert "no part of a split GGUF" in _refusal(capsys, tmp_path / name)


def test_a_split_gguf_named_in_capitals_finds_its_parts(tmp_path: Path) -> None:
    """The name matches whatever the extension's case; the sibling parts are sought with the
    same case as the part given."""
    for part in _split_qwen(tmp_path):
        part.rename(part.with_suffix(".GGUF"))
    spec = spec_from_gguf(tmp_path / "Qwen3-30B-A3B-Q8_0-00002-of-00002.GGUF")
    assert count_params(spec).total == count_params(spec_from_gguf(tmp_path / "whole.gguf")).total


def test_a_category_mixing_tensor_types_is_cautioned(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """An Unsloth-style file, IQ1_S gate/up with Q4_K down: the MLP is priced as IQ1_S, its
    main type, so the caution names the MLP and the gap, which the exact bytes give; a plain
    Q4_K_M file gets none."""
    mixed = llama_8b_q4_k_m(tmp_path / "UD-IQ1_S.gguf", {"ffn_gate.weight": "IQ1_S",
                                                         "ffn_up.weight": "IQ1_S",
                                                         "ffn_down.weight": "Q4_K"},
                            vocab=SMALL_VOCAB)
    caution = gguf_size_caution(mixed)
    exact = sum(gguf_weight_bytes(read_gguf_header(mixed)).values())
    assert "mlp" in caution and "attention" not in caution
    assert f"{exact / 1e9:.2f} GB as stored" in caution
    spec = spec_from_gguf(mixed)
    assert spec.stored_format_map["mlp"].startswith("iq1_s")
    assert weight_bytes(spec, weight_plan(spec)) < 0.9 * exact  # the gap the caution names
    code, _, err = run_cli(capsys, "model", str(mixed))
    assert code == 0 and err.count("caution:") == 1 and "mix types" in err
    assert gguf_size_caution(llama_8b_q4_k_m(tmp_path / "plain.gguf", vocab=SMALL_VOCAB)) == ""


def _small_llama(path: Path, keys: dict[str, Any] | None = None,
                 tensors: list[tuple[str, tuple[int, ...], str]] | None = None) -> Path:
    """A two-block llama of 256-wide embeddings, 4 heads of 64 and 2 KV heads; ``keys``
    replace or add ``llama.*`` metadata (an (item type, values) tuple writes an array),
    ``tensors`` are added to its own."""
    hidden, vocab, layers = 256, 512, 2
    own: list[tuple[str, tuple[int, ...], str]] = [
        ("token_embd.weight", (hidden, vocab), "Q8_0"), ("output.weight", (hidden, vocab), "Q8_0")]
    for i in range(layers):
        own += [(f"blk.{i}.attn_q.weight", (hidden, 4 * 64), "Q8_0"),
                (f"blk.{i}.attn_k.weight", (hidden, 2 * 64), "Q8_0"),
                (f"blk.{i}.attn_v.weight", (hidden, 2 * 64), "Q8_0"),
                (f"blk.{i}.ffn_up.weight", (hidden, 1024), "Q8_0")]
    fields: dict[str, Any] = dict(block_count=layers, context_length=4096,
                                  embedding_length=hidden, feed_forward_length=1024,
                                  attention__head_count=4, attention__head_count_kv=2)
    fields.update(keys or {})
    metadata = [("general.architecture", STRING, "llama")]
    for key, value in fields.items():
        kind = ARRAY if isinstance(value, tuple) else UINT32
        metadata.append((f"llama.{key.replace('__', '.')}", kind, value))
    metadata.append(("tokenizer.ggml.tokens", ARRAY, (STRING, _tokens("x", vocab))))
    return write_gguf(path, metadata, own + (tensors or []))


def test_a_per_layer_array_must_have_one_value_a_block(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's get_key_or_arr refuses a head_count(_kv) or feed_forward_length array whose
    length is not block_count; one of the right length and one value reads as that value."""
    spec = spec_from_gguf(_small_llama(tmp_path / "ok.gguf",
                                       {"attention__head_count_kv": (UINT32, [2, 2])}))
    assert spec.attention is not None and spec.attention.num_kv_heads == 2
    for key, values in (("attention__head_count_kv", [2]), ("attention__head_count", [4] * 3),
                        ("feed_forward_length", [])):
        path = _small_llama(tmp_path / f"{key}-{len(values)}.gguf", {key: (UINT32, values)})
        err = _refusal(capsys, path)
        dotted = key.replace("__", ".")
        assert f"llama.{dotted} has {len(values)} per-layer value" in err
        assert "block_count is 2" in err and path.stem in err


def test_an_array_where_llama_cpp_reads_one_number_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _small_llama(tmp_path / "m.gguf", {"context_length": (UINT32, [4096, 4096])})
    assert "llama.context_length is an array of 2" in _refusal(capsys, path)


def test_counts_past_llama_cpps_bounds_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """block_count past LLAMA_MAX_LAYERS, expert_count past LLAMA_MAX_EXPERTS, and an
    expert_used_count load_hparams asserts against."""
    cases = [({"block_count": 100_000}, "block_count 100,000 is past llama.cpp's 512"),
             ({"expert_count": 4096, "expert_used_count": 8}, "expert_count 4,096 is past"),
             ({"expert_count": 8, "expert_used_count": 9}, "expert_used_count is 9 of 8"),
             ({"expert_count": 8}, "expert_used_count is 0 of 8"),
             ({"expert_used_count": 2}, "expert_used_count is 2 but")]
    for i, (keys, words) in enumerate(cases):
        assert words in _refusal(capsys, _small_llama(tmp_path / f"{i}.gguf", keys))


def test_tensor_infos_llama_cpp_refuses_are_refused_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A type id no ggml type has, a row not a whole number of blocks, a block past
    block_count, a name listed twice, and shapes that contradict the heads or the width."""
    monkeypatch.setitem(TYPE_IDS, "TYPE_250", 250)
    cases = [
        (("blk.0.ffn_gate.weight", (256, 1024), "TYPE_250"), "has ggml type 250"),
        (("blk.0.ffn_gate.weight", (250, 1024), "Q8_0"), "rows of 250 are no whole number"),
        (("blk.2.ffn_gate.weight", (256, 1024), "Q8_0"), "of block 2, past block_count 2"),
        (("blk.1.ffn_up.weight", (256, 1024), "Q8_0"), "is listed twice"),
    ]
    for i, (tensor, words) in enumerate(cases):
        path = _small_llama(tmp_path / f"t{i}.gguf", tensors=[tensor])
        err = _refusal(capsys, path)
        assert words in err and repr(tensor[0]) in err and path.stem in err
    wide_kv = _small_llama(tmp_path / "kv.gguf", {"attention__head_count_kv": 4})
    assert "'blk.0.attn_k.weight' is 256 × 128, not 256 × 256" in _refusal(capsys, wide_kv)
    narrow = _small_llama(tmp_path / "e.gguf", {"embedding_length": 128})
    assert "'token_embd.weight' has rows of 256, not embedding_length 128" in \
        _refusal(capsys, narrow)


def test_ffn_tensors_of_the_wrong_shape_are_refused_as_attention_ones_are(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An ffn_up 4× as wide as feed_forward_length, or an ffn_down not its transpose, is not
    the model the metadata states: llama.cpp stops at 'wrong shape', and its weights would be
    priced at the metadata's width."""
    wide = _small_llama(tmp_path / "wide.gguf", {"feed_forward_length": 256})
    assert "'blk.0.ffn_up.weight' is 256 × 1024, not 256 × 256" in _refusal(capsys, wide)
    down = _small_llama(tmp_path / "down.gguf",
                        tensors=[("blk.0.ffn_down.weight", (256, 1024), "Q8_0"),
                                 ("blk.1.ffn_down.weight", (1024, 256), "Q8_0")])
    assert "'blk.0.ffn_down.weight' is 256 × 1024, not 1,024 × 256" in _refusal(capsys, down)


def test_a_gguf_with_no_tensors_is_refused_as_vocab_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A header whose metadata states a whole model but which lists no tensor (a vocab-only
    file) is no weights to price: refused, not read as 'stored as fp16'."""
    real = write_gguf
    monkeypatch.setattr(sys.modules[__name__], "write_gguf",
                        lambda path, metadata, tensors: real(path, metadata, []))
    err = _refusal(capsys, llama_8b_q4_k_m(tmp_path / "vocab.gguf", vocab=SMALL_VOCAB))
    assert "vocab: the file holds no tensors" in err and "vocab-only" in err


def test_a_block_missing_a_tensor_the_others_hold_is_refused_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama-3.1-8B with its last block cut out, or one block without its attn_k: llama.cpp
    stops at the first 'missing tensor', so the file is refused naming it."""
    real = write_gguf

    def without(prefix: str) -> Path:
        monkeypatch.setattr(sys.modules[__name__], "write_gguf", lambda path, metadata, tensors:
                            real(path, metadata, [t for t in tensors
                                                  if not t[0].startswith(prefix)]))
        return llama_8b_q4_k_m(tmp_path / f"{prefix}gguf", vocab=SMALL_VOCAB)

    assert "block 31 has no tensor 'blk.31.attn_norm.weight'" in _refusal(capsys,
                                                                          without("blk.31."))
    assert "no tensor 'blk.7.attn_k.weight'" in _refusal(capsys, without("blk.7.attn_k."))
    assert "no tensor 'blk.3.ffn_down.weight'" in _refusal(capsys, without("blk.3.ffn_down."))


# DeepSeek-V3's keys as convert_hf_to_gguf.py wrote them before llama.cpp's MLA cache
# (ggml-org/llama.cpp#12801): key_length/value_length the heads' own 192/128, head_count_kv
# the config's 128, no key_length_mla/value_length_mla
DEEPSEEK_V3 = next(case[2] for case in ARCHITECTURE_CASES if case[1] == "deepseek2")
DEEPSEEK_V3_LEGACY = {**DEEPSEEK_V3, "attention__head_count_kv": 128,
                      "attention__key_length": 192, "attention__value_length": 128}
for _key in ("attention__key_length_mla", "attention__value_length_mla"):
    del DEEPSEEK_V3_LEGACY[_key]


def _deepseek(path: Path, keys: dict[str, int], blocks: tuple[str, ...] = ()) -> Path:
    tensors = [("token_embd.weight", (7168, 129280), "Q8_0"),
               ("output.weight", (7168, 129280), "Q8_0"),
               *((f"blk.{i}.{name}.weight", (512, 4096), "Q8_0")
                 for i in range(keys["block_count"]) for name in blocks)]  # every block's
    return write_gguf(path, [("general.architecture", STRING, "deepseek2"),
                             *_arch_keys("deepseek2", **keys)], tensors)


def test_a_deepseek_gguf_from_before_the_mla_cache_caches_every_head(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp takes MLA only where key_length_mla and value_length_mla are written; an
    older file runs each head's K (192) and V (128) into the cache, as many bytes a token
    as 128 heads × 320 dims, not the 576-wide latent, with the same MLA weights; and
    CUDA's kernels have no K 192 / V 128 head at a GQA group of 1, so -fa auto turns off."""
    new = spec_from_gguf(_deepseek(tmp_path / "new.gguf", DEEPSEEK_V3))
    old = spec_from_gguf(_deepseek(tmp_path / "old.gguf", DEEPSEEK_V3_LEGACY, ("attn_kv_b",)))
    assert new.attention is not None and old.attention is not None
    assert new.attention.cached_latent is not None and old.attention.cached_latent is None
    assert old.attention.mla == replace(new.attention.mla, latent_cached=False)
    assert count_params(old).total == count_params(new).total
    assert attention_kv_bytes_per_token(new, 2) == (512 + 64) * 2
    assert attention_kv_bytes_per_token(old, 2) == 128 * (192 + 128) * 2
    assert not flash_attention_unsupported(new, "llama.cpp-cuda")
    assert "K 192, V 128, a GQA group of 1" in flash_attention_unsupported(old, "llama.cpp-cuda")
    code, out, _ = run_cli(capsys, "model", str(tmp_path / "old.gguf"))
    assert code == 0 and "each head's K and V cached" in out


def test_deepseek_attention_tensors_that_do_not_match_the_keys_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's loader wants attn_kv_b without key_length_mla, attn_k_b/attn_v_b with it:
    an MLA-split file of the first MLA PR (#11446) without the keys, or a keyed file with
    only the unsplit tensor, stops at load."""
    early = _deepseek(tmp_path / "early.gguf", DEEPSEEK_V3_LEGACY, ("attn_k_b", "attn_v_b"))
    assert "missing tensor 'blk.0.attn_kv_b.weight'" in _refusal(capsys, early)
    keyed = _deepseek(tmp_path / "keyed.gguf", DEEPSEEK_V3, ("attn_kv_b",))
    assert "missing tensor 'blk.0.attn_k_b.weight'" in _refusal(capsys, keyed)


def test_a_deepseek_gguf_cached_per_head_explains_its_kv_and_attention_as_heads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file from before the MLA cache caches each head's K (192) and V (128): model
    --explain's KV step names both widths and its operands give its result, and roofline's
    decode attention note says GQA group, as its step computes, not the latent."""
    path = _deepseek(tmp_path / "old.gguf", DEEPSEEK_V3_LEGACY, ("attn_kv_b",))
    spec = spec_from_gguf(path)
    assert spec.attention is not None
    per_head = spec.attention.num_kv_heads * (spec.attention.head_dim
                                              + spec.attention.v_head_dim)
    code, out, _ = run_cli(capsys, "model", str(path), "--explain")
    assert code == 0
    layers = spec.count(mixer="full")
    assert f"KV per token = {per_head * layers * 2:,} B" in out
    assert f"K head_dim = {spec.attention.head_dim}" in out
    assert f"V head_dim = {spec.attention.v_head_dim}" in out
    code, out, _ = run_cli(capsys, "roofline", "--gpu", "h200", "--model", str(path))
    assert code == 0
    assert "decode attention: GQA group 1;" in out and "the one latent" not in out


def test_vllm_and_sglang_cache_an_old_deepseek_gguf_as_the_latent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only llama.cpp caches a file from before its MLA cache per head: vLLM and SGLang run
    DeepSeek's MLA whatever file the weights came from, so their pool holds the one latent a
    token for the old file as for the new; llama.cpp's holds each head's K and V."""
    new = _deepseek(tmp_path / "new.gguf", DEEPSEEK_V3)
    old = _deepseek(tmp_path / "old.gguf", DEEPSEEK_V3_LEGACY, ("attn_kv_b",))

    def per_conversation(path: Path, engine: str) -> float:
        code, out, _ = run_cli(capsys, "fit", str(path), "--gpu", "h200", "--num-gpus", "8",
                               "--max-model-len", "32768", "--engine", engine, "--json")
        assert code == 0
        return float(json.loads(out)["per_conversation_bytes_per_gpu"])

    for engine in ("vllm", "sglang"):
        assert per_conversation(old, engine) == per_conversation(new, engine)
    spec = spec_from_gguf(old)
    assert spec.attention is not None and spec.attention.mla is not None
    heads = spec.attention.head_dim + spec.attention.v_head_dim
    latent = spec.attention.mla.kv_lora_rank + spec.attention.mla.qk_rope_head_dim
    assert per_conversation(old, "llama.cpp") == pytest.approx(
        per_conversation(new, "llama.cpp") * spec.attention.num_kv_heads * heads / latent)
