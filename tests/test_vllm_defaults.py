"""vLLM's batch defaults and the versions it can run, as its source sets them: the device it
queries (an MI250's GCD, a TPU it cannot query), V0's early chunk, the seats it lowers to a
small token budget, and the engine/version pairs that never existed."""

from __future__ import annotations

import contextlib
import functools
import io
import json
from pathlib import Path

import pytest

from ridgeline import Deployment, resolve_accelerator, resolve_model
from ridgeline.cli import main
from ridgeline.errors import InputError
from ridgeline.hardware import device_memory_bytes, runtime_device
from ridgeline.memory import EngineSettings, kv_pool
from ridgeline.units import GIB
from ridgeline.vllm_pool import vllm_batch_defaults, vllm_pool_advice


def dep(gpu: str, n: int = 1, model: str = "llama-3.1-8b") -> Deployment:
    return Deployment.build(resolve_model(model), resolve_accelerator(gpu), None, None, n)


@functools.cache
def plan_out(*argv: str) -> tuple[int, str]:
    """One `plan` in-process, its exit code and stdout, asked once a module: the tests that
    read one plan share it (a plan is a function of its arguments)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["plan", *argv])
    return code, out.getvalue()


# Llama-3.1-8B on MI250s at one price, and on an MI250X beside an H100, in one process
MI250 = ("llama-3.1-8b", "--rate", "1", "--input-len", "1000", "--output-len", "100",
         "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100", "--gpus", "mi250", "--price", "mi250=2",
         "--workers", "1")
MI250X_H100 = ("llama-3.1-8b", "--rate", "1", "--input-len", "1000", "--output-len", "100",
               "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100", "--gpus", "mi250x,h100",
               "--price", "mi250x=2", "--price", "h100=3", "--workers", "1", "--json")


def test_rocm_shows_an_mi250_as_two_gpus_of_half_the_board() -> None:
    for part in ("mi250", "mi250x"):
        board = resolve_accelerator(part)
        gcd = runtime_device(board)
        assert board.runtime_devices == 2 and gcd.runtime_devices == 1
        assert gcd.memory_bytes * 2 == board.memory_bytes
        assert gcd.memory_bandwidth_bytes_per_s * 2 == board.memory_bandwidth_bytes_per_s
        assert device_memory_bytes(gcd) < 70 * GIB <= device_memory_bytes(board)
    h100 = resolve_accelerator("h100")
    assert runtime_device(h100) is h100


def test_vllm_on_an_mi250_takes_the_budgets_of_its_64_gib_gcd_not_of_the_board() -> None:
    small = vllm_batch_defaults(dep("l40s"), "serve")
    assert vllm_batch_defaults(dep("mi250"), "serve") == small
    assert vllm_batch_defaults(dep("mi250x"), "offline") == vllm_batch_defaults(dep("l40s"),
                                                                                "offline")
    assert vllm_batch_defaults(dep("mi300x"), "serve") != small  # one 192 GB device


def test_an_mi250s_pool_adds_the_pools_its_two_gcds_size_at_tensor_parallel_2() -> None:
    """1 x MI250 is vLLM at --tensor-parallel-size 2 over two 63 GiB GCDs: each profiles,
    captures graphs and keeps its sampler state; the board's pool is the two added."""
    board = kv_pool(dep("mi250"), EngineSettings(max_model_len=8192))
    gcds = Deployment.build(resolve_model("llama-3.1-8b"), runtime_device(
        resolve_accelerator("mi250")), None, None, 2)
    gcd = kv_pool(gcds, EngineSettings(max_model_len=8192))
    assert board.runtime_devices == 2
    assert board.blocks == gcd.blocks and board.max_num_seqs == gcd.max_num_seqs
    assert board.pool_bytes == pytest.approx(2 * gcd.pool_bytes)
    assert board.total_bytes == pytest.approx(2 * gcd.total_bytes)
    assert board.cuda_graph_bytes == pytest.approx(2 * gcd.cuda_graph_bytes)
    # the --kv-cache-memory-bytes vLLM advises is per device: a GCD's
    assert vllm_pool_advice(dep("mi250"), board, EngineSettings(max_model_len=8192)) == \
        pytest.approx(vllm_pool_advice(gcds, gcd, EngineSettings(max_model_len=8192)))


