import subprocess
import sys

from nanoagent.tokens import count_message_tokens, count_tokens, estimate_tokens, tokenizer_available


def test_tokenizer_works_offline_from_the_files_litellm_ships():
    assert tokenizer_available()
    assert count_tokens("hello world") == 2


def test_counting_never_returns_zero_for_text_when_the_tokenizer_is_missing(tmp_path):
    code = (f"import os; os.environ['TIKTOKEN_CACHE_DIR'] = {str(tmp_path)!r}; "
            "from nanoagent.tokens import count_tokens, tokenizer_available; "
            "print(tokenizer_available(), count_tokens('hello world, how are you today?'))")
    env = {"PATH": "/usr/bin:/bin", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    available, count = proc.stdout.split()
    assert available == "False"
    assert int(count) == estimate_tokens("hello world, how are you today?") > 0


def test_message_tokens_include_tool_calls():
    plain = count_message_tokens({"role": "assistant", "content": "ok"})
    with_call = count_message_tokens({"role": "assistant", "content": "ok",
                                      "tool_calls": [{"id": "1", "name": "read_file", "arguments": '{"path": "a"}'}]})
    assert with_call > plain > 0
