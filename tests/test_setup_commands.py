"""onboard (interactive and with flags), doctor, usage, skills and shell completion.

In-process through the CLI entry point, and each command once as a real process."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from nanoagent.session.store import SessionStore
from nanoagent.usage import TOKEN_FIELDS
from tests.conftest import PATIENCE, ROOT, invoke, run_cli, write_config

GOOD_KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"


@pytest.mark.process
def test_onboard_asks_at_the_terminal_and_rejects_a_malformed_key(isolated_home):
    env = {**os.environ, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"}
    child = pexpect.spawn(sys.executable, ["-m", "nanoagent", "onboard"], cwd=str(ROOT), env=env,
                          encoding="utf-8", timeout=PATIENCE, dimensions=(30, 80))
    child.expect_exact("Provider [")
    child.send("anthropic\r")
    child.expect_exact("Model")
    child.send("\r")
    child.expect_exact("API key for anthropic")
    child.send("not-a-key\r")
    child.expect_exact("does not look right")
    child.expect_exact("API key for anthropic")
    child.send(GOOD_KEY + "\r")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    config = json.loads((isolated_home / "config.json").read_text())
    assert config["providers"]["anthropic"]["apiKey"] == GOOD_KEY
    assert config["agents"]["defaults"]["model"] == "anthropic/claude-sonnet-4-5"
    assert (isolated_home / "config.json").stat().st_mode & 0o777 == 0o600
    assert (isolated_home / "workspace" / "memory" / "MEMORY.md").exists()


def _onboard_at_terminal(env_extra: dict, answers: list[tuple[str, str]], defaults: bool = True) -> str:
    """Answer onboard's questions on a terminal: the provider and model with the defaults (unless not `defaults`),
    then `answers`; everything it printed."""
    env = {**os.environ, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm", **env_extra}
    child = pexpect.spawn(sys.executable, ["-m", "nanoagent", "onboard"], cwd=str(ROOT), env=env,
                          encoding="utf-8", timeout=PATIENCE, dimensions=(30, 120))
    shown = ""
    for question, answer in [*([("Provider [", ""), ("Model", "")] if defaults else []), *answers]:
        child.expect_exact(question)
        shown += (child.before or "") + question
        child.send(answer + "\r")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    return shown + (child.before or "")


@pytest.mark.process
def test_onboard_offers_an_openai_compatible_server_by_that_name_and_asks_its_url_and_whether_it_needs_a_key(
        isolated_home, llm):
    shown = _onboard_at_terminal({}, [("Provider [", "server"), ("A name for the server", ""),
                                      ("Its base URL", llm.url + "/v1"), ("Model, as the server names it", "gpt-test"),
                                      ("Does it need an API key? [y/N]", "")], defaults=False)
    assert "server   an OpenAI-compatible server (URL)" in shown
    assert "litellm  a provider as litellm names it" in shown
    data = json.loads((isolated_home / "config.json").read_text())
    assert data["agents"]["defaults"]["model"] == "local/gpt-test"
    assert data["providers"] == {"local": {"apiBase": llm.url + "/v1"}}
    reply = invoke("agent", "-m", "hi")
    assert reply.returncode == 0, reply.stderr
    assert llm.requests[-1].body["model"] == "gpt-test" and "authorization" not in llm.requests[-1].headers
    doctor = invoke("doctor").stdout.splitlines()
    assert "ok    agents.defaults.model is local/gpt-test: local needs no key" in doctor
    assert "ok    local/gpt-test: local answered a one-token request" in doctor


@pytest.mark.process
def test_onboard_asks_the_base_url_for_openai_and_an_empty_answer_keeps_the_default(isolated_home, llm):
    _onboard_at_terminal({}, [("Provider [", "openai"), ("Model [openai/gpt-4.1]", ""),
                              ("API base URL [https://api.openai.com/v1] (empty keeps it)", ""),
                              ("API key for openai", OPENAI_KEY)], defaults=False)
    assert json.loads((isolated_home / "config.json").read_text())["providers"] == {"openai": {"apiKey": OPENAI_KEY}}
    _onboard_at_terminal({}, [("Provider [", "openai"), ("Model [openai/gpt-4.1]", ""),
                              ("API base URL [https://api.openai.com/v1] (empty keeps it)", llm.url + "/v1"),
                              ("API key for openai", "lm-studio")], defaults=False)  # its own server: any key
    openai = json.loads((isolated_home / "config.json").read_text())["providers"]["openai"]
    assert openai == {"apiKey": "lm-studio", "apiBase": llm.url + "/v1"}
    reply = invoke("agent", "-m", "hi")
    assert reply.returncode == 0, reply.stderr
    assert llm.requests[-1].headers["authorization"] == "Bearer lm-studio"


@pytest.mark.process
def test_onboard_offers_to_store_a_key_from_the_environment_for_cron(isolated_home):
    _onboard_at_terminal({"ANTHROPIC_API_KEY": GOOD_KEY}, [("Store the key from $ANTHROPIC_API_KEY", "y")])
    config = isolated_home / "config.json"
    assert json.loads(config.read_text())["providers"]["anthropic"]["apiKey"] == GOOD_KEY
    assert config.stat().st_mode & 0o777 == 0o600


@pytest.mark.process
def test_onboard_stores_no_key_when_declined_and_says_what_cron_needs(isolated_home):
    out = _onboard_at_terminal({"ANTHROPIC_API_KEY": GOOD_KEY}, [("Store the key from $ANTHROPIC_API_KEY", "n")])
    assert "crontab" in out
    assert "providers" not in json.loads((isolated_home / "config.json").read_text())
    out = _onboard_at_terminal({}, [("API key for anthropic (empty: keep it in $ANTHROPIC_API_KEY", "")])
    assert "crontab" in out
    assert "providers" not in json.loads((isolated_home / "config.json").read_text())


def test_onboard_with_flags_refuses_a_key_of_the_wrong_shape(isolated_home):
    proc = invoke("onboard", "--provider", "openai", "--api-key", "hello world")
    assert proc.returncode == 1 and "does not look right" in proc.stderr
    assert not (isolated_home / "config.json").exists()
    short = invoke("onboard", "--provider", "anthropic", "--api-key", "sk-ant-x")
    assert short.returncode == 1 and "too short" in short.stderr and "--api-base" in short.stderr


def test_onboard_takes_any_key_for_a_server_of_ones_own(isolated_home):
    proc = invoke("onboard", "--provider", "anthropic", "--api-key", "local-proxy-key", "--api-base",
                  "http://127.0.0.1:4000")
    assert proc.returncode == 0, proc.stderr
    anthropic = json.loads((isolated_home / "config.json").read_text())["providers"]["anthropic"]
    assert (anthropic["apiKey"], anthropic["apiBase"]) == ("local-proxy-key", "http://127.0.0.1:4000")


def test_doctor_reports_what_to_fix_and_migrates_renamed_keys(isolated_home, llm):
    config = write_config(isolated_home, {"agents": {"defaults": {"maxToolIteration": 9}}})
    os.chmod(config, 0o644)
    proc = invoke("doctor")
    assert proc.returncode == 1
    assert "renamed" in proc.stdout and "doctor --fix" in proc.stdout
    assert "ANTHROPIC_API_KEY" in proc.stdout and "lacks" in proc.stdout
    fixed = invoke("doctor", "--fix", env={"ANTHROPIC_API_KEY": GOOD_KEY})
    data = json.loads(config.read_text())
    assert data["agents"]["defaults"] == {"maxToolIterations": 9}
    assert config.stat().st_mode & 0o777 == 0o600
    assert (isolated_home / "config.json.bak").exists()
    assert "migrated" in fixed.stdout
    assert invoke("onboard").returncode == 0
    assert invoke("doctor", env={"ANTHROPIC_API_KEY": GOOD_KEY, "ANTHROPIC_BASE_URL": llm.url}).returncode == 0


def add_usage(home, key, model, day, tokens):
    store = SessionStore(home / "sessions")
    session = store.load(key)
    store.append(session, [{"type": "usage", "ts": f"{day}T10:00:00+00:00", "model": model,
                            "input_tokens": tokens, "output_tokens": tokens // 10,
                            "cache_read_tokens": 0, "cache_write_tokens": 0}])


def test_usage_summarises_tokens_and_cost_per_day_session_and_model(isolated_home):
    from datetime import date

    today = date.today().isoformat()
    add_usage(isolated_home, "cli:direct", "anthropic/claude-sonnet-4-5", today, 1_000_000)
    add_usage(isolated_home, "cli:work", "mystery/unknown-model", today, 5000)
    add_usage(isolated_home, "cli:work", "anthropic/claude-sonnet-4-5", "2020-01-01", 10)
    proc = invoke("usage", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "$4.50" in proc.stdout  # 1M in at $3/M + 100k out at $15/M
    assert "—" in proc.stdout  # unknown model: tokens shown, no price
    assert "2020-01-01" in proc.stdout
    recent = invoke("usage", "--days", "7", "--session", "work", env={"COLUMNS": "200"})
    assert "2020-01-01" not in recent.stdout and "unknown-model" in recent.stdout
    assert "claude" not in recent.stdout



def add_call(home, key, model, tokens):
    from datetime import date

    store = SessionStore(home / "sessions")
    store.append(store.load(key), [{"type": "usage", "ts": f"{date.today().isoformat()}T10:00:00+00:00",
                                    "model": model, **dict(zip(TOKEN_FIELDS, tokens, strict=True))}])


def on_terminal(*args, columns):
    """`nanoagent ARGS` as a terminal `columns` wide shows it, its styling taken out."""
    proc = invoke(*args, env={"COLUMNS": str(columns), "TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr
    return re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout)


@pytest.mark.parametrize("columns", [80, 60, 30])
def test_usage_on_a_narrow_terminal_shows_every_cost_and_token_figure_whole(isolated_home, columns):
    add_call(isolated_home, "telegram:123456789:a-long-thread-name", "anthropic/claude-sonnet-4-5",
             (1_234_567, 123_456, 2_345_678, 345_678))
    add_call(isolated_home, "cli:direct", "anthropic/claude-haiku-4-5", (10_000, 2_000, 0, 0))
    shown = on_terminal("usage", columns=columns)
    lines = shown.splitlines()
    if columns >= 60:  # narrower, the figures alone do not fit: the lines wrap on the terminal, no number is cut
        assert all(len(line) <= columns for line in lines if line[:1] in "┏┃┡│└"), shown
    for figure in ("1,234,567", "123,456", "10,000", "2,000", "1,244,567", "125,456"):
        assert figure in shown, figure
    costs = [word for line in lines for word in line.split() if word.startswith("$")]
    assert len(costs) == 3 and all(re.fullmatch(r"\$\d+\.\d{2,4}", c) for c in costs), shown
    assert "…" not in " ".join(costs)
    dropped = next((line for line in lines if line.startswith("Not shown")), "")
    assert "2,345,678" in shown or "cache read" in dropped  # a cache column is whole or named as left out
    assert "345,678" in shown or "cache write" in dropped
    assert "total" in shown
    if columns < 120:  # too narrow for every column with these figures: the columns left out are named
        assert f"Not shown at {columns} columns: cache write, cache read" in shown


def test_usage_names_the_models_without_a_price_and_leaves_their_cost_out_of_the_total(isolated_home):
    add_call(isolated_home, "cli:work", "mystery/unknown-model", (5000, 500, 0, 0))
    add_call(isolated_home, "cli:work", "mystery/unknown-model", (5000, 500, 0, 0))
    add_call(isolated_home, "cli:work", "anthropic/claude-sonnet-4-5", (1_000_000, 100_000, 0, 0))
    shown = on_terminal("usage", columns=200)
    row = next(line for line in shown.splitlines() if "unknown-model" in line and "│" in line)
    assert row.rstrip(" │").endswith("—") and "$" not in row
    assert "$4.50 + —" in shown  # the total counts only the priced calls, and says some are not in it
    note = next(line for line in shown.splitlines() if line.startswith("—"))
    assert "mystery/unknown-model (2 calls)" in note and "unknown" in note and "not in the total" in note


def test_skills_list_shows_source_and_availability(isolated_home):
    workspace_skill = isolated_home / "workspace" / "skills" / "summarize"
    workspace_skill.mkdir(parents=True)
    (workspace_skill / "SKILL.md").write_text("---\nname: summarize\ndescription: my own summariser\n---\nSteps.\n")
    proc = invoke("skills", "list", env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0
    line = next(line for line in proc.stdout.splitlines() if line.strip().startswith("summarize"))
    assert "workspace" in line and "my own summariser" in line
    assert "skill-creator" in proc.stdout


def test_skills_validate_explains_problems(tmp_path):
    skill = tmp_path / "weekly"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: other\ndescription: short\n---\n")
    proc = invoke("skills", "validate", str(skill))
    assert proc.returncode == 1 and "differs from the folder name" in proc.stderr
    (skill / "SKILL.md").write_text("---\nname: weekly\ndescription: Build the weekly report from git.\n---\nDo it.\n")
    assert invoke("skills", "validate", str(skill)).returncode == 0


def test_skills_validate_says_each_problem_once_and_where_the_yaml_breaks(isolated_home):
    skill = isolated_home / "workspace" / "skills" / "weekly"  # inside the workspace, where the agent also reads it
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: weekly\ndescription: Build: the report\n---\nDo it.\n")
    proc = invoke("skills", "validate", str(skill))
    assert proc.returncode == 1
    assert proc.stdout + proc.stderr == (f"Error: {skill / 'SKILL.md'}: invalid YAML in frontmatter at line 3, "
                                         "column 19: mapping values are not allowed here\n")
    (skill / "SKILL.md").write_text("---\nname: other\ndescription: short\n---\n")
    proc = invoke("skills", "validate", str(skill))
    assert len((proc.stdout + proc.stderr).splitlines()) == 1
    assert (proc.stdout + proc.stderr).count("differs from the folder name") == 1


def from_bash(*args: str, env: dict) -> subprocess.CompletedProcess:
    """`nanoagent ARGS` typed at a bash prompt: typer finds the shell to complete for in the parent process,
    so this does not depend on how the tests were started (from a shell or detached from any)."""
    return subprocess.run(["bash", "-c", '"$@"; exit $?', "bash", sys.executable, "-m", "nanoagent", *args],
                          capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT, timeout=PATIENCE)


def test_show_and_install_completion_give_bash_a_script_that_completes_nanoagent_commands(tmp_path):
    home = tmp_path / "user"
    env = {"SHELL": "/bin/bash", "HOME": str(home)}
    shown = from_bash("--show-completion", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "complete -o default -F _nanoagent_completion nanoagent" in shown.stdout
    script = tmp_path / "completion.sh"
    script.write_text(shown.stdout)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # the installed `nanoagent` command
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # ... of this checkout
    completed = subprocess.run(
        ["bash", "-c", 'source "$0"; COMP_WORDS=(nanoagent sk); COMP_CWORD=1; _nanoagent_completion nanoagent;'
                       ' printf "%s\\n" "${COMPREPLY[@]}"', str(script)],
        capture_output=True, text=True, env={**os.environ, **env, "PATH": path, "PYTHONPATH": python_path},
        timeout=PATIENCE)
    assert completed.stdout.split() == ["skills"], completed.stderr
    installed = from_bash("--install-completion", env=env)
    assert installed.returncode == 0, installed.stderr
    assert (home / ".bash_completions" / "nanoagent.sh").read_text().strip() == shown.stdout.strip()
    assert "source '" + str(home / ".bash_completions" / "nanoagent.sh") + "'" in (home / ".bashrc").read_text()


def test_usage_piped_shows_whole_rows_and_batch_calls_at_half_price(isolated_home):
    from datetime import date

    today = date.today().isoformat()
    key = "dream:workspace-0123456789"
    store = SessionStore(isolated_home / "sessions")
    session = store.load(key)
    store.append(session, [{"type": "usage", "ts": f"{today}T10:00:00+00:00", "model": "anthropic/claude-sonnet-4-5",
                            "input_tokens": 1_000_000, "output_tokens": 100_000, "cache_read_tokens": 0,
                            "cache_write_tokens": 0, "purpose": "dream", "price_factor": 0.5}])
    proc = invoke("usage", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert key in proc.stdout and "anthropic/claude-sonnet-4-5" in proc.stdout and "…" not in proc.stdout
    assert "$2.25" in proc.stdout  # half of $4.50: Message Batches are billed at half price


@pytest.mark.process
def test_doctor_says_to_install_git_and_notices_a_missing_tokenizer(isolated_home, tmp_path):
    # a real process: this one has not loaded the tokenizer yet
    assert invoke("onboard").returncode == 0
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    proc = run_cli("doctor", env={"ANTHROPIC_API_KEY": GOOD_KEY, "PATH": str(empty_bin),
                                  "TIKTOKEN_CACHE_DIR": str(tmp_path / "no-tokenizer"),
                                  # any download attempt fails at once instead of waiting on the network
                                  "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"})
    assert proc.returncode == 1
    git_line = next(line for line in proc.stdout.splitlines() if "git:" in line)
    assert "not found" in git_line and "install git" in proc.stdout
    assert "tokenizer missing; using estimates" in proc.stdout


OPENAI_KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz"


def test_onboard_with_only_a_provider_and_key_gives_a_model_that_uses_that_key(llm, isolated_home):
    proc = invoke("onboard", "--provider", "openai", "--api-key", OPENAI_KEY, "--api-base", llm.url + "/v1")
    assert proc.returncode == 0, proc.stderr
    assert "Model: openai/gpt-4.1" in proc.stdout
    reply = invoke("agent", "-m", "hi")
    assert reply.returncode == 0, reply.stderr
    assert llm.requests[-1].body["model"] == "gpt-4.1"
    assert llm.requests[-1].headers["authorization"] == f"Bearer {OPENAI_KEY}"


def test_onboard_with_another_provider_switches_the_model_unless_one_is_given(isolated_home):
    assert invoke("onboard", "--provider", "openai", "--api-key", OPENAI_KEY).returncode == 0
    proc = invoke("onboard", "--provider", "anthropic", "--api-key", GOOD_KEY)
    assert "Model: anthropic/claude-sonnet-4-5 (was openai/gpt-4.1)" in proc.stdout
    assert invoke("onboard", "--provider", "openai", "--model", "openai/gpt-4o-mini").returncode == 0
    assert invoke("onboard", "--provider", "openai", "--api-key", OPENAI_KEY).returncode == 0  # same provider: kept
    data = json.loads((isolated_home / "config.json").read_text())
    assert data["agents"]["defaults"]["model"] == "openai/gpt-4o-mini"
    assert data["providers"]["anthropic"]["apiKey"] == GOOD_KEY


def test_onboard_refuses_a_model_of_another_provider_and_a_provider_without_a_default(isolated_home):
    proc = invoke("onboard", "--provider", "openai", "--api-key", OPENAI_KEY, "--model", "anthropic/claude-sonnet-4-5")
    assert proc.returncode == 1 and "belongs to anthropic, not openai" in proc.stderr
    proc = invoke("onboard", "--provider", "gemini", "--api-key", "AIzaabcdefghijklmnopqrstuvwxyz")
    assert proc.returncode == 1 and "--model gemini/<model name>" in proc.stderr
    assert not (isolated_home / "config.json").exists()
    proc = invoke("onboard", "--model", "openai/gpt-4o-mini", "--api-key", OPENAI_KEY)  # the key goes with the model
    assert json.loads((isolated_home / "config.json").read_text())["providers"]["openai"]["apiKey"] == OPENAI_KEY


def test_doctor_and_the_missing_key_error_name_the_model_setting_when_another_key_is_set(isolated_home, llm):
    write_config(isolated_home, {"agents": {"defaults": {"model": "anthropic/claude-sonnet-4-5"}},
                                 "providers": {"openai": {"apiKey": OPENAI_KEY, "apiBase": llm.url + "/v1"}}})
    doctor = invoke("doctor")
    assert "FIX   agents.defaults.model is anthropic/claude-sonnet-4-5: API key for anthropic missing" in doctor.stdout
    assert "set agents.defaults.model to openai/gpt-4.1" in doctor.stdout
    proc = invoke("agent", "-m", "hi")
    assert proc.returncode == 1
    assert "agents.defaults.model is anthropic/claude-sonnet-4-5" in proc.stderr
    assert "set agents.defaults.model to openai/gpt-4.1" in proc.stderr
    assert "Model: openai/gpt-4.1" in invoke("onboard", "--provider", "openai").stdout  # the fix the message names
    assert invoke("doctor").stdout.count("FIX") == 0


@pytest.mark.process
def test_onboard_at_the_terminal_with_another_provider_asks_for_its_model_until_it_fits(isolated_home):
    env = {**os.environ, "PROMPT_TOOLKIT_NO_CPR": "1", "TERM": "xterm"}
    child = pexpect.spawn(sys.executable, ["-m", "nanoagent", "onboard"], cwd=str(ROOT), env=env,
                          encoding="utf-8", timeout=PATIENCE, dimensions=(30, 160))
    for question, answer in [("Provider [", "litellm"), ("Provider name as litellm knows it", "mistral"),
                             ("Model, as mistral/<model name>", ""), ("has no default model", None),
                             ("Model, as mistral/<model name>", "openai/gpt-4.1"), ("belongs to openai", None),
                             ("Model, as mistral/<model name>", "mistral/mistral-small-latest"),
                             ("API base URL", ""), ("API key for mistral", "abcdefghijklmnopqrstuvwxyz012")]:
        child.expect_exact(question)
        if answer is not None:
            child.send(answer + "\r")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    data = json.loads((isolated_home / "config.json").read_text())
    assert data["agents"]["defaults"]["model"] == "mistral/mistral-small-latest"
    assert data["providers"]["mistral"]["apiKey"] == "abcdefghijklmnopqrstuvwxyz012"