def test_the_mi250_fit_says_vllm_runs_its_gcds_at_tensor_parallel_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "llama-3.1-8b", "--gpu", "mi250", "--max-model-len", "8k"]) == 0
    out = capsys.readouterr().out
    assert "vLLM runs each mi250 card's 2 dies as a GPU of its own" in out
    assert "--tensor-parallel-size 2 for 1 x mi250" in out


def test_vllm_on_a_tpu_takes_a_small_gpus_budgets_whatever_its_memory() -> None:
    """vLLM cannot query a TPU's memory (NotImplementedError, taken as 0 bytes), and its
    per-chip TPU rows compare 'V5P' with the 'TPU V5P' the platform reports: a 95 GB v5p gets
    the 256 seats and 2,048 tokens of a card under 70 GiB, not an H100's."""
    v5p = dep("tpu-v5p")
    assert device_memory_bytes(v5p.accelerator) >= 70 * GIB
    assert vllm_batch_defaults(v5p, "serve") == vllm_batch_defaults(dep("l40s"), "serve")
    assert vllm_batch_defaults(v5p, "serve") != vllm_batch_defaults(dep("h100"), "serve")
    pool = kv_pool(v5p, EngineSettings(max_model_len=8192))
    assert pool.max_num_seqs == vllm_batch_defaults(dep("l40s"), "serve")["max_num_seqs"]


def test_the_tpu_fit_says_its_memory_rules_are_the_gpus_and_its_budgets_a_small_gpus(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "llama-3.1-8b", "--gpu", "tpu-v6e", "--max-model-len", "8k"]) == 0
    out = capsys.readouterr().out
    assert "sized with the CUDA accounting" in out
    assert "vLLM cannot query a TPU's memory, so it takes a small GPU's 256 seats" in out


def test_v0_chunks_long_prompts_by_512_tokens_before_0_6_5_and_2048_from_it() -> None:
    """V0's SchedulerConfig under chunked prefill (on past 32K of context): 512 tokens in
    0.6.0-0.6.4 ('the best balance between ITL and TTFT on A100'), 2,048 from 0.6.5."""
    tokens = {v: kv_pool(dep("h100"), EngineSettings(max_model_len=65536, engine_version=v))
              .profile_tokens for v in ("0.6.4", "0.6.4.post1", "0.6.5", "0.7.3")}
    assert tokens == {"0.6.4": 512, "0.6.4.post1": 512, "0.6.5": 2048, "0.7.3": 2048}
    early = kv_pool(dep("h100"), EngineSettings(max_model_len=65536, engine_version="0.6.4"))
    later = kv_pool(dep("h100"), EngineSettings(max_model_len=65536, engine_version="0.6.5"))
    assert 4 * early.forward_bytes == pytest.approx(later.forward_bytes)
    # a prompt that fits unchunked profiles as before: max(max_model_len, 2048)
    short = EngineSettings(max_model_len=8192, engine_version="0.6.4")
    assert kv_pool(dep("h100"), short).profile_tokens == 8192


@pytest.mark.parametrize("version, why", [
    ("0.25 V0", "V0 engine was removed in v0.11.0"),
    ("0.11.0 V0", "V0 engine was removed in v0.11.0"),
    ("0.6 V1", "V1 became the default engine in v0.8"),
    ("0.7.3 V1", "V1 became the default engine in v0.8"),
])
def test_an_engine_the_release_does_not_have_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], version: str, why: str) -> None:
    code = main(["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8k",
                 "--engine-version", version])
    err = capsys.readouterr().err
    assert code == 2 and why in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("version", ["0.10.2 V0", "0.8 V1", "0.8.5 V0", "0.6"])
