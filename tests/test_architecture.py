"""The import graph: layers point one way, no circles, and only cli/ touches the terminal libraries."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nanoagent"

# Lower layers never import higher ones, stated by folder: modules at the top of the package are the foundation, and
# so is `channels/` (each channel is a plug-in: its contract, registry, key grammar, state file and its own folder,
# which cron, the agent and the CLI reach by name through the registry); the gateway runs channels
# (`gateway/channels/`: the engine, replies, the inbox). cron's store, schedules, scheduler, delivery and tools sit
# with the tools (build_agent registers them); a job as an agent turn is agent/cron_runs.py, the component
# gateway/cron.py. `__main__` is the program's entry (`python -m nanoagent`), which nothing imports: the cli's layer.
LAYERS = {"channels": 0, "spend": 0, "providers": 1, "session": 2, "tools": 2, "cron": 2, "mcp": 3, "memory": 3,
          "agent": 4, "gateway": 5, "web": 5, "acp": 6, "cli": 6, "__main__": 6}
# The one intended upward edge: Dream's editing phase runs the agent runner (and its events).
ALLOWED_UPWARD = {("nanoagent.memory.dream", "nanoagent.agent")}
TERMINAL_LIBRARIES = ("typer", "rich", "prompt_toolkit", "click")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, only for type checking) for every import in the file, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in type_only) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, id(node) in type_only))
            # `from nanoagent.agent import events` imports the submodule
            found += [(f"{node.module}.{alias.name}", id(node) in type_only) for alias in node.names
                      if (PACKAGE.parent / f"{node.module}.{alias.name}".replace(".", "/")).with_suffix(".py").exists()]
    return found


def graph() -> dict[str, list[tuple[str, bool]]]:
    return {module_name(p): imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> float:
    parts = module.split(".")[1:]
    for size in range(len(parts), 0, -1):
        if ".".join(parts[:size]) in LAYERS:
            return LAYERS[".".join(parts[:size])]
    return 0


def test_only_the_cli_imports_typer_rich_and_prompt_toolkit():
    offenders = [(module, target) for module, found in graph().items() for target, _ in found
                 if target.split(".")[0] in TERMINAL_LIBRARIES and not module.startswith("nanoagent.cli")]
    assert offenders == []


def test_layers_point_one_way_with_one_intended_exception():
    upward = set()
    for module, found in graph().items():
        for target, _ in found:
            if target.startswith("nanoagent.") and layer(target) > layer(module):
                upward.add((module, ".".join(target.split(".")[:2])))
    assert upward == ALLOWED_UPWARD


def test_there_is_no_import_circle_inside_nanoagent_not_even_through_type_checking_imports():
    modules = graph()
    edges = {m: {t for t, _ in found if t in modules and t != m} for m, found in modules.items()}
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                circles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for module in sorted(modules):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_the_checks_see_a_circle_and_an_upward_edge_when_there_is_one(tmp_path):
    """Guard against a graph reader that silently finds nothing."""
    found = graph()
    assert ("nanoagent.agent.runner", False) in found["nanoagent.memory.dream"]
    assert any(t == "nanoagent.memory.consolidator" for t, _ in found["nanoagent.agent.loop"])
    assert ("nanoagent.agent.events", False) in found["nanoagent.agent.runner"]


def test_the_hub_is_the_one_door_to_the_loop_for_channels_the_web_app_and_the_gateways_servers():
    import re

    sides = [*(PACKAGE / "gateway" / "channels").glob("*.py"), *(PACKAGE / "web").glob("*.py"),
             PACKAGE / "gateway" / "http.py", PACKAGE / "gateway" / "server.py"]
    reaching = re.compile(r"\b(?:hub|ctx)\.loop\b|\.hub\.loop\b")
    offenders = [f"{path.relative_to(PACKAGE)}:{number}" for path in sides
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
                 if reaching.search(line)]
    assert len(sides) > 10 and offenders == []
