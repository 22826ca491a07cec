"""The core is named in one place a reader finds first: AGENTS.md's list is the one `make size` counts."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def size_module():
    spec = importlib.util.spec_from_file_location("size", ROOT / "bench" / "size.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_agents_md_lists_exactly_the_core_files_make_size_counts_and_each_exists():
    text = (ROOT / "AGENTS.md").read_text(encoding="utf-8")
    section = text.split("## The core", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"`([\w/]+\.py)`", section.strip().split("\n\n")[-1])  # the list: its last paragraph
    core = size_module().CORE
    assert listed == list(core)
    assert all((ROOT / "nanoagent" / rel).is_file() for rel in core)