def test_an_engine_the_release_has_is_accepted(
        capsys: pytest.CaptureFixture[str], version: str) -> None:
    assert main(["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8k",
                 "--engine-version", version]) == 0
    capsys.readouterr()


def test_a_token_budget_under_the_default_seats_lowers_them_from_0_10_1() -> None:
    """vLLM 0.10.1+ sets an unset max_num_seqs to min(default, max_num_batched_tokens): an
    H100 at --max-num-batched-tokens 512 runs 512 seats, not its default 1,024."""
    default = vllm_batch_defaults(dep("h100"), "serve")["max_num_seqs"]
    assert default > 512
    for version in ("0.10.1", None):
        pool = kv_pool(dep("h100"), EngineSettings(max_num_batched_tokens=512,
                                                   engine_version=version))
        assert (pool.max_num_seqs, pool.profile_tokens) == (512, 512)
    with pytest.raises(InputError, match=r"v0\.10\.1 and later lower it"):
        kv_pool(dep("h100"), EngineSettings(max_num_batched_tokens=512, engine_version="0.10.0"))
    # a budget above the default leaves the default
    assert kv_pool(dep("h100"), EngineSettings(max_num_batched_tokens=4096)).max_num_seqs \
        == default


def test_seats_and_a_budget_both_given_must_agree() -> None:
    with pytest.raises(InputError, match=r"--max-num-batched-tokens \(512\) must be at least "
                                         r"--max-num-seqs \(1,024\)"):
        kv_pool(dep("h100"), EngineSettings(max_num_seqs=1024, max_num_batched_tokens=512))
    # seats above the default budget vLLM does not raise: an A100's 2,048 tokens
    with pytest.raises(InputError, match="default max_num_batched_tokens"):
        kv_pool(dep("a100"), EngineSettings(max_num_seqs=4096))


