"""A real llama-server line pastes into fit, decode, prefill and simulate: -c over -np (decode
and prefill: -np's slots as the batch, -c ÷ -np as the context), -ctk X -ctv X,
--kv-unified, a bare -fa, its harmless flags noted and dropped, and -hf/-m named as the
model's (llamacpp_launch.py, data/launch_flags.json)."""

from __future__ import annotations

import re

import pytest

from ridgeline.catalog import resolve_model
from ridgeline.context_length import served_positions
from ridgeline.datafiles import engine_defaults
from ridgeline.llamacpp_pool import per_slot_context
from tests.conftest import refused_line, run_cli, same_answer

LLAMA = ("fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llama.cpp-cuda",
         "--weights", "q4_k_m")
GPT_OSS = ("fit", "gpt-oss-20b", "--gpu", "l40s", "--engine", "llama.cpp-cuda")


def _start_line(out: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith("start it with:"))
    return line.removeprefix("start it with: llama-server ").split(" (")[0].split()


def _figure(words: list[str], flag: str) -> int:
    return int(words[words.index(flag) + 1])


def test_fits_start_line_pasted_back_gives_the_same_report(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Where every slot holds a conversation, -c is -np × the length asked, and the line
    pasted back prices the same deployment: the same report, word for word."""
    code, asked, err = run_cli(capsys, *LLAMA, "--max-model-len", "16000")
    assert code == 0, err
    start = _start_line(asked)
    assert _figure(start, "-c") == 16000 * _figure(start, "-np")
    code, pasted, err = run_cli(capsys, *LLAMA, *start)
    assert code == 0 and pasted == asked, err


def test_a_start_line_with_idle_slots_pastes_back_as_itself(
        capsys: pytest.CaptureFixture[str]) -> None:
    """3 conversations of 32,000 tokens fit in 96,000 cells, started with -np 3: pasted back,
    the same cells and slots, read as -np conversations of -c ÷ -np tokens, start the same
    line, and the memory table is the same."""
    code, asked, _ = run_cli(capsys, *LLAMA, "--max-model-len", "32000", "--flash-attn", "off")
    start = _start_line(asked)
    cells, slots = _figure(start, "-c"), _figure(start, "-np")
    code, pasted, err = run_cli(capsys, *LLAMA, *start)
    assert code == 0, err
    assert _start_line(pasted) == start
    length = per_slot_context(cells, slots)
    assert f"{slots} conversations of {length:,} tokens" in pasted.splitlines()[0]
    table = [line for line in asked.splitlines() if line.startswith(("−", "=", "memory"))]
    assert table and all(line in pasted.splitlines() for line in table)


def test_a_start_line_where_fewer_than_the_default_slots_fit_starts_that_many(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Where -c holds fewer conversations of --max-model-len than llama-server's default 4
    slots (and -np is not given), the start line gives -np N, N the conversations that fit,
    and -c N × the length, saying why: the default slots would admit one more as long, which
    fills the cells and fails the requests running. It reads back as itself (no read-back
    line), and the JSON carries the same -np; -np 4 given keeps 4."""
    import json

    flags = ("--max-model-len", "32000", "--flash-attn", "off")
    code, out, err = run_cli(capsys, *LLAMA, *flags)
    assert code == 0, err
    held = int(re.search(r"min\((\d+) conversations", out).group(1))  # type: ignore[union-attr]
    default = int(engine_defaults("llama.cpp-cuda")["n_parallel"])
    assert 0 < held < default  # the case the rule is for
    start = _start_line(out)
    assert _figure(start, "-np") == held and _figure(start, "-c") == held * 32000
    line = next(line for line in out.splitlines() if line.startswith("start it with:"))
    assert f"llama-server's default {default} slots would admit one more as long" in line
    assert "KV cache is full" in line and "pasted back" not in out
    report = json.loads(run_cli(capsys, *LLAMA, *flags, "--json")[1])
    assert report["llama_server_np"] == held and report["llama_server_c"] == held * 32000
    code, given, err = run_cli(capsys, *LLAMA, *flags, "-np", str(default))
    assert code == 0 and _figure(_start_line(given), "-np") == default, err


def test_a_start_line_with_idle_slots_says_how_it_reads_back(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Under the -c 96000 -np 4 line (-np 4 given) where 3 conversations of 32,000 fit: a
    line saying the paste reads 4 of 24,000 (-c ÷ -np), that llama-server (--kv-unified)
    serves the 3 as they are, and the flags that price the run again, which give the same
    report."""
    code, asked, err = run_cli(capsys, *LLAMA, "--max-model-len", "32000", "--flash-attn", "off",
                               "-np", "4")
    assert code == 0, err
    start = _start_line(asked)
    cells, slots = _figure(start, "-c"), _figure(start, "-np")
    held = int(re.search(r"min\((\d+) conversations", asked).group(1))  # type: ignore[union-attr]
    assert held < slots  # idle slots: the case the note is for
    lines = asked.splitlines()
    note = lines[lines.index(next(line for line in lines if line.startswith("start it")))+ 1]
    assert note.startswith(f"pasted back, -c {cells} -np {slots} reads as {slots} "
                           f"conversations of {per_slot_context(cells, slots):,} tokens")
    assert "--kv-unified" in note and "KV cache is full" in note
    again = note.split("give ")[-1].removesuffix(" in place of -c").split()
    assert again == ["--max-model-len", "32000", "-np", str(slots)]
    code, priced, err = run_cli(capsys, *LLAMA, *again, "--flash-attn", "off")
    assert code == 0 and priced == asked, err


def test_a_start_line_whose_slots_all_hold_one_has_no_read_back_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *LLAMA, "--max-model-len", "16000")
    assert code == 0 and "pasted back" not in out, err


DECODE = ("decode", *LLAMA[1:])


def test_decode_reads_a_llama_server_line_as_its_slots_all_busy(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-c 96000 -np 4 with no --batch or --context: 4 sequences of 24,000 tokens, each in a
    slot, as fit reads the line; each reading named in the note."""
    line = ("-c", "96000", "-np", "4", "--kv-unified", "-fa", "off", "--json")
    code, out, err = run_cli(capsys, *DECODE, *line)
    assert code == 0, err
    spelled = ("--max-model-len", "24000", "-np", "4", "--batch", "4", "--context", "24000",
               "-fa", "off", "--json")
    assert same_answer(out, run_cli(capsys, *DECODE, *spelled)[1])
    assert "batch 4: a sequence in each of -np 4's slots" in err
    assert "--context 24,000: each slot's conversation, -c 96000 ÷ -np 4" in err
    fit = run_cli(capsys, *LLAMA, *line)[1]
    assert '"conversations": 4' in fit.replace("\n", "")


def test_np_caps_the_sequences_decode_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """-np 4: at most 4 run, though the pool holds more; a batch past the slots gets no
    expectation. -np 8 runs the 6."""
    import json

    base = (*DECODE, "--batch", "1,6", "--context", "2000", "--json")
    code, out, err = run_cli(capsys, *base, "-np", "4")
    assert code == 0, err
    capped = json.loads(out)
    assert capped["engine_max_batch"][0]["engine_max_batch"] == 4
    assert capped["engine_max_batch"][0]["conversations"] > 4
    text = run_cli(capsys, *base[:-1], "-np", "4")[1]
    assert "runs ≤ 4" in text and "capped by -np: its KV pool holds more" in text
    raised = json.loads(run_cli(capsys, *base, "-np", "8")[1])
    assert [p["engine_runs"] for p in raised["points"]] == [True, True]


def test_decode_caps_a_batch_at_llama_servers_default_slots_as_vllms_at_max_num_seqs(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without -np, llama-server runs its default 4 slots (engines.json n_parallel), so a
    batch past them reads "runs ≤ 4" and gets no expectation, as a vLLM batch past
    max_num_seqs does; the line names the default and --parallel N, which raises it up to
    the slots the pool holds (the count without the cap), and --parallel 6 prices the 6."""
    import json

    default = int(engine_defaults("llama.cpp-cuda")["n_parallel"])
    base = (*DECODE, "--batch", f"1,{default + 2}", "--context", "2000")
    code, text, err = run_cli(capsys, *base)
    assert code == 0, err
    report = json.loads(run_cli(capsys, *base, "--json")[1])
    (line,) = report["engine_max_batch"]
    assert line["engine_max_batch"] == line["max_num_seqs"] == default
    holds = line["conversations"]
    assert holds > default + 2
    assert [p["engine_runs"] for p in report["points"]] == [True, False]
    assert report["points"][1]["expected_none_code"] == "over_engine_pool"
    assert f"runs ≤ {default}" in text
    assert (f"capped by llama-server's default {default} slots (-np): its KV pool holds "
            f"{holds:,}, a slot each (--parallel N raises it, up to {holds:,})") in text
    raised = json.loads(run_cli(capsys, *base, "--parallel", str(default + 2), "--json")[1])
    assert [p["engine_runs"] for p in raised["points"]] == [True, True]
    prefill = json.loads(run_cli(capsys, "prefill", *LLAMA[1:], "--prompt-len", "2000",
                                 "--batch", str(default + 2), "--json")[1])
    assert prefill["engine_max_batch"] == default and not prefill["engine_runs"]


def test_prefill_reads_np_as_the_prompts_its_slots_take(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ("prefill", *LLAMA[1:], "--prompt-len", "8000", "--json")
    code, out, err = run_cli(capsys, *base, "-c", "96000", "-np", "4")
    assert code == 0, err
    assert same_answer(out, run_cli(capsys, *base, "--max-model-len", "24000", "-np", "4",
                                    "--batch", "4")[1])
    assert "batch 4: a prompt in each of -np 4's slots" in err
    text = run_cli(capsys, *base[:-1], "-np", "2", "--batch", "4")[1]
    assert "its -np 2 runs 2 prompts at once, not 4" in text


@pytest.mark.parametrize("flag", ["-c", "--ctx-size"])
def test_c_is_the_cells_the_slots_share(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """-c 16384 with no -np: the build's default slots (4), each 4,096 tokens."""
    slots = int(engine_defaults("llama.cpp-cuda")["n_parallel"])
    _, per_slot, _ = run_cli(capsys, *LLAMA, "--max-model-len", str(16384 // slots), "--json")
    code, out, err = run_cli(capsys, *LLAMA, flag, "16384", "--json")
    assert code == 0 and out == per_slot, err
    _, two, _ = run_cli(capsys, *LLAMA, "--max-model-len", "8192", "-np", "2", "--json")
    assert run_cli(capsys, *LLAMA, flag, "16384", "-np", "2", "--kv-unified", "--json")[1] == two


def test_c_0_is_the_trained_context_over_the_slots(capsys: pytest.CaptureFixture[str]) -> None:
    """The gpt-oss guide's -hf ggml-org/gpt-oss-20b-GGUF --ctx-size 0 --jinja -ub 2048 -b 2048:
    -c 0 is n_ctx_train, shared by the default slots."""
    trained = served_positions(resolve_model("gpt-oss-20b"), "llama.cpp-cuda")
    assert trained
    slots = int(engine_defaults("llama.cpp-cuda")["n_parallel"])
    tail = ("-ub", "2048", "-b", "2048", "--json")
    _, ours, _ = run_cli(capsys, *GPT_OSS, "--max-model-len", str(trained // slots), *tail)
    code, out, err = run_cli(capsys, *GPT_OSS, "-hf", "ggml-org/gpt-oss-20b-GGUF",
                             "--ctx-size", "0", "--jinja", *tail)
    assert code == 0 and same_answer(out, ours), err
    assert "-hf ggml-org/gpt-oss-20b-GGUF" in err and "--jinja" in err


def test_c_beside_max_model_len_or_under_another_engine_is_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    both = refused_line(capsys, *LLAMA, "-c", "8192", "--max-model-len", "2048")
    assert "-c 8192" in both and "--max-model-len" in both and "give one" in both
    other = refused_line(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm",
                         "-c", "8192")
    assert "llama-server" in other and "vllm has none" in other


def test_simulate_runs_the_pasted_lines_cells(capsys: pytest.CaptureFixture[str]) -> None:
    sim = ("simulate", *LLAMA[1:], "--num-requests", "8", "--rate", "2", "--json")
    _, ours, _ = run_cli(capsys, *sim, "--max-model-len", "24000", "-np", "4")
    code, out, err = run_cli(capsys, *sim, "-c", "96000", "-np", "4", "--kv-unified",
                             "-fa", "off")
    _, off, _ = run_cli(capsys, *sim, "--max-model-len", "24000", "-np", "4", "-fa", "off")
    assert code == 0 and out == off and out != ours, err


@pytest.mark.parametrize("command", ["fit", "decode"])
def test_an_equal_k_and_v_cache_type_is_the_kv_dtype(capsys: pytest.CaptureFixture[str],
                                                     command: str) -> None:
    base = (command, *GPT_OSS[1:], "--max-model-len", "4096", "--json")
    _, ours, _ = run_cli(capsys, *base, "--kv-dtype", "q8_0")
    for pair in (("-ctk", "q8_0", "-ctv", "q8_0"),
                 ("--cache-type-k", "q8_0", "--cache-type-v", "q8_0")):
        code, out, err = run_cli(capsys, *base, *pair)
        assert code == 0 and out == ours, err


def test_a_mixed_or_half_cache_type_pair_is_refused_naming_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = (*GPT_OSS, "--max-model-len", "4096")
    mixed = refused_line(capsys, *base, "-ctk", "q8_0", "-ctv", "f16")
    assert "-ctk q8_0 -ctv f16" in mixed and "K cache q8_0, V cache f16" in mixed
    half = refused_line(capsys, *base, "-ctk", "q8_0")
    assert "K cache q8_0, V cache f16" in half  # the other keeps llama.cpp's f16
    vllm = refused_line(capsys, "fit", "llama-3.1-8b", "--gpu", "h100", "-ctk", "fp8", "-ctv",
                        "fp8")
    assert "llama.cpp's" in vllm and "--kv-dtype" in vllm


def test_harmless_llama_server_flags_are_noted_and_dropped(
        capsys: pytest.CaptureFixture[str]) -> None:
    """-t 8 is llama-server's threads, not -tp 8; --temp no --tp."""
    base = (*LLAMA, "--max-model-len", "8192", "--json")
    harmless = ("-t", "8", "--temp", "0.6", "--top-p", "0.95", "--top-k", "20", "--jinja",
                "--mlock", "--no-mmap", "--cont-batching", "--reasoning-format", "none",
                "--host", "0.0.0.0", "--port", "8080", "--cache-reuse", "256", "-a", "chat",
                "--metrics", "-cram", "0")
    _, ours, _ = run_cli(capsys, *base)
    code, out, err = run_cli(capsys, *base, *harmless)
    assert code == 0 and same_answer(out, ours), err
    assert len(err.strip().splitlines()) == 1 and "-t 8" in err and "--temp 0.6" in err


@pytest.mark.parametrize("flags", [("--swa-full",), ("-md", "draft.gguf"), ("--draft-max", "16"),
                                   ("-ot", "exps=CPU"), ("-ts", "1,1")])
def test_flags_that_change_memory_or_speed_say_why(capsys: pytest.CaptureFixture[str],
                                                   flags: tuple[str, ...]) -> None:
    said = refused_line(capsys, *LLAMA, "--max-model-len", "8192", *flags)
    assert f"{flags[0]} is not modelled: " in said and "unrecognized" not in said


def test_hf_names_the_model_as_model(capsys: pytest.CaptureFixture[str]) -> None:
    said = refused_line(capsys, "fit", "--gpu", "l40s", "--engine", "llama.cpp", "-hf",
                        "ggml-org/gpt-oss-20b-GGUF", "--ctx-size", "0")
    assert "-hf ggml-org/gpt-oss-20b-GGUF" in said and "MODEL" in said
    assert "ignored explicit argument" not in said
    said = refused_line(capsys, "fit", "--gpu", "l40s", "--engine", "llama.cpp", "-m",
                        "model.gguf")
    assert "-m model.gguf" in said and "MODEL" in said


@pytest.mark.parametrize("where", ["last", "before a flag"])
def test_a_bare_fa_is_on(capsys: pytest.CaptureFixture[str], where: str) -> None:
    base = (*LLAMA, "--engine-version", "b5000", "--max-model-len", "8192", "--json")
    _, on, _ = run_cli(capsys, *base, "-fa", "on")
    _, off, _ = run_cli(capsys, *base, "-fa", "off")
    argv = (*base, "-fa") if where == "last" else (*base[:-1], "-fa", "--json")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0 and same_answer(out, on) and not same_answer(out, off), err
    assert re.search(r"bare -fa read as -fa on", err)


def test_a_bare_fa_before_model_leaves_model_as_model(capsys: pytest.CaptureFixture[str]) -> None:
    """`fit -fa llama-3.1-8b ...`: -fa on, and llama-3.1-8b the model; a mistyped value after
    -fa is refused as llama-server refuses it, not taken as MODEL."""
    rest = (*LLAMA[2:], "--max-model-len", "8192", "--json")
    _, on, _ = run_cli(capsys, "fit", "llama-3.1-8b", *rest, "-fa", "on")
    code, out, err = run_cli(capsys, "fit", "-fa", "llama-3.1-8b", *rest)
    assert code == 0 and same_answer(out, on), err
    said = refused_line(capsys, "fit", "llama-3.1-8b", "-fa", "onn", *rest)
    assert "-fa" in said and "'onn'" in said and "on, off or auto" in said
