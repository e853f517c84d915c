"""A random-weight PyTorch model built from a ModelSpec, for timing decode and prefill steps.

Plain eager PyTorch: GQA attention over a preallocated KV cache (sliding and chunked layers
read at most their window, and prefill a window at a time), gated or plain MLPs, MoE with
top-k routing that runs only the experts a batch picks, an LM head. No weights are
downloaded: the values are random, the shapes are the model's. No norms, no rotary embedding
(fewer kernels a layer than a real model: docs/measure.md says what that does to eager
steps). MLA, linear-attention and
Mamba layers are not built (the caller gets a clear error). torch is imported here only,
and only when this module is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ridgeline.errors import InputError
from ridgeline.layouts import ATTENTION_MIXERS, MOE
from ridgeline.model import ModelSpec

# docs/measure.md's install lines: ridgeline is installed from its checkout (no package of
# that name on PyPI is ours), so the extra is named there, or torch alone
TORCH_EXTRA = "pip install -e '.[measure]' in ridgeline's checkout, or pip install torch"


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise InputError(f"measuring needs PyTorch: {TORCH_EXTRA}") from None
    return torch


def check_buildable(spec: ModelSpec, fp8: bool = False) -> None:
    """Refuse a model ``measure`` cannot build, before any device work."""
    att = spec.attention
    if att is None or att.mla is not None:
        raise InputError(f"{spec.name}: MLA and attention-free models are not built by measure")
    if any(layer.mixer not in ATTENTION_MIXERS for layer in spec.layers):
        raise InputError(f"{spec.name}: linear-attention and Mamba layers are not built by measure")
    if fp8 and spec.moe is not None:
        raise InputError(f"{spec.name}: fp8 weights are built for dense models only")


def grouped_mm_runs(torch: Any, device: Any, dtype: Any) -> bool:
    """Whether this torch runs torch._grouped_mm on this device and dtype (2.8+; bf16 on
    Hopper and newer), tried on a small problem with an empty group."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    try:
        a = torch.ones(32, 16, device=device, dtype=dtype)
        b = torch.ones(3, 16, 16, device=device, dtype=dtype).transpose(1, 2)
        ends = torch.tensor([16, 16, 32], device=device, dtype=torch.int32)
        out = torch._grouped_mm(a, b, offs=ends)
        return bool(out.shape == (32, 16))
    except (RuntimeError, TypeError, NotImplementedError):
        return False


