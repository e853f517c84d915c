"""llama-server's --override-kv KEY=TYPE:VALUE, the GGUF metadata a launch rewrites: of its
keys only ``ARCH.context_length`` changes ridgeline's answer (it is n_ctx_train, each slot's
cap); the others ride along to the start line, noted as not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from ridgeline.errors import InputError
from ridgeline.model import ModelSpec

# common/common.cpp string_parse_kv_override: "int:", "float:", "bool:" or "str:" after the
# '='; anything else is "invalid type for KV override" and common/arg.cpp refuses the flag
TYPES = ("int", "float", "bool", "str")
KEY_MAX_CHARS = 127  # llama_model_kv_override.key is char[128]: a longer key is "malformed"
STR_MAX_CHARS = 127  # .val_str is char[128]: "value cannot exceed 127 chars"
N_CTX_TRAIN_MAX = 2**32 - 1  # llama_hparams.n_ctx_train is a uint32_t
CONTEXT_KEY = "context_length"  # LLM_KV_CONTEXT_LENGTH, "%s.context_length" (llama-arch.cpp)

# the GGUF general.architecture llama.cpp's converter writes for a model_type: gguf_model's
# ARCHITECTURES read backwards, with Mistral and Mixtral converted to "llama" and DeepSeek-V3
# to "deepseek2"; a model_type not here has no architecture ridgeline can name
GGUF_ARCHITECTURES = {"llama": "llama", "mistral": "llama", "mixtral": "llama",
                      "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3moe",
                      "gemma2": "gemma2", "gemma3_text": "gemma3", "phi3": "phi3",
                      "deepseek_v2": "deepseek2", "deepseek_v3": "deepseek2",
                      "gpt_oss": "gpt-oss"}


@dataclass(frozen=True)
class KvOverride:
    """One KEY=TYPE:VALUE, checked as llama.cpp checks it when it parses the flag."""

    key: str
    type: str
    value: str

    def __post_init__(self) -> None:
        text = f"{self.key}={self.type}:{self.value}"
        if not self.key or len(self.key) > KEY_MAX_CHARS:
            raise InputError(f"--override-kv {text!r}: the key must be 1 to {KEY_MAX_CHARS} "
                             "characters (llama.cpp: 'malformed KV override')")
        if self.type not in TYPES:
            raise InputError(f"--override-kv {text!r}: the type is one of {', '.join(TYPES)} "
                             "(llama.cpp: 'invalid type for KV override')")
        if self.type == "bool" and self.value not in ("true", "false"):
            raise InputError(f"--override-kv {text!r}: bool takes true or false (llama.cpp: "
                             "'invalid boolean value for KV override')")
        if self.type == "str" and len(self.value) > STR_MAX_CHARS:
            raise InputError(f"--override-kv {text!r}: a str value cannot exceed "
                             f"{STR_MAX_CHARS} characters (llama.cpp refuses it)")
        if self.type == "int" and not _whole(self.value):
            # llama.cpp reads it with atol, so 'abc' or '1.5' would load as 0 or 1 unwarned:
            # ridgeline refuses rather than size a launch on a number nobody meant
            raise InputError(f"--override-kv {text!r}: int takes a whole number")
        if self.type == "int" and self.sets_context_length \
                and not 1 <= int(self.value) <= N_CTX_TRAIN_MAX:
            # n_ctx_train is a uint32_t: 0 or a negative would not be a context at all, and
            # past its most the value wraps (get_key casts the override's int64 to it)
            raise InputError(f"--override-kv {text!r}: a context length is 1 to "
                             f"{N_CTX_TRAIN_MAX:,} (n_ctx_train is a uint32_t)")
        if self.type == "float":
            try:
                float(self.value)
            except ValueError:
                raise InputError(f"--override-kv {text!r}: float takes a number") from None

    @classmethod
    def parse(cls, text: str) -> KvOverride:
        """KEY=TYPE:VALUE, split at the first '=' and the first ':' after it."""
        key, eq, rest = text.partition("=")
        kind, colon, value = rest.partition(":")
        if not eq:
            raise InputError(f"--override-kv {text!r} is not KEY=TYPE:VALUE (llama.cpp: "
                             "'malformed KV override')")
        if not colon:
            raise InputError(f"--override-kv {text!r}: the value needs a type, one of "
                             f"{', '.join(t + ':' for t in TYPES)} (llama.cpp: 'invalid type "
                             "for KV override')")
        return cls(key, kind, value)

    @property
    def text(self) -> str:
        return f"{self.key}={self.type}:{self.value}"

    @property
    def sets_context_length(self) -> bool:
        return self.key.rpartition(".")[2] == CONTEXT_KEY and "." in self.key


def _whole(text: str) -> bool:
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isascii() and digits.isdigit()


def parse_overrides(text: str) -> tuple[KvOverride, ...]:
    """One --override-kv's value: several overrides, comma-separated, as newer builds take
    them (common/arg.cpp splits it with parse_csv_row, a field in double quotes keeping its
    commas); an older build reads the whole value as one, and a repeated flag adds more in
    both."""
    fields, field, quoted, i = [], "", False, 0
    while i < len(text):
        ch = text[i]
        if ch == '"' and quoted and text[i + 1:i + 2] == '"':
            field, i = field + '"', i + 2
            continue
        if ch == '"' and (quoted or not field):
            quoted = not quoted
        elif ch == "," and not quoted:
            fields.append(field)
            field = ""
        else:
            field += ch
        i += 1
    fields.append(field)
    return tuple(KvOverride.parse(f) for f in fields)


def gguf_architecture(spec: ModelSpec) -> str | None:
    """The GGUF architecture llama.cpp names ``spec``'s keys by (llama for Mistral-7B), or
    None where ridgeline cannot name it."""
    return GGUF_ARCHITECTURES.get(spec.model_type)


def context_override(spec: ModelSpec, overrides: tuple[KvOverride, ...]) -> KvOverride | None:
    """The override that sets ``spec``'s n_ctx_train: the first int one of its
    ARCH.context_length (llama_model_loader keeps the first of a key given twice, std::map
    insert, and load_hparams reads n_ctx_train through it before the context, and YaRN's
    rescaling of it, exists); any ``*.context_length`` where the architecture is unknown.
    None where no override sets it."""
    for o in overrides:
        if o.type == "int" and o.sets_context_length and _applies(spec, o):
            return o
        if o.sets_context_length and _applies(spec, o):
            return None  # the first of the key wins, and a float/str/bool one is dropped
    return None


def _applies(spec: ModelSpec, o: KvOverride) -> bool:
    arch = gguf_architecture(spec)
    return arch is None or o.key == f"{arch}.{CONTEXT_KEY}"


def unmodelled_note(spec: ModelSpec, overrides: tuple[KvOverride, ...]) -> str:
    """A line on the overrides that leave ridgeline's answer as it was, or ""."""
    used = context_override(spec, overrides)
    rest = [o.text for o in overrides if o is not used]
    if not rest:
        return ""
    arch = gguf_architecture(spec)
    wrong = [o for o in overrides if o.sets_context_length and o is not used]
    why = ""
    if wrong and arch and any(o.key != f"{arch}.{CONTEXT_KEY}" for o in wrong):
        why = (f"; llama.cpp reads {arch}.{CONTEXT_KEY} for {spec.name}, so another "
               "architecture's key leaves n_ctx_train")
    elif wrong:
        why = (f"; an override of {CONTEXT_KEY} counts only as int, and only the first of a "
               "key (llama.cpp warns of a wrong type and keeps the GGUF's value)")
    return (f"--override-kv {', '.join(rest)}: ridgeline does not model "
            f"{'this key' if len(rest) == 1 else 'these keys'}, so the answer is as "
            f"without {'it' if len(rest) == 1 else 'them'}{why}")
