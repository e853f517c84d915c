"""Each speed metric as the division of step times it is (metric_divisions.py)."""

from __future__ import annotations

from ridgeline.metric_divisions import prompts_per_step, step_token_budget


def test_a_prefill_step_takes_8_prompts_of_1000_tokens_in_vllms_8192_token_budget() -> None:
    assert step_token_budget("vllm") == 8192
    assert prompts_per_step("vllm", 1000) == 8


def test_a_prompt_longer_than_the_budget_still_takes_a_step_of_its_own() -> None:
    assert prompts_per_step("vllm", 10_000) == 1
