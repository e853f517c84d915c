"""Units: SI inside the code, display units only at the edge.

GB is 1e9 bytes, GiB is 2**30 bytes; the name of every quantity says which one it holds.
Token counts written "128k" follow vLLM's ``--max-model-len`` convention (vLLM
``vllm/engine/arg_utils.py``, ``human_readable_int``): a lower-case suffix is decimal
(1k = 1,000), an upper-case one binary (1K = 1,024).
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from collections.abc import Iterable

from ridgeline.errors import InputError, shorten

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KIB = 2**10
MIB = 2**20
GIB = 2**30
TERA = 1e12

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_COUNT_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtKMGT]?)\s*$")  # ASCII digits only
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_FACTORS = {
    "b": 1, "kb": KB, "mb": MB, "gb": GB, "tb": TB,
    "kib": KIB, "mib": MIB, "gib": GIB, "tib": 2**40,
}


MAX_COUNT = 10**12  # far past any real batch, context or request count; keeps integers exact
TOKEN_EXAMPLES = "4096, 128k or 128K"  # how a refusal illustrates a token length
COUNT_EXAMPLES = "8, 64 or 1k"  # … and a count of sequences, requests or GPUs


def parse_count(text: str, what: str = "count", examples: str = TOKEN_EXAMPLES,
                positive: bool = False) -> int:
    """Parse a token or request count: "2048", "128k" (128,000), "128K" (131,072); a refusal
    shows ``examples`` of the quantity (a batch is not written 128K). ``positive``: the
    count must be at least 1, so a negative one is refused as 0 is ("must be positive"),
    not as if 0 were allowed."""
    match = _COUNT_RE.match(str(text))
    if not match and _COUNT_RE.match(str(text).strip().removeprefix("-")):
        raise InputError(f"{what} {'must be positive' if positive else 'cannot be negative'}"
                         f", got {text!r}")
    if not match and "," in str(text) and all(
            _COUNT_RE.match(part) for part in str(text).split(",")):
        raise InputError(f"{what} takes one whole number, not a list; got {text!r}")
    if not match:
        raise InputError(f"{what} must be a whole number such as {examples}, got {text!r}")
    number, suffix = match.groups()
    if suffix in _BINARY and "." in number:  # as vLLM's human_readable_int refuses it
        raise InputError(f"{what}: decimals are not allowed with binary suffixes like "
                         f"{suffix}, got {text!r} (did you mean {number}{suffix.lower()}?)")
    factor = _DECIMAL.get(suffix) or _BINARY.get(suffix) or 1
    value = float(number) * factor
    if value > MAX_COUNT:
        raise InputError(f"{what} must be at most {count_as_typed(MAX_COUNT)}, got {text!r}")
    if value != int(value):
        raise InputError(f"{what} must be a whole number, got {text!r}")
    return int(value)


def count_as_typed(n: int) -> str:
    """A count as parse_count reads it back, for a refusal to state a limit: "1000000 (1m)",
    "1000000000000 (1t)" (not 1,000,000, which a list flag reads as three entries, nor 1e+12
    or 1T, which is 2^40); "4096" with no exact decimal suffix."""
    suffix = next((s for s, factor in reversed(_DECIMAL.items()) if n and n % factor == 0), "")
    return f"{n} ({n // _DECIMAL[suffix]}{suffix})" if suffix else str(n)


def parse_count_list(text: str, what: str = "count", examples: str = TOKEN_EXAMPLES
                     ) -> list[int]:
    """Parse "1,8,32" into [1, 8, 32]; every entry must be a positive whole number."""
    parts = str(text).split(",")
    if not any(part.strip() for part in parts):
        raise InputError(f"{what} needs at least one value, got {text!r}")
    if not all(part.strip() for part in parts):
        raise InputError(f"{what}: empty entry in the list {text!r}")
    values = [parse_count(part, what, examples, positive=True) for part in parts]
    for value in values:
        require_positive(value, what)
    return values


MAX_WHOLE_DIGITS = 100  # past any count a flag takes; int() itself stops at 4300 digits


def ascii_whole(text: str) -> int | None:
    """A whole number written in ASCII digits, spaces around allowed: ' 12 ' → 12; None for
    anything else. str.isdigit() and re's \\d also take '１２' (fullwidth), '٣' (Arabic-Indic)
    and '²', which int() reads as 12 and 3 or refuses in Python's words; and past 4300 digits
    int() refuses in its own."""
    word = str(text).strip()
    if not (word.isascii() and word.isdigit()) or len(word) > MAX_WHOLE_DIGITS:
        return None
    return int(word)


def parse_bytes(text: str, default_unit: str = "GiB") -> float:
    """Parse a memory size: "80GB" (8e10 bytes), "80 GiB" (8.59e10), "24" (in default_unit)."""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise InputError(f"memory size must look like 80GB or 80GiB, got {text!r}")
    number, unit = match.groups()
    factor = _SIZE_FACTORS[(unit or default_unit).lower()]
    return float(number) * factor


def require_positive(value: float, what: str) -> float:
    """Refuse zero, negative and non-finite sizes with a message naming the quantity; any
    real number passes (numpy's float64 and int64 among them: numbers.Real)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{what} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{what} must be positive{'' if math.isfinite(value) else ' and finite'}"
                         f", got {value!r}")
    return value


