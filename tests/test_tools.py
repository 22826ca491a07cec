import asyncio
import os

import pytest

from nanoagent.tools import ToolArgumentError, ToolContext, ToolError, ToolRegistry, file_tools, tool
from nanoagent.tools.shell import exec_tool


def default_tools() -> ToolRegistry:
    return ToolRegistry([*file_tools(), exec_tool()])


def call(ctx, name, **arguments):
    return asyncio.run(default_tools().get(name).call(ctx, arguments))


@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.fixture
def ctx(ws):
    return ToolContext(workspace=ws)


def test_schema_comes_from_the_signature_and_docstring():
    @tool(read_only=True)
    def lookup(ctx: ToolContext, word: str, limit: int = 5, exact: bool | None = None) -> str:
        """Look a word up.

        Args:
            word: The word to find.
            limit: How many results.
        """
        return word

    spec = lookup.spec()
    assert spec.name == "lookup" and spec.description == "Look a word up."
    assert spec.parameters["required"] == ["word"]
    assert spec.parameters["properties"]["word"] == {"type": "string", "description": "The word to find."}
    assert spec.parameters["properties"]["limit"]["default"] == 5
    assert spec.parameters["properties"]["exact"] == {"type": "boolean"}
    assert lookup.read_only


def test_missing_and_mistyped_arguments_are_explained(ctx):
    with pytest.raises(ToolArgumentError) as info:
        call(ctx, "read_file")
    assert "path: required but missing" in str(info.value)
    with pytest.raises(ToolArgumentError) as info:
        call(ctx, "read_file", path="a", limit="many")
    assert "limit" in str(info.value) and "'many'" in str(info.value)


def test_tool_list_is_stable_between_calls():
    assert default_tools().specs() == default_tools().specs()
    assert default_tools().names() == ["read_file", "write_file", "edit_file", "list_dir", "glob", "grep", "exec"]


def test_read_file_numbers_lines_and_pages(ctx, ws):
    (ws / "long.txt").write_text("".join(f"row {i}\n" for i in range(1, 11)))
    out = call(ctx, "read_file", path="long.txt", offset=3, limit=4)
    assert out.splitlines()[0] == "     3\trow 3"
    assert "[lines 3-6 of 10; call read_file with offset=7 to continue]" in out
    assert "continue" not in call(ctx, "read_file", path="long.txt", offset=7)


def test_read_file_refuses_binary_missing_and_folders(ctx, ws):
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02")
    (ws / "dir").mkdir()
    with pytest.raises(ToolError, match="binary"):
        call(ctx, "read_file", path="blob.bin")
    with pytest.raises(ToolError, match="does not exist"):
        call(ctx, "read_file", path="nope.txt")
    with pytest.raises(ToolError, match="list_dir"):
        call(ctx, "read_file", path="dir")


def test_write_file_creates_folders_and_replaces_atomically(ctx, ws):
    assert "Wrote 5 bytes" in call(ctx, "write_file", path="a/b/c.txt", content="hello")
    assert (ws / "a/b/c.txt").read_text() == "hello"
    call(ctx, "write_file", path="a/b/c.txt", content="bye")
    assert (ws / "a/b/c.txt").read_text() == "bye"
    assert [p.name for p in (ws / "a/b").iterdir()] == ["c.txt"]  # no temp files left behind


def test_an_edit_answers_with_its_changed_lines_and_a_new_file_says_it_is_new(ctx, ws):
    (ws / "list.md").write_text("milk\neggs\nbread\n")
    edited = call(ctx, "edit_file", path="list.md", old_text="eggs\n", new_text="butter\ncheese\n")
    assert edited == "Edited list.md (+2 -1 lines)\n@@ -2 +2,2 @@\n-eggs\n+butter\n+cheese"
    assert call(ctx, "write_file", path="new.md", content="one\n") == "Wrote 4 bytes to new.md (a new file)"
    replaced = call(ctx, "write_file", path="list.md", content="milk\n")
    assert replaced == "Wrote 5 bytes to list.md (+0 -3 lines)\n@@ -2,3 +1,0 @@\n-butter\n-cheese\n-bread"
    assert call(ctx, "write_file", path="list.md", content="milk\n").endswith("(no change)")


def test_a_large_edit_answers_with_its_first_changed_lines_and_how_many_more(ctx, ws):
    from nanoagent.tools.fs import DIFF_LINES

    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(100)))
    replaced = call(ctx, "write_file", path="big.txt", content="short\n")
    assert replaced.startswith("Wrote 6 bytes to big.txt (+1 -100 lines)\n")
    assert sum(line[:1] in "+-" for line in replaced.splitlines()[1:-1]) == DIFF_LINES
    assert replaced.endswith(f"[... {101 - DIFF_LINES} more changed lines]")