@dataclass
class RandomModel:
    """Weights per layer as plain tensors; ``step`` runs one forward pass."""

    spec: ModelSpec
    torch: Any
    device: Any
    dtype: Any
    layers: list[dict[str, Any]]
    lm_head: Any
    embed: Any
    grouped: bool = False  # experts through torch._grouped_mm (else one matmul each)
    fp8: bool = False  # attention and MLP weights in e4m3, run by torch._scaled_mm (W8A8)
    one: Any = None  # the per-tensor scale of the fp8 matmuls
    fp8_dtype: Any = None  # the e4m3 torch dtype (float8_e4m3fn; fnuz on an MI300)

    @classmethod
    def build(cls, spec: ModelSpec, device: str = "cpu", dtype: str = "float32",
              seed: int = 0, fp8: bool = False,
              fp8_dtype: str = "float8_e4m3fn") -> RandomModel:
        """``fp8``: the linear layers' weights in float8 e4m3 (``fp8_dtype``, as
        device_probes.fp8_format names it for the GPU: float8_e4m3fnuz on an MI300), as an
        FP8 checkpoint's, and their inputs cast to it (per-tensor scales of 1); the LM head,
        the embeddings, the activations between layers and the KV cache stay in ``dtype``."""
        check_buildable(spec, fp8)
        torch = import_torch()
        if fp8 and not hasattr(torch, fp8_dtype):
            raise InputError(f"fp8 weights need a PyTorch with {fp8_dtype} (2.1+)")
        e4m3 = getattr(torch, fp8_dtype) if fp8 else None
        torch.manual_seed(seed)
        dev, dt = torch.device(device), getattr(torch, dtype)
        att = spec.attention
        assert att is not None
        h, n, nkv, d = spec.hidden_size, att.num_heads, att.num_kv_heads, att.head_dim

        def w(*shape: int) -> Any:
            return torch.randn(*shape, device=dev, dtype=dt) * 0.02

        def linear(rows: int, cols: int) -> Any:
            weight = w(rows, cols)
            return weight.to(e4m3) if fp8 else weight

        layers = []
        for layer in spec.layers:
            p: dict[str, Any] = {"window": layer.window_tokens,
                                 "qkv": linear((n + 2 * nkv) * d, h), "o": linear(h, n * d)}
            if layer.ffn == MOE and spec.moe:
                moe = spec.moe
                f = moe.expert_intermediate_size
                p["router"] = w(moe.num_experts, h)
                # every expert's up (gate and value) and down matrices, stacked
                p["up"], p["down"] = w(moe.num_experts, 2 * f, h), w(moe.num_experts, h, f)
                p["k"] = moe.experts_per_token
                if moe.num_shared_experts:
                    fs = moe.shared_intermediate_size * moe.num_shared_experts
                    p["shared"] = (w(2 * fs, h), w(h, fs))
            elif spec.dense_mlp:
                f = spec.dense_mlp.intermediate_size
                rows = 2 * f if spec.dense_mlp.gated else f
                p["mlp"] = (linear(rows, h), linear(h, f))
                p["gated"] = spec.dense_mlp.gated
            layers.append(p)
        grouped = any("up" in p for p in layers) and grouped_mm_runs(torch, dev, dt)
        return cls(spec, torch, dev, dt, layers, w(spec.vocab_size, h), w(spec.vocab_size, h),
                   grouped, fp8, torch.tensor(1.0, device=dev), e4m3)

    def kv_cache(self, batch: int, context: int) -> list[tuple[Any, Any]]:
        """Random cached K and V per layer, [batch, kv heads, slots, head_dim], with one
        slot free at the end for the decoded token: ``context`` cached tokens (a windowed
        layer keeps window − 1, so the new token makes its window) plus that slot."""
        att = self.spec.attention
        assert att is not None
        out = []
        for p in self.layers:
            kept = min(context, p["window"] - 1) if p["window"] else context
            shape = (batch, att.num_kv_heads, kept + 1, att.head_dim)
            out.append((self.torch.randn(shape, device=self.device, dtype=self.dtype),
                        self.torch.randn(shape, device=self.device, dtype=self.dtype)))
        return out

    @staticmethod
    def cache_bytes(spec: ModelSpec, batch: int, context: int, element_bytes: int) -> int:
        """What kv_cache(batch, context) allocates."""
        att = spec.attention
        assert att is not None
        slots = sum((min(context, layer.window_tokens - 1) if layer.window_tokens else context)
                    + 1 for layer in spec.layers)
        return 2 * batch * att.num_kv_heads * att.head_dim * slots * element_bytes

    @staticmethod
    def prefill_bytes(spec: ModelSpec, tokens: int, element_bytes: int) -> int:
        """About the most a prefill of ``tokens`` holds at once beside the weights: the
        hidden state, Q/K/V, the attention output and the MLP's (or the picked experts')
        intermediate products, with room to spare for the allocator."""
        att = spec.attention
        assert att is not None
        h = spec.hidden_size
        qkv = (att.num_heads + 2 * att.num_kv_heads) * att.head_dim
        if spec.moe is not None:
            rows = tokens * spec.moe.experts_per_token
            ffn = rows * (2 * h + 3 * spec.moe.expert_intermediate_size)
        else:
            f = spec.dense_mlp.intermediate_size if spec.dense_mlp else 0
            ffn = tokens * 4 * f
        per_token = 3 * h + qkv + att.num_heads * att.head_dim
        return int(1.5 * element_bytes * (tokens * per_token + ffn))

    def step(self, tokens: Any, cache: list[tuple[Any, Any]] | None) -> Any:
        """One forward pass: tokens [batch, new] attend to the cache (if any) and themselves.
        A decoded token is written into the cache's free slot, not concatenated, so a step
        reads the cache once, as an engine's paged attention does."""
        torch, att = self.torch, self.spec.attention
        assert att is not None
        n, nkv, d = att.num_heads, att.num_kv_heads, att.head_dim
        x = self.embed[tokens]  # [B, T, h]
        b, t, _ = x.shape
        for i, p in enumerate(self.layers):
            qkv = self._mm(x, p["qkv"])
            q, k, v = qkv.split([n * d, nkv * d, nkv * d], dim=-1)
            q = q.view(b, t, n, d).transpose(1, 2)
            k = k.view(b, t, nkv, d).transpose(1, 2)
            v = v.view(b, t, nkv, d).transpose(1, 2)
            if cache is not None and t == 1:
                kc, vc = cache[i]
                kc[:, :, -1:] = k
                vc[:, :, -1:] = v
                k, v = kc, vc
            elif cache is not None:
                k = torch.cat([cache[i][0][:, :, :-1], k], dim=2)
                v = torch.cat([cache[i][1][:, :, :-1], v], dim=2)
            if cache is None and t > 1 and p["window"] and t > p["window"]:
                y = self._attend_windowed(q, k, v, p["window"])
            else:
                y = self._attend(q, k, v, causal=t > 1 and cache is None)
            x = x + self._mm(y.transpose(1, 2).reshape(b, t, n * d), p["o"])
            x = x + self._ffn(p, x)
        return x[:, -1] @ self.lm_head.T  # logits of each sequence's last position

    def _attend(self, q: Any, k: Any, v: Any, causal: bool) -> Any:
        """Scaled dot-product attention; grouped K/V heads shared in the kernel where this
        torch can (enable_gqa, 2.5+), else repeated to every query head."""
        sdpa = self.torch.nn.functional.scaled_dot_product_attention
        if q.shape[1] != k.shape[1]:
            try:
                return sdpa(q, k, v, is_causal=causal, enable_gqa=True)
            except TypeError:
                group = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return sdpa(q, k, v, is_causal=causal)

    def _attend_windowed(self, q: Any, k: Any, v: Any, window: int) -> Any:
        """Causal attention in which each position sees its last ``window`` positions (itself
        included), as a windowed layer prefills: ``window`` queries at a time against the
        2·window − 1 keys they can reach, so the work grows with the prompt, not its square."""
        torch = self.torch
        t = q.shape[2]
        group = q.shape[1] // k.shape[1]
        if group > 1:  # a masked kernel with grouped heads is not on every backend
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        chunks = []
        for start in range(0, t, window):
            end, first = min(start + window, t), max(0, start - window + 1)
            at_q = torch.arange(start, end, device=q.device).unsqueeze(1)
            at_k = torch.arange(first, end, device=q.device).unsqueeze(0)
            seen = (at_k <= at_q) & (at_k > at_q - window)
            chunks.append(sdpa(q[:, :, start:end], k[:, :, first:end], v[:, :, first:end],
                               attn_mask=seen))
        return torch.cat(chunks, dim=2)

    def _experts_looped(self, p: dict[str, Any], flat: Any, weights: Any, chosen: Any) -> Any:
        """Each expert the batch picked, one after another (the host learns which: no graph)."""
        functional = self.torch.nn.functional
        out = self.torch.zeros_like(flat)
        for e in chosen.unique().tolist():
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            gate, value = (flat[rows] @ p["up"][e].T).chunk(2, dim=-1)
            out.index_add_(0, rows, (functional.silu(gate) * value @ p["down"][e].T)
                           * weights[rows, slot].unsqueeze(-1))
        return out

    def _experts_grouped(self, p: dict[str, Any], flat: Any, weights: Any, chosen: Any) -> Any:
        """All picked experts in two grouped matmuls (torch._grouped_mm, as MoE kernels run
        them): the (token, expert) pairs sorted by expert, each expert's rows one group. An
        expert no token picked has an empty group and its weights are not read. Nothing
        goes back to the host, so the step can be captured in a CUDA graph."""
        torch = self.torch
        experts, k = p["up"].shape[0], chosen.shape[1]
        picks = chosen.reshape(-1)
        order = picks.argsort(stable=True)
        token = order // k  # the token of each sorted pair
        counts = torch.zeros(experts, dtype=torch.int64, device=flat.device)
        counts.scatter_add_(0, picks, torch.ones_like(picks))
        ends = counts.cumsum(0).to(torch.int32)  # each group's last row + 1
        hidden = torch._grouped_mm(flat[token], p["up"].transpose(1, 2), offs=ends)
        gate, value = hidden.chunk(2, dim=-1)
        act = torch.nn.functional.silu(gate) * value
        down = torch._grouped_mm(act, p["down"].transpose(1, 2), offs=ends)
        scaled = down * weights.reshape(-1)[order].unsqueeze(-1)
        return torch.zeros_like(flat).index_add_(0, token, scaled)

    def _ffn(self, p: dict[str, Any], x: Any) -> Any:
        functional = self.torch.nn.functional
        if "up" in p:
            flat = x.reshape(-1, x.shape[-1])
            weights, chosen = (flat @ p["router"].T).topk(p["k"], dim=-1)
            weights = weights.softmax(dim=-1)
            route = self._experts_grouped if self.grouped else self._experts_looped
            out = route(p, flat, weights, chosen)
            if "shared" in p:
                up, down = p["shared"]
                gate, value = (flat @ up.T).chunk(2, dim=-1)
                out = out + functional.silu(gate) * value @ down.T
            return out.view_as(x)
        up, down = p["mlp"]
        if p["gated"]:
            gate, value = self._mm(x, up).chunk(2, dim=-1)
            return self._mm(functional.silu(gate) * value, down)
        return self._mm(functional.gelu(self._mm(x, up)), down)

    def _mm(self, x: Any, weight: Any) -> Any:
        """x @ weightᵀ; with fp8 weights, x cast to e4m3 and the product run by
        torch._scaled_mm (its rows padded to a multiple of 16 on CUDA, where cuBLASLt wants
        them so), the output in the model's dtype."""
        if not self.fp8:
            return x @ weight.T
        torch = self.torch
        flat = x.reshape(-1, x.shape[-1])
        rows = flat.shape[0]
        pad = -rows % 16 if self.device.type == "cuda" else 0
        if pad:
            flat = torch.nn.functional.pad(flat, (0, 0, 0, pad))
        out = torch._scaled_mm(flat.to(self.fp8_dtype), weight.t(), scale_a=self.one,
                               scale_b=self.one, out_dtype=self.dtype)
        return out[:rows].reshape(*x.shape[:-1], weight.shape[0])