def require_count(value: object, what: str) -> int:
    """A positive whole count (a batch, a context or a prompt in tokens) as an int: any
    integer (numpy's int64 among them: numbers.Integral) or a whole real (8.0 -> 8); a
    fraction (2000.5 tokens), a bool, zero, a negative or a non-number is refused naming
    ``what``. Reads no numpy: numpy registers its scalars with the numbers ABCs."""
    count = _whole(value, what)
    if count <= 0:
        raise InputError(f"{what} must be positive, got {value!r}")
    return count


MAX_BATCH = 10**6  # sequences in one step: far beyond any engine's max_num_seqs


def require_batch(value: object, what: str = "batch") -> int:
    """A batch of sequences as require_count reads it, at most MAX_BATCH, as --batch takes it:
    decode_floor(dep, 10**8, 1) is refused before a list of 10**8 sequences is built (9 s
    and 1.6 GB where it was not), in the words the CLI's refusal uses: 'batch must be at
    most 1000000 (1m), got 100000000'."""
    count = require_count(value, what)
    if count > MAX_BATCH:
        raise InputError(f"{what} must be at most {count_as_typed(MAX_BATCH)}, got "
                         f"{shorten(repr(value), 40)}")  # 1e300: not its 301 digits
    return count


def require_whole(value: object, what: str) -> int:
    """A whole number of at least 0 as an int, read as require_count reads a count (a size
    in MiB where 0 turns a cache off: 256 and 0 pass, 2.5, -1 and True are refused)."""
    count = _whole(value, what)
    if count < 0:
        raise InputError(f"{what} cannot be negative, got {value!r}")
    return count


def _whole(value: object, what: str) -> int:
    """``value`` as an int where it is a whole number (an integer, or a real such as 8.0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, numbers.Integral):
        return operator.index(value)
    if float(value).is_integer():
        return int(float(value))
    raise InputError(f"{what} must be a whole number"
                     + (" of tokens" if "length" in what or "context" in what else "")
                     + f", got {value!r}")


def require_fraction(value: object, what: str) -> float:
    """A share in (0, 1] as a float (vLLM's gpu_memory_utilization 0.9): a bool, a
    non-number, nan, 0 or past 1 is refused naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{what} must be a number, got {value!r}")
    if not 0 < float(value) <= 1:  # nan fails both comparisons
        raise InputError(f"{what} must be in (0, 1], got {value}")
    return float(value)


def binary_unit(n_bytes: float) -> tuple[str, float]:
    """The binary unit fmt_binary_bytes shows ``n_bytes`` in, and its factor: 36864 -> KiB."""
    for unit, factor in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n_bytes) >= factor:
            return unit, float(factor)
    return "B", 1.0