def test_fit_with_a_small_token_budget_runs_and_explains_the_lowered_seats(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-num-batched-tokens", "512"]
    assert main(args) == 0
    assert "max_num_seqs 512" in capsys.readouterr().out
    assert main([*args, "--explain"]) == 0
    explained = capsys.readouterr().out
    assert "max_num_seqs = 512" in explained and "lowered to --max-num-batched-tokens" in explained
    assert main([*args, "--max-num-seqs", "1024"]) == 2
    assert "vLLM refuses to start" in capsys.readouterr().err


def test_plan_launches_vllm_on_an_mi250_at_tensor_parallel_2_a_board() -> None:
    code, out = plan_out(*MI250)
    assert code == 0
    assert "1 replica of 1 x mi250" in out
    assert "vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2 " in out


def test_plans_mi250_lines_count_the_ranks_as_its_vllm_command_does() -> None:
    """The winner's line and its command count the same thing: vLLM's ranks, the dies (an
    MI250's two GCDs a card), said so; every runner-up, Pareto point and cross-node caution
    counts them alike (it had said TP1 beside --tensor-parallel-size 2)."""
    import re

    dies = resolve_accelerator("mi250").runtime_devices
    code, out = plan_out(*MI250)
    assert code == 0
    winner = next(line for line in out.splitlines() if line.startswith("winner:"))
    tp = int(re.search(r"--tensor-parallel-size (\d+)", out).group(1))
    assert re.search(r"\(TP(\d+)", winner).group(1) == str(tp)
    labels = re.findall(r"(\d+) x mi250 \(TP(\d+)(?: × PP(\d+))? over (\d+) dies", out)
    assert len(labels) > 3 and winner.count(" dies") == 1
    for cards, tp_size, pp, counted in labels:
        assert int(counted) == int(cards) * dies == int(tp_size) * int(pp or 1)
    points = re.findall(r"mi250 TP(\d+) over (\d+) dies", out)
    assert points and all(a == b for a, b in points)
    spans = re.findall(r"\(TP(\d+) over \d+ dies[^)]*\): TP(\d+) spans", out)
    assert spans and all(a == b for a, b in spans)


def test_plans_closest_miss_on_mi250s_counts_the_dies_too(
        capsys: pytest.CaptureFixture[str]) -> None:
    import re

    dies = resolve_accelerator("mi250").runtime_devices
    assert main(["plan", "llama-3.1-70b", "--rate", "50", "--slo-ttft-ms", "100",
                 "--slo-tpot-ms", "5", "--gpus", "mi250", "--price", "mi250=2",
                 "--max-gpus", "4"]) == 1
    closest = re.search(r"closest: (\d+) x mi250 \(TP(\d+) over (\d+) dies\)",
                        capsys.readouterr().out)
    assert closest is not None
    cards, tp, counted = map(int, closest.groups())
    assert counted == cards * dies == tp


def test_a_card_vllm_runs_whole_keeps_its_label_and_command_alike(
        capsys: pytest.CaptureFixture[str]) -> None:
    """On an H100 a rank is the card: the label's TP is the command's, with no dies named."""
    import re

    assert main(["plan", "llama-3.1-8b", "--rate", "1", "--input-len", "1000", "--output-len",
                 "100", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100", "--gpus", "h100",
                 "--max-gpus", "2"]) == 0
    out = capsys.readouterr().out
    winner = next(line for line in out.splitlines() if line.startswith("winner:"))
    tp = re.search(r"--tensor-parallel-size (\d+)", out).group(1)
    assert re.search(r"(\d+) x h100-sxm \(TP(\d+),", winner).groups() == (tp, tp)
    assert " dies" not in out


@pytest.mark.parametrize("devices", [0, 1.5, 9, "2"])
def test_a_record_with_an_impossible_device_count_is_refused(devices: object) -> None:
    from ridgeline.hardware import Accelerator

    record = {"id": "two-die", "memory_bytes": 64 * GIB, "memory_bandwidth_bytes_per_s": 2e12,
              "peak_flops": {"bf16": 3e14}, "runtime_devices": devices}
    with pytest.raises(InputError, match="runtime_devices"):
        Accelerator.from_record(record, "test")
    assert Accelerator.from_record({**record, "runtime_devices": 2}, "test").runtime_devices == 2


@pytest.mark.parametrize(("model", "boards"), [("falcon-7b-instruct", 1), ("phi-4", 2)])
def test_vllm_on_an_mi250_refuses_a_model_its_gcds_tensor_parallel_size_does_not_split(
        model: str, boards: int) -> None:
    """vLLM runs each GCD as a rank, so the split an H100 at twice the GPUs refuses is refused
    on the MI250 too (falcon-7b's 71 heads at TP2, phi-4's 10 KV heads at TP4)."""
    spec = resolve_model(model)
    with pytest.raises(InputError) as on_h100:
        Deployment.build(spec, resolve_accelerator("h100"), None, None, 2 * boards, 1, "vllm")
    with pytest.raises(InputError) as on_mi250:
        Deployment.build(spec, resolve_accelerator("mi250"), None, None, boards, 1, "vllm")
    assert f"--tensor-parallel-size {2 * boards}" in str(on_mi250.value)
    assert str(on_h100.value) in str(on_mi250.value)
    # the same model splits over the part's devices under an engine that sees one board
    Deployment.build(spec, resolve_accelerator("mi250"), None, None, boards, 1, "llama.cpp-rocm")


def test_sglang_on_a_part_of_several_runtime_devices_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The catalog's MI250 (CDNA2) is refused for its family, SGLang's ROCm kernels being
    built for gfx942 and gfx950 only; a record of two devices that names no family, for its
    two GCDs."""
    from tests.conftest import run_cli

    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "mi250", "--engine",
                             "sglang", "--max-model-len", "8192")
    assert code == 2 and not out
    assert err.count("\n") == 1 and "gfx942 and gfx950" in err and "--engine vllm" in err
    code, out, err = run_cli(capsys, "hardware", "mi250", "--json")
    record = json.loads(out)
    record.pop("family")
    record["id"] = "my-mi250"
    card = tmp_path / "mi250.json"
    card.write_text(json.dumps(record))
    code, out, err = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu-file", str(card), "--engine",
                             "sglang", "--max-model-len", "8192")
    assert code == 2 and not out
    assert err.count("\n") == 1 and "2 GCDs" in err and "--engine vllm" in err


def test_plans_closest_miss_names_the_split_when_no_layout_launches(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import run_cli

    _code, out, _ = run_cli(capsys, "plan", "falcon-7b-instruct", "--gpus", "mi250", "--price",
                           "mi250=1", "--rate", "1", "--slo-ttft-ms", "2000",
                           "--slo-tpot-ms", "100")
    assert "NO DEPLOYMENT" in out and "does not fit" not in out
    assert "launches falcon-7b under vllm" in out and "71 attention heads" in out


def test_the_arithmetic_commands_take_an_mi250_as_one_board_whatever_the_heads(
        capsys: pytest.CaptureFixture[str]) -> None:
    """No engine runs in `roofline` or `kv`: the GCD split that vLLM would refuse is the
    engine's, so the arithmetic of one board still answers."""
    from tests.conftest import run_cli

    code, out, _ = run_cli(capsys, "roofline", "--model", "falcon-7b-instruct", "--gpu", "mi250")
    assert code == 0 and "ridge at 111" in out


def test_fits_rows_say_where_a_cards_figures_add_its_dies(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The MI250's rows add its two GCDs' figures (vLLM sizes a pool on each), so they say so;
    a one-device card's rows stay per GPU."""
    from tests.conftest import run_cli

    _, mi250, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "mi250", "--max-model-len",
                          "8192")
    _, h100, _ = run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len",
                         "8192")
    rows = [line for line in mi250.splitlines() if "per GPU" in line]
    assert rows and all("per GPU (2 dies added)" in line for line in rows)
    assert "dies added" not in h100 and "memory per GPU" in h100
    # --explain's steps, and a headline that does not fit, say it alike
    for model, argv in (("llama-3.1-8b", ("--explain",)), ("llama-3.1-70b", ())):
        _, text, _ = run_cli(capsys, "fit", model, "--gpu", "mi250", "--max-model-len", "8192",
                             *argv)
        rows = [line for line in text.splitlines() if "per GPU" in line]
        assert rows and all(line.count("per GPU") == line.count("per GPU (2 dies added)")
                            for line in rows)


