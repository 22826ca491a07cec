import subprocess
import sys

import pytest

from nanoagent.tokens import count_message_tokens, count_tokens, estimate_tokens, tokenizer_available
from tests.conftest import PATIENCE


def test_tokenizer_works_offline_from_the_files_litellm_ships():
    assert tokenizer_available()
    assert count_tokens("hello world") == 2


@pytest.mark.process
def test_counting_never_returns_zero_for_text_when_the_tokenizer_is_missing(tmp_path):
    code = (f"import os; os.environ['TIKTOKEN_CACHE_DIR'] = {str(tmp_path)!r}; "
            "from nanoagent.tokens import count_tokens, tokenizer_available; "
            "print(tokenizer_available(), count_tokens('hello world, how are you today?'))")
    env = {"PATH": "/usr/bin:/bin", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=PATIENCE)
    available, count = proc.stdout.split()
    assert available == "False"
    assert int(count) == estimate_tokens("hello world, how are you today?") > 0


def test_message_tokens_include_tool_calls():
    plain = count_message_tokens({"role": "assistant", "content": "ok"})
    with_call = count_message_tokens({"role": "assistant", "content": "ok",
                                      "tool_calls": [{"id": "1", "name": "read_file", "arguments": '{"path": "a"}'}]})
    assert with_call > plain > 0


def test_the_byte_bound_is_never_below_the_real_count():
    from nanoagent.tokens import token_bound

    for text in ("hello world", "寿司が好きです。東京に住んでいます", "emoji 🎉🎉🎉 and ünïcödé", "a" * 5000,
                 '{"path": "x.txt", "content": "1 2 3"}', "\n\n\t  "):
        assert token_bound(text) >= count_tokens(text) > 0


def test_the_estimate_counts_cjk_text_close_to_a_token_a_character():
    from nanoagent.tokens import estimate_tokens

    assert estimate_tokens("寿司が好きです") == 7
    assert estimate_tokens("hello world, fine") == 5


@pytest.mark.process
def test_a_short_one_shot_turn_never_loads_the_tokenizer(tmp_path):
    import subprocess
    import sys

    code = (
        "import asyncio, sys\n"
        "from nanoagent.agent.build import build_agent\n"
        "from nanoagent.config.schema import Config\n"
        "from nanoagent.paths import Paths\n"
        "from nanoagent.providers.scripted import ScriptedProvider\n"
        "loop = build_agent(Config(), Paths.from_env(), provider=ScriptedProvider(['hi']))\n"
        "asyncio.run(loop.handle('hello', 'cli:direct'))\n"
        "print('tiktoken' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PATIENCE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"  # loading it costs 0.6 s and 20 MB on every start
