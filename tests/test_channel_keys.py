"""One grammar for session keys and targets in every channel, one matcher for key patterns, and one state file
format that still reads what Telegram wrote before channels shared it."""

from __future__ import annotations

import json

from nanoagent import keys
from nanoagent.channels.state import StateFile
from nanoagent.paths import safe_key


def test_ids_are_strings_so_slack_threads_and_email_hashes_are_keys_like_telegram_chats():
    assert keys.parse("telegram:-1001234:77") == keys.Place("telegram", "-1001234", "77")
    assert keys.parse("slack:C0123ABC:1700000000.123456") == keys.Place("slack", "C0123ABC", "1700000000.123456")
    assert keys.parse("email:3f9a1c2e7b4d") == keys.Place("email", "3f9a1c2e7b4d")
    assert keys.make("discord", 123456789012345678, 0).key == "discord:123456789012345678"
    assert keys.make("telegram", -42, 7).key == "telegram:-42:7"


def test_a_key_that_would_not_make_a_short_file_name_is_refused():
    assert keys.parse("slack:" + "C" * 65) is None
    assert keys.parse("slack:C1:" + "9" * 65) is None
    assert keys.parse("slack:C1:2:3") is None and keys.parse("Slack:C1") is None and keys.parse("slack:") is None
    longest = keys.parse(f"{'c' * 32}:{'x' * 64}:{'y' * 64}")
    assert longest is not None and len(safe_key(longest.key) + ".jsonl") < 255


def test_a_pattern_matches_with_stars_and_everything_else_literal():
    assert keys.matches("telegram:*", "telegram:42") and keys.matches("telegram:*", "telegram:42:7")
    assert keys.matches("slack:C123*", "slack:C1234:1700.1") and not keys.matches("slack:C123*", "slack:C999")
    assert keys.matches("cli:direct", "cli:direct") and not keys.matches("cli:direct", "cli:direct2")
    assert keys.matches("*", "email:abc") and not keys.matches("telegram:4.", "telegram:42")


def test_every_matching_rule_applies_and_the_more_specific_one_wins_where_two_set_the_same_thing():
    rules = [("slack:C123*", {"cap": 2}), ("*", {"cap": 9, "model": "big"}), ("slack:*", {"cap": 5}),
             ("telegram:*", {"cap": 1})]
    merged: dict[str, object] = {}
    for setting in keys.matching("slack:C1234", rules):
        merged.update(setting)
    assert merged == {"cap": 2, "model": "big"}  # the broad rule's model still applies
    assert keys.matching("cli:direct", rules) == [{"cap": 9, "model": "big"}]
    assert keys.matching("x:y", [("x:*", 1), ("x:*", 2)]) == [1, 2]  # a tie: the one written later wins


def test_telegrams_state_file_from_before_the_upgrade_keeps_its_approvals_codes_and_unhandled_messages(tmp_path):
    path = tmp_path / "telegram.json"
    path.write_text(json.dumps({
        "version": 1, "last_update_id": 9, "open_turns": ["telegram:42"], "allowed": {"42": "Ann"},
        "inbox": [{"update_id": 9, "message": {"text": "still waiting"}}],
        "pairing": [{"code": "ABCDEFGH", "user_id": 7, "chat_id": 7, "name": "Bob", "created": 1000.0}]}))
    state = StateFile(path).read()
    assert state.allowed == {"42": "Ann"} and state.open_turns == ["telegram:42"]
    assert state.cursor == {"last_update_id": "9"}
    assert [m["message"]["text"] for m in state.inbox] == ["still waiting"]
    assert state.take([{"id": "9"}, {"id": "10"}]) == ["10"]  # fetched again after the restart: taken once
    assert state.approve("abcd-efgh", now=1001.0).user == "7" and "7" in state.allowed
    StateFile(path).update(lambda s: None)
    assert json.loads(path.read_text())["version"] == 2 and StateFile(path).read().allowed == {"42": "Ann"}


def test_a_denied_code_is_gone_and_its_holder_not_let_in(tmp_path):
    state_file = StateFile(tmp_path / "discord.json")
    code = state_file.update(lambda s: s.pair("555", "dm-1", "Eve", now=0.0))
    assert code is not None
    assert state_file.update(lambda s: s.deny(code, now=1.0)).user == "555"
    state = state_file.read()
    assert state.pairing == [] and state.allowed == {}


def test_every_key_form_in_use_is_read_by_the_one_grammar():
    from nanoagent import keys

    nested = keys.subagent_key(keys.subagent_key("telegram:42:7", "a1"), "b2")
    assert nested == "subagent:subagent:telegram:42:7:a1:b2"
    assert keys.root_of(nested) == "telegram:42:7" and keys.root_of("cli:direct") == "cli:direct"
    assert keys.cron_key("ab12") == "cron:ab12" and keys.cron_key("ab12", "slack:U1") == "cron:ab12:slack:U1"
    assert keys.cron_job("cron:ab12:slack:U1") == "ab12" and keys.cron_job("cli:direct") is None
    assert keys.underlying(keys.subagent_key("cron:ab12:slack:U1", "r1")) == "slack:U1"
    assert keys.underlying("cron:ab12") == "" and keys.underlying("telegram:42:7") == "telegram:42:7"
    assert keys.chat_of("telegram:42:7") == ("telegram", "42") and keys.chat_of("heartbeat") == ("heartbeat", "")
    assert [keys.is_machine(k) for k in ("cron:ab12", nested, "heartbeat", "dream:ws-1", "cli:direct", "web:x")] \
        == [True, True, True, True, False, False]
    assert keys.kind("heartbeat") == "heartbeat" and keys.kind("email:a@b.c:1f") == "email"
