"""llama-server's RoPE launch flags (--rope-scaling, --rope-scale, --rope-freq-scale,
--yarn-orig-ctx) and the trained context they leave it: from PR #28030 on, YaRN at a scale
other than the GGUF's lifts n_ctx_train, which caps each slot's context; linear scaling, or an
older build, leaves it.

The launch's --override-kv ARCH.context_length=int:N (llamacpp_overrides) sets n_ctx_train
first: the model loader reads the GGUF's hparams with the overrides applied, and YaRN rescales
what it read when the context is built.
"""

from __future__ import annotations

import math
import shlex
import struct
from dataclasses import dataclass

from ridgeline.context_length import served_positions
from ridgeline.datafiles import engine_defaults
from ridgeline.errors import InputError
from ridgeline.llamacpp_overrides import N_CTX_TRAIN_MAX, KvOverride, context_override
from ridgeline.model import ModelSpec

SCALING_TYPES = ("none", "linear", "yarn")  # common/arg.cpp's --rope-scaling values


def _f32(x: float) -> float:
    """``x`` as C's float holds it: llama.cpp keeps rope_freq_scale in 32 bits."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


@dataclass(frozen=True)
class RopeLaunch:
    """The RoPE flags a llama-server launch gives. ``scaling`` None: the GGUF's own type
    (linear where it names none); ``freq_scale`` None: the GGUF's (--rope-scale F gives 1/F);
    ``yarn_orig_ctx`` 0: the GGUF's original context, else n_ctx_train; ``build`` the
    --engine-version build (None: the newest modelled); ``kv_overrides`` its --override-kv
    KEY=TYPE:VALUE in the order given."""

    scaling: str | None = None
    freq_scale: float | None = None
    yarn_orig_ctx: int = 0
    build: int | None = None
    kv_overrides: tuple[KvOverride, ...] = ()

    def __post_init__(self) -> None:
        if self.scaling is not None and self.scaling not in SCALING_TYPES:
            raise InputError(f"--rope-scaling is one of {', '.join(SCALING_TYPES)}, got "
                             f"{self.scaling!r}")
        if self.freq_scale is not None and not (math.isfinite(self.freq_scale)
                                                and 0 < _f32(self.freq_scale) < math.inf):
            # as llama.cpp holds it, in 32 bits: 1e-300 is 0 (a division by 0), 1e300 inf
            raise InputError(f"--rope-scale and --rope-freq-scale take a positive number a "
                             f"32-bit float holds, got {self.freq_scale:g}")
        if isinstance(self.yarn_orig_ctx, bool) or not isinstance(self.yarn_orig_ctx, int) \
                or self.yarn_orig_ctx < 0:
            raise InputError(f"--yarn-orig-ctx must be a whole number ≥ 0, got "
                             f"{self.yarn_orig_ctx!r}")

    def flags(self) -> str:
        """The launch's RoPE and --override-kv flags as llama-server takes them (a leading
        space each), for a start line that must carry them: without them its slots keep the
        trained cap. One --override-kv flag for each override, which every build reads (only
        newer builds split one flag's value at commas)."""
        return "".join((f" --rope-scaling {self.scaling}" if self.scaling else "",
                        f" {self._scale_flag()}" if self.freq_scale else "",
                        f" --yarn-orig-ctx {self.yarn_orig_ctx}" if self.yarn_orig_ctx else "",
                        *(f" --override-kv {_shell_word(o.text)}" for o in self.kv_overrides)))

    def _scale_flag(self) -> str:
        """--rope-scale F where llama.cpp's 1.0f / F gives back the 32-bit rope_freq_scale
        modelled, else --rope-freq-scale with every digit: a rounded F (--rope-freq-scale
        0.56792 as --rope-scale 1.76081) would start a slot cap a token or more away."""
        assert self.freq_scale is not None
        factor = f"{1 / self.freq_scale:g}"
        if rope_scale_freq(float(factor)) == _f32(self.freq_scale):
            return f"--rope-scale {factor}"
        return f"--rope-freq-scale {self.freq_scale!r}"


def rope_scale_freq(factor: float) -> float:
    """--rope-scale F as llama.cpp holds it: rope_freq_scale = 1.0f / F, in 32-bit floats
    (common/arg.cpp)."""
    return _f32(1.0 / _f32(factor))


def _shell_word(text: str) -> str:
    """``text`` as one shell word and one CSV field (common/arg.cpp splits at commas)."""
    return shlex.quote('"' + text.replace('"', '""') + '"' if "," in text else text)


def loaded_n_ctx_train(spec: ModelSpec, engine: str, launch: RopeLaunch | None) -> int | None:
    """n_ctx_train as llama-server loads the GGUF, before any context exists: --override-kv's
    ARCH.context_length where the launch gives one (load_hparams reads the key through the
    overrides), else the config's (served_positions). What -c 0 allocates with --fit off, and
    the length --fit's probe measures: YaRN's rescaling (launch_n_ctx_train) comes only after
    the context is built, so there it lifts each slot's cap, not -c 0 (under --fit, -c 0
    takes the lifted value: llamacpp_fit.fit_resolved_context). Mistral-7B under
    --override-kv llama.context_length=int:65536: -c 0 is 65,536 cells, not 32,768."""
    override = context_override(spec, launch.kv_overrides) if launch is not None else None
    return int(override.value) if override is not None else served_positions(spec, engine)


def launch_n_ctx_train(spec: ModelSpec, launch: RopeLaunch, n_ctx_train: int | None,
                       label: str) -> tuple[int | None, str]:
    """n_ctx_train under ``launch``, and where it comes from: the GGUF's (``n_ctx_train``,
    ``label``), else --override-kv's ARCH.context_length, then YaRN's rescaling of that where
    the build lifts it (yarn_n_ctx_train). Mistral-7B's 32,768 under --override-kv
    llama.context_length=int:65536: 65,536."""
    override = context_override(spec, launch.kv_overrides)
    if override is not None:
        n_ctx_train, label = int(override.value), f"--override-kv {override.text}"
    if n_ctx_train:
        lifted = yarn_n_ctx_train(spec, launch, n_ctx_train)
        if lifted is not None and lifts_on(launch):
            return lifted
    return n_ctx_train, label


def yarn_since_build() -> int:
    """The first llama.cpp build known to lift n_ctx_train under YaRN (PR #28030)."""
    return int(engine_defaults("llama.cpp")["yarn_n_ctx_train"]["since_build"])


def _trained(spec: ModelSpec) -> tuple[str, float]:
    """The GGUF's rope scaling type and rope_freq_scale_train (1 ÷ rope.scaling.factor)."""
    rs = spec.rope_scaling
    kind = rs.type if rs is not None and rs.type in SCALING_TYPES else "linear"
    factor = rs.factor if rs is not None and rs.type in ("linear", "yarn") and rs.factor else 1.0
    return kind, _f32(1.0 / _f32(factor))


def yarn_n_ctx_train(spec: ModelSpec, launch: RopeLaunch,
                     n_ctx_train: int) -> tuple[int, str] | None:
    """(n_ctx_train after ``launch``, where it comes from) where llama.cpp's YaRN rule lifts it,
    whatever the build; None where the launch leaves it. llama_init_from_model: with YaRN at a
    rope_freq_scale other than the trained one, n_ctx_train = n_ctx_orig_yarn ÷ rope_freq_scale
    in 32-bit float, truncated (--yarn-orig-ctx, else the GGUF's original context, else
    n_ctx_train). Qwen3-8B's 40,960 under --rope-scaling yarn --rope-scale 4: 163,840."""
    kind, trained = _trained(spec)
    scale = trained if launch.freq_scale is None else _f32(launch.freq_scale)
    if (launch.scaling or kind) != "yarn" or scale == trained:
        return None
    rs = spec.rope_scaling
    if launch.yarn_orig_ctx:
        base, field = launch.yarn_orig_ctx, "--yarn-orig-ctx"
    elif rs is not None and rs.original_positions:
        base, field = rs.original_positions, "original context"
    else:
        base, field = n_ctx_train, "n_ctx_train"
    if not base / scale <= N_CTX_TRAIN_MAX:
        raise InputError(f"YaRN at rope_freq_scale {scale:g} would make n_ctx_train {base:,} ÷ "
                         f"{scale:g}, past the {N_CTX_TRAIN_MAX:,} llama.cpp's uint32_t holds: "
                         "give a --rope-scale a context can take")
    lifted = int(_f32(base / scale))
    return lifted, f"{field} {base:,} × YaRN {_f32(1.0 / scale):g} = {lifted:,}"


def lifts_on(launch: RopeLaunch) -> bool:
    """Whether the launch's build has PR #28030 (None: the newest modelled, which has)."""
    return launch.build is None or launch.build >= yarn_since_build()


def unlifted_reason(spec: ModelSpec, launch: RopeLaunch | None, n_ctx_train: int) -> str:
    """Why the launch's RoPE flags leave the cap, as a clause for the refusal, or ""."""
    if launch is None:
        return ""
    lifted = yarn_n_ctx_train(spec, launch, n_ctx_train)
    if lifted is not None and not lifts_on(launch):
        return (f"; b{launch.build} predates PR #28030, so its YaRN leaves n_ctx_train: a build "
                f"from b{yarn_since_build()} lifts it to {lifted[0]:,}")
    kind = launch.scaling or _trained(spec)[0]
    if lifted is None and launch.freq_scale is not None and kind != "yarn":
        return f"; {kind} RoPE scaling leaves it (only --rope-scaling yarn lifts it)"
    return ""
