"""What a call may cost at most, as the spend check counts it: the output the provider really asks for (a thinking
budget raises it), the images and thinking blocks of the prompt, and the tools a group chat's cron job is given."""

from __future__ import annotations

import json

import pytest

from tests.conftest import anthropic_env, invoke, write_config
from tests.llm_server import Reply

MODEL = "claude-test"
OUT_ONLY = {"anthropic": {"prices": {MODEL: {"input": 0.0, "output": 100.0}}}}  # $100/M out, the prompt free
IN_ONLY = {"anthropic": {"prices": {MODEL: {"input": 1.0, "output": 0.0}}}}  # $1/M in: a token is a micro-dollar


def ledger_lines(home) -> list[dict]:
    path = home / "spend" / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_thinking_call_near_the_cap_is_refused_on_the_output_it_really_asks_for(llm, isolated_home):
    """maxTokens 1,000 with a thinking budget of 8,000: the provider asks for 9,024 tokens out ($0.90 at $100/M),
    so a $0.50 daily cap refuses the call before it is made; reserving maxTokens alone ($0.10) would let it through
    and the bill could reach $0.90."""
    write_config(isolated_home, {"agents": {"defaults": {"maxTokens": 1000, "thinkingBudget": 8000}},
                                 "budget": {"daily": 0.5}, "providers": OUT_ONLY})
    llm.default_reply = Reply(text="thought hard", output_tokens=9000)
    ran = invoke("agent", "-m", "think it over", env=anthropic_env(llm))
    assert ran.returncode == 1
    assert llm.requests == []
    assert "The daily budget ($0.5000) would be crossed" in ran.stdout + ran.stderr


def test_a_thinking_call_reserves_the_max_tokens_the_provider_sent(llm, isolated_home):
    write_config(isolated_home, {"agents": {"defaults": {"maxTokens": 1000, "thinkingBudget": 8000}},
                                 "budget": {"daily": 5.0}, "providers": OUT_ONLY})
    llm.default_reply = Reply(text="thought hard", output_tokens=10)
    ran = invoke("agent", "-m", "think it over", env=anthropic_env(llm))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    sent = llm.requests[0].body["max_tokens"]
    assert sent == 9024
    reserve = next(line for line in ledger_lines(isolated_home) if line["op"] == "reserve")
    assert reserve["usd"] == pytest.approx(sent * 100e-6)