def test_edit_file_needs_exactly_one_match(ctx, ws):
    (ws / "f.txt").write_text("one two two\n")
    call(ctx, "edit_file", path="f.txt", old_text="one", new_text="ONE")
    assert (ws / "f.txt").read_text() == "ONE two two\n"
    with pytest.raises(ToolError, match="2 times"):
        call(ctx, "edit_file", path="f.txt", old_text="two", new_text="2")
    with pytest.raises(ToolError, match="not found"):
        call(ctx, "edit_file", path="f.txt", old_text="three", new_text="3")
    with pytest.raises(ToolError, match="no-op"):
        call(ctx, "edit_file", path="f.txt", old_text="ONE", new_text="ONE")
    assert (ws / "f.txt").read_text() == "ONE two two\n"


def test_list_dir_glob_and_grep(ctx, ws):
    (ws / "src").mkdir()
    (ws / "src/a.py").write_text("import os\nprint('needle')\n")
    (ws / "notes.md").write_text("a Needle here\n")
    (ws / ".git").mkdir()
    (ws / ".git/config").write_text("needle")
    assert call(ctx, "list_dir").splitlines() == [".git/", "notes.md", "src/"]
    assert call(ctx, "glob", pattern="**/*.py") == "src/a.py"
    assert call(ctx, "grep", pattern="needle") == "src/a.py:2: print('needle')"
    assert call(ctx, "grep", pattern="needle", ignore_case=True, glob="*.md") == "notes.md:1: a Needle here"
    with pytest.raises(ToolError, match="Invalid regular expression"):
        call(ctx, "grep", pattern="(unclosed")


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "~/secrets.txt", "sub/../../outside.txt"])
def test_paths_outside_the_workspace_are_refused(ctx, ws, path):
    (ws.parent / "outside.txt").write_text("secret")
    for name, extra in (("read_file", {}), ("write_file", {"content": "x"})):
        with pytest.raises(ToolError, match="outside the workspace"):
            call(ctx, name, path=path, **extra)
    assert (ws.parent / "outside.txt").read_text() == "secret"


def test_symlinks_pointing_outside_are_refused(ctx, ws, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    os.symlink(outside / "secret.txt", ws / "link.txt")
    os.symlink(outside, ws / "linkdir")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(ctx, "read_file", path="link.txt")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(ctx, "write_file", path="linkdir/new.txt", content="x")
    assert not (outside / "new.txt").exists()
    assert call(ctx, "grep", pattern="secret") == "(no matches)"
    with pytest.raises(ToolError, match="outside the workspace"):
        call(ctx, "exec", command="ls", workdir="linkdir")


def test_paths_outside_are_allowed_when_restriction_is_off(ws, tmp_path):
    (tmp_path / "outside.txt").write_text("reachable\n")
    ctx = ToolContext(workspace=ws, restrict_to_workspace=False)
    assert "reachable" in call(ctx, "read_file", path="../outside.txt")


def builtin_skill_path_from_the_summary(ws, name: str) -> str:
    from nanoagent.skills import SkillsLoader

    summary = SkillsLoader(ws / "skills").summary()
    line = next(line for line in summary.splitlines() if line.startswith(f"- **{name}**"))
    return line.split("`")[1]  # "- **name**: description `path`", maybe followed by "(unavailable: ...)"


def test_built_in_skills_listed_in_the_summary_can_be_read_with_the_workspace_restricted(ctx, ws):
    skill_md = builtin_skill_path_from_the_summary(ws, "github")
    skill_dir = os.path.dirname(skill_md)
    assert "name: github" in call(ctx, "read_file", path=skill_md)
    assert "SKILL.md" in call(ctx, "list_dir", path=skill_dir).splitlines()
    assert call(ctx, "glob", pattern="*.md", path=skill_dir).endswith("SKILL.md")
    assert "name: github" in call(ctx, "grep", pattern="^name:", path=skill_dir)


def test_built_in_skills_cannot_be_written_edited_or_run_in(ctx, ws):
    skill_md = builtin_skill_path_from_the_summary(ws, "github")
    before = open(skill_md, "rb").read()
    with pytest.raises(ToolError, match="outside the workspace"):
        call(ctx, "write_file", path=skill_md, content="overwritten")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(ctx, "edit_file", path=skill_md, old_text="github", new_text="gitlab")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(ctx, "write_file", path=os.path.join(os.path.dirname(skill_md), "new.md"), content="x")
    with pytest.raises(ToolError, match="outside the workspace"):
        call(ctx, "exec", command="ls", workdir=os.path.dirname(skill_md))
    assert open(skill_md, "rb").read() == before
    assert not os.path.exists(os.path.join(os.path.dirname(skill_md), "new.md"))


def test_a_built_agent_offers_every_tool_in_a_stable_order(tmp_path):
    from nanoagent.agent.build import build_agent
    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths
    from nanoagent.providers.scripted import ScriptedProvider
    from nanoagent.tools.browser import missing, settings_from

    paths = Paths.from_env(tmp_path / "ws")
    loop = build_agent(Config(), paths, provider=ScriptedProvider([]))
    browser = [] if missing(settings_from(Config(), paths)) else ["browser"]  # offered where Chromium is found
    assert loop.context.tools.names() == ["read_file", "write_file", "edit_file", "list_dir", "glob", "grep", "exec",
                                          "web_fetch", "web_search", "memory_search", "memory_get", "cron", "message",
                                          *browser, "spawn", "read_task_output"]