def test_fits_json_and_advice_say_what_a_gpu_and_the_flag_count_on_an_mi250x(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A GPU is a card (--num-gpus counts MI250X cards), its dies' figures added; vLLM's
    --kv-cache-memory-bytes advice is one die's, as the flag is per device."""
    import json

    from tests.conftest import run_cli

    args = ("fit", "llama-3.1-70b", "--gpu", "mi250x", "--num-gpus", "2", "--max-model-len",
            "8192")
    data = json.loads(run_cli(capsys, *args, "--json")[1])
    board = kv_pool(dep("mi250x", 2, "llama-3.1-70b"), EngineSettings(max_model_len=8192))
    dies = resolve_accelerator("mi250x").runtime_devices
    assert data["runtime_devices_per_gpu"] == dies == 2 and data["num_gpus"] == 2
    assert data["memory_bytes_per_gpu"] == board.total_bytes
    advice = vllm_pool_advice(dep("mi250x", 2, "llama-3.1-70b"), board,
                              EngineSettings(max_model_len=8192))
    assert advice is not None
    assert data["vllm_advice"]["kv_cache_memory_bytes_device"] == int(advice[1])
    assert advice[1] < board.total_bytes / dies
    text = run_cli(capsys, *args)[1]
    (line,) = [x for x in text.splitlines() if x.startswith("vLLM's start-up advice")]
    assert f"({advice[1] / GIB:,.2f} GiB) " in line and "fills the die" in line
    h100 = json.loads(run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--json")[1])
    assert h100["runtime_devices_per_gpu"] == 1
    assert "fills the card" in run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", "h100")[1]


def test_vllms_start_up_advice_says_one_figure_once_where_its_two_agree(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At 0.34's gpu_memory_utilization 1.0 the memory requested is the card, so vLLM's two
    --kv-cache-memory-bytes figures are one: said once. At 0.9 they differ: both said."""
    from tests.conftest import run_cli

    args = ("fit", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192")
    for extra, same in (((), True), (("--gpu-memory-utilization", "0.9"), False)):
        advice = json.loads(run_cli(capsys, *args, *extra, "--json")[1])["vllm_advice"]
        asked, card = advice["kv_cache_memory_bytes_requested"], \
            advice["kv_cache_memory_bytes_device"]
        assert (asked == card) is same
        (line,) = [x for x in run_cli(capsys, *args, *extra)[1].splitlines()
                   if x.startswith("vLLM's start-up advice")]
        assert str(asked) in line and str(card) in line and "fills the card" in line
        assert line.count(str(card)) == 1
        assert ("fits the memory requested and fills the card" in line) is same


def test_cpu_offload_on_an_mi250x_is_the_flags_gib_on_each_die(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's --cpu-offload-gb is each worker's, a die's: a card gives up the flag's GiB
    twice, which the JSON and the text count per GPU, the dies added."""
    import json

    from tests.conftest import run_cli

    args = ("fit", "llama-3.1-70b", "--gpu", "mi250x", "--num-gpus", "2", "--max-model-len",
            "8192")
    plain = json.loads(run_cli(capsys, *args, "--json")[1])
    off = json.loads(run_cli(capsys, *args, "--cpu-offload-gb", "8", "--json")[1])
    dies = off["runtime_devices_per_gpu"]
    assert off["cpu_offload"]["asked_bytes_per_gpu"] == dies * 8 * GIB
    # each die moves whole tensors until its own count reaches 8 GiB: a little past it
    moved = off["cpu_offload"]["bytes_per_gpu"]
    assert dies * 8 * GIB <= moved < dies * 9 * GIB
    assert plain["taken_bytes_per_gpu"]["weights"] - off["taken_bytes_per_gpu"]["weights"] \
        == pytest.approx(moved)
    text = run_cli(capsys, *args, "--cpu-offload-gb", "8")[1]
    assert f"{moved / GIB:.2f} GiB a GPU (2 dies added) of weights in host memory" in text


def test_plan_says_a_gpu_is_an_mi250x_card_with_its_dies(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import functools
    import json

    import ridgeline.plan as planning
    from tests.conftest import run_cli

    args = ("plan", "llama-3.1-8b", "--rate", "1", "--input-len", "1000", "--output-len",
            "100", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "100")
    data = json.loads(plan_out(*MI250X_H100)[1])
    assert data["runtime_devices_per_gpu"] == {"mi250x": 2}
    # the cards searched and what a GPU of each is, before any check (after the module's
    # shared plan, which other tests read simulated)
    monkeypatch.setattr(planning, "plan", functools.partial(planning.plan, verify=0))
    # one card alone, up to 2 of it: what a GPU is does not hang on the count
    assert json.loads(run_cli(capsys, *args, "--gpus", "h100", "--price", "h100=3",
                              "--max-gpus", "2", "--json")[1])["runtime_devices_per_gpu"] == {}
    text = run_cli(capsys, *args, "--gpus", "mi250x", "--price", "mi250x=2", "--max-gpus",
                   "2")[1]
    assert "a GPU is one mi250x card, its 2 dies added" in text


def test_fits_gpu_levers_on_an_mi250_name_the_ranks_vllm_launches_over_its_dies(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A lever's GPUs are cards, as --num-gpus counts them; on an MI250 vLLM's tensor
    parallelism counts its dies, which the lever names as plan does (parallel_words): two
    cards doubled to four run at --tensor-parallel-size 8, over 8 dies."""
    import json

    from ridgeline.candidate import parallel_words
    from tests.conftest import run_cli

    args = ("fit", "llama-3.1-70b", "--max-model-len", "131072", "--target-concurrency", "64",
            "--json")
    dies = resolve_accelerator("mi250").runtime_devices
    data = json.loads(run_cli(capsys, *args, "--gpu", "mi250", "--num-gpus", "2")[1])
    names = [lever["name"] for lever in data["levers"]]
    assert f"4 GPUs ({parallel_words(4, 1, dies)})" in names
    assert f"TP{4 * dies} over {4 * dies} dies" in parallel_words(4, 1, dies)
    text = run_cli(capsys, *args[:-1], "--gpu", "mi250", "--num-gpus", "2")[1]
    needed = text.split("none alone holds 64; ")[1].split(" hold ")[0]
    cards = int(needed.split()[0])
    assert f"over {cards * dies} dies)" in needed
    h100 = json.loads(run_cli(capsys, *args, "--gpu", "h100", "--num-gpus", "2")[1])
    assert "4 GPUs (tensor parallel)" in [lever["name"] for lever in h100["levers"]]


def test_fits_dcp_and_dp_levers_on_an_mi250x_give_vllms_ranks_over_its_dies(
        capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM runs 4 x MI250X at --tensor-parallel-size 8, a rank a die: -dcp deals the cache
    over all 8 (the lever is fit re-run with that -dcp), and data-parallel attention's rank is
    a card, two dies at -tp 2; each lever holds what fit gives for its layout."""
    import json

    from tests.conftest import run_cli

    dies = resolve_accelerator("mi250x").runtime_devices
    args = ("fit", "deepseek-v3", "--gpu", "mi250x", "--num-gpus", "4", "--weights",
            "awq-int4", "--max-model-len", "131072", "--target-concurrency", "64", "--json")
    levers = {lv["name"].split(" (")[0]: lv for lv in json.loads(run_cli(capsys, *args)[1])
              ["levers"]}
    (dcp,) = [name for name in levers if name.startswith("-dcp ")]
    ranks = int(dcp.split()[1])
    assert ranks == 4 * dies and f"over {ranks} dies" in levers[dcp]["name"]
    dealt = json.loads(run_cli(capsys, *args, "-dcp", str(ranks))[1])
    assert dealt["decode_context_parallel_size"] == ranks
    assert levers[dcp]["conversations"] == dealt["conversations"]
    half = json.loads(run_cli(capsys, *args, "-dcp", str(ranks // dies))[1])
    assert dealt["conversations"] > half["conversations"]  # the dies' half of the ranks
    dp = levers["DP attention"]
    assert f", over {4 * dies} dies: vLLM's -tp {dies} -dp 4" in dp["name"]
    # the lever's flags are fit's own, a card a rank: fit re-run with them holds as many
    flags = dp["name"].split("(", 1)[1].split(",")[0].split()
    assert flags == ["--num-gpus", "1", "-dp", "4", "--enable-expert-parallel"]
    ranked = json.loads(run_cli(capsys, *args[:4], *args[6:], *flags)[1])
    assert dp["conversations"] == ranked["conversations"]
    # under data-parallel attention, the rank levers count each rank's dies too
    names = [lv["name"] for lv in ranked["levers"]]
    assert f"8 GPUs (attention DP8 × TP{dies} over {8 * dies} dies)" in names


def test_plans_rows_each_say_their_cards_devices_as_fit_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """plan's top level maps the searched cards run as several devices by name; each row,
    one card, carries the int fit's report does."""
    import json

    from tests.conftest import run_cli

    data = json.loads(plan_out(*MI250X_H100)[1])
    rows = [row for row in (data["winner"], *data["runners_up"]) if row]
    assert len({row["accelerator"] for row in rows}) == 2  # both cards' rows
    for row in rows:
        assert row["runtime_devices_per_gpu"] == data["runtime_devices_per_gpu"].get(
            row["accelerator"], 1)
        fit = json.loads(run_cli(capsys, "fit", "llama-3.1-8b", "--gpu", row["accelerator"],
                                 "--json")[1])
        assert row["runtime_devices_per_gpu"] == fit["runtime_devices_per_gpu"]
