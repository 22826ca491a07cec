"""templates/ and skills/ ship inside the wheel and are found through the installed package."""

import subprocess
import sys
import zipfile

import pytest

from nanoagent.resources import skills_dir, templates_dir
from nanoagent.skills import SkillsLoader, parse_skill
from nanoagent.templates import TemplateError, render, workspace_templates
from tests.conftest import ROOT


@pytest.mark.process
def test_wheel_contains_templates_and_skills_and_finds_them_without_the_source_tree(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("nanoagent-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "nanoagent/templates/prompts/identity.md" in names
    assert "nanoagent/templates/workspace/SOUL.md" in names
    assert "nanoagent/skills/memory/SKILL.md" in names
    assert {f"nanoagent/web/static/{name}" for name in ("index.html", "app.js", "chat.js", "util.js", "chats.js", "devices.js",
                                                      "app.css", "manifest.json", "icon-192.png")} <= set(names)  # the web app
    assert any(n.endswith("entry_points.txt") for n in names)
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    code = ("import nanoagent.resources as r; print(r.templates_dir()); print(r.skills_dir())")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {code}"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [str(target / "nanoagent/templates"), str(target / "nanoagent/skills")]


# the values each prompt is rendered with; a prompt not listed takes none
PROMPT_VALUES: dict[str, dict[str, str]] = {
    "prompts/identity.md": {"workspace": "/some/workspace", "restriction": "RESTRICTION-TEXT"},
    "prompts/heartbeat.md": {"tasks": "- TASK-TEXT", "token": "TOKEN-TEXT"},
    "prompts/dream_analyze_person.md": {"person": "PERSON-KEY"},
    "prompts/dream_edit_person.md": {"person": "PERSON-KEY"},
    "prompts/flush.md": {"note": "memory/NOTE-DATE.md"},
}
PROMPTS = sorted(f"prompts/{p.name}" for p in (templates_dir() / "prompts").iterdir() if p.is_file())


def test_the_prompt_templates_are_found():
    assert "prompts/identity.md" in PROMPTS and len(PROMPTS) >= 2


@pytest.mark.parametrize("name", PROMPTS)
def test_every_prompt_template_renders_with_its_values(name):
    values = PROMPT_VALUES.get(name, {})
    try:
        text = render(name, **values)
    except TemplateError as e:
        pytest.fail(f"{e}; add them to PROMPT_VALUES in tests/test_packaging.py")
    assert text.strip() and "{{" not in text
    for value in values.values():
        assert value in text


def test_workspace_templates_have_no_placeholders():
    assert workspace_templates()
    for source, _ in workspace_templates():
        assert "{{" not in source.read_text()


def test_rendering_fails_loudly_on_a_missing_value():
    with pytest.raises(TemplateError, match="workspace"):
        render("prompts/identity.md", restriction="")


def test_every_builtin_skill_parses_and_is_listed_in_the_skills_summary(tmp_path):
    paths = sorted(skills_dir().glob("*/SKILL.md"))
    assert {p.parent.name for p in paths} >= {"memory", "skill-creator", "github", "summarize", "tmux"}
    summary = SkillsLoader(tmp_path / "no-workspace-skills").summary()
    for path in paths:
        skill = parse_skill(path, "builtin")
        assert skill.name == path.parent.name and skill.description and skill.body
        assert f"- **{skill.name}**: {skill.description} `{path}`" in summary


@pytest.mark.process
def test_python_dash_m_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "nanoagent", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("nanoagent ")