def fmt_binary_bytes(n_bytes: float) -> str:
    """Binary bytes for display: 36864 -> '36 KiB'."""
    unit, factor = binary_unit(n_bytes)
    if unit == "B":
        return f"{n_bytes:.0f} B"
    value = n_bytes / factor
    return f"{value:,.0f} {unit}" if abs(value) >= 1000 else f"{value:.4g} {unit}"


def fmt_decimal_bytes(n_bytes: float) -> str:
    """Decimal bytes for display, in the unit that keeps the figure short: 8.59e9 -> '8.59 GB',
    1.717e18 -> '1.72 EB'."""
    for unit, factor in (("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6),
                         ("kB", 1e3)):
        if abs(n_bytes) >= factor:
            value = n_bytes / factor
            return f"{value:,.0f} {unit}" if abs(value) >= 1000 else f"{value:,.3g} {unit}"
    return f"{n_bytes:.0f} B"


def fmt_count(n: float) -> str:
    """Parameter-style counts: 70553706496 -> '70.55B'."""
    for unit, factor in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= factor:
            return f"{n / factor:.4g}{unit}"
    return f"{n:.0f}"


def fmt_req_rate(req_s: float) -> str:
    """A request rate as a load states it: 4 significant figures (0.25, 2.5, 12.5), whole and
    grouped from 1,000 on (100000 -> '100,000', never '1e+05')."""
    return f"{req_s:,.0f}" if req_s >= 1000 else f"{req_s:.4g}"


def fmt_total_tok_s(tok_s: float) -> str:
    """A total rate printed beside a per-user one (which prints to 0.1 tok/s): to 0.1 where
    it is small, so batch 1's total reads as the per-user figure it is (9.5 beside 9.5, not
    9), whole from 100 tok/s up (1,230)."""
    return f"{tok_s:,.0f}" if round(tok_s, 1) >= 100 else f"{tok_s:,.1f}"


def usd_per_million_tokens(usd_per_hour: float | None, tok_s: float) -> float | None:
    """What a million tokens cost at ``tok_s`` on hardware billed ``usd_per_hour``:
    $2.99/h at 1,000 tok/s -> 2.99 / 3.6 M tokens = $0.83 per million; None without a price."""
    if usd_per_hour is None or tok_s <= 0:
        return None
    return usd_per_hour / (tok_s * 3600) * 1e6


def fmt_usd_per_hour(usd_per_hour: float) -> str:
    """A price per device-hour to the digits it carries, at least cents: $2.99, and the
    catalog's $1.861 (not $1.86, so 19 GPUs show the $35.36 plan bills, not $35.34)."""
    whole, _, cents = f"{usd_per_hour:,.4f}".rstrip("0").partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def share_of_requests(share: float, whose: str = "the") -> str:
    """A share of the requests, worded to be read: a percentage to the digits that tell
    (12.3% from 1% up, 0.35% below), and under 0.1 % as one in so many, the many to two
    significant figures: 1.0e-05 → 'about 1 in 100,000 requests', 1.43e-05 of this load's →
    'about 1 in 70,000 of this load's requests'."""
    noun = f"{whose} requests"
    if share >= 1e-3:
        return f"{share:.1%} of {noun}" if share >= 0.01 else f"{share:.2%} of {noun}"
    many = int(float(f"{1 / share:.2g}"))
    return f"about 1 in {many:,} " + ("requests" if whose == "the" else f"of {noun}")


def fmt_share(share: float, places: int = 0, bounds: tuple[float, ...] = (0.0, 1.0)) -> str:
    """A share as a percentage to ``places`` decimals, or as many more as keep the figure on
    its own side of every bound (by default 0 % and 100 %, so it reads "0%" or "100%" only
    when it is exactly that): 0.42 → '42%', 0.003 → '0.3%' (not '0%'), 0.9996 → '99.96%',
    and 1.00015 against a bound of 1 → '100.02%' (not '100%', which is no share past it).
    Within a millionth of a percent of a bound it says which side: 1e-9 → 'just over 0%',
    1 − 1e-12 → 'just under 100%' (not '1e-07%' or '1e+02%'); −0.0 reads '0%'."""
    pct = share * 100 + 0.0  # -0.0 + 0.0 is 0.0: no '-0%'
    for extra in range(7):
        text = f"{pct:,.{places + extra}f}"
        shown = float(text.replace(",", ""))
        text = text.lstrip("-") if shown == 0 else text  # a negative share rounded to 0
        if all((shown > b * 100) == (pct > b * 100) and (shown < b * 100) == (pct < b * 100)
               for b in bounds):
            return f"{text}%"
    bound = min(bounds, key=lambda b: abs(pct - b * 100)) * 100  # the one it is next to
    return f"just {'over' if pct > bound else 'under'} {bound:,g}%"


def plural(n: float, word: str) -> str:
    """The word for ``n`` of it: 1 token, 2 tokens."""
    return word if n == 1 else f"{word}s"


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 112th."""
    if n % 100 in (11, 12, 13):
        return f"{n:,}th"
    return f"{n:,}" + {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def indefinite(n: int) -> str:
    """'a' or 'an' before ``n`` as it is read aloud with thousands separators: an 8,000-token
    prompt, an 11-layer model, a 1,024-token window."""
    lead = int(f"{abs(n):,}".split(",")[0])
    return "an" if lead in (8, 11, 18) or 80 <= lead <= 89 or 800 <= lead <= 899 else "a"


# A latency reads in seconds from here on: 100,000 ms is six figures to count, 100.0 s three
LATENCY_SECONDS_FROM_S = 100.0


def fmt_latency(seconds: float, ms: str = ",.1f", s: str = ",.1f") -> str:
    """A latency with its unit, as a sentence writes it: in ms as ``ms`` formats it below
    LATENCY_SECONDS_FROM_S, in seconds as ``s`` formats it from there on: 0.0432 -> '43.2 ms',
    4144.766 -> '4,144.8 s' (not '4,144,765.8 ms'). Two latencies set against each other
    each carry their own unit ('4,144.8 s > 1000 ms')."""
    if seconds >= LATENCY_SECONDS_FROM_S:  # nan and -inf read in ms, as before
        return f"{seconds:{s}} s"
    return f"{seconds * 1e3:{ms}} ms"


def fmt_latency_limit(seconds: float) -> str:
    """An SLO's limit (given in ms) as fmt_latency writes it, to the digits typed: 1.0 ->
    '1000 ms', 0.0125 -> '12.5 ms', 300.0 -> '300 s'."""
    return fmt_latency(seconds, "g", ",g")


def latency_unit(latencies_s: Iterable[float]) -> str:
    """The one unit a table of latencies reads in: "s" where its largest finite entry
    reaches LATENCY_SECONDS_FROM_S, else "ms" (a TTFT of 4,144.8 s beside a TPOT of 0.1126 s,
    rather than units mixed by row)."""
    finite = [x for x in latencies_s if math.isfinite(x)]
    return "s" if finite and max(finite) >= LATENCY_SECONDS_FROM_S else "ms"


def latency_figure(seconds: float, unit: str) -> str:
    """A latency in a table's unit (latency_unit), without it: in ms to 0.1 ms ('98.5'); in
    seconds to 0.1 s from 100 s on ('2,302.7'), four significant figures from 1 s ('12.35',
    '1.234') and 0.1 ms below ('0.0985'), the digits the ms table gave those; '-' for nan."""
    if math.isnan(seconds):
        return "-"
    if unit == "ms":
        return f"{seconds * 1e3:,.1f}"
    places = 1 if abs(seconds) >= 100 else 2 if abs(seconds) >= 10 else 3 \
        if abs(seconds) >= 1 else 4
    return f"{seconds:,.{places}f}"
