"""templates/ and skills/ ship inside the wheel and are found through the installed package."""

import subprocess
import sys
import zipfile

from nanoagent.skills import parse_skill
from nanoagent.templates import render, workspace_templates
from tests.conftest import ROOT


def test_wheel_contains_templates_and_skills_and_finds_them_without_the_source_tree(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("nanoagent-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "nanoagent/templates/prompts/identity.md" in names
    assert "nanoagent/templates/workspace/SOUL.md" in names
    assert "nanoagent/skills/memory/SKILL.md" in names
    assert any(n.endswith("entry_points.txt") for n in names)
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    code = ("import nanoagent.resources as r; print(r.templates_dir()); print(r.skills_dir())")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {code}"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [str(target / "nanoagent/templates"), str(target / "nanoagent/skills")]


def test_every_template_renders_with_its_values():
    assert "/some/workspace" in render("prompts/identity.md", workspace="/some/workspace", restriction="")
    for source, _ in workspace_templates():
        assert "{{" not in source.read_text()


def test_rendering_fails_loudly_on_a_missing_value():
    import pytest

    from nanoagent.templates import TemplateError

    with pytest.raises(TemplateError, match="workspace"):
        render("prompts/identity.md", restriction="")


def test_every_builtin_skill_parses():
    for path in sorted((ROOT / "skills").glob("*/SKILL.md")):
        skill = parse_skill(path, "builtin")
        assert skill.name == path.parent.name and skill.description and skill.body


def test_python_dash_m_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "nanoagent", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("nanoagent ")
