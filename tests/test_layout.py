"""The house's rules, read from the code: wings import one way, no cycles, the task wing needs no torch, and no
module outside a task's own names it."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "grpo_kit"
#: Each wing may import its own modules and those of the wings before it, never one after it.
WINGS = ["system", "tasks", "policy", "evaluation", "training", "runs"]
TOP = len(WINGS)  # cli.py, demo.py, notebook.py, __main__.py, __init__.py
#: Packages the task wing must not import, even lazily: it runs wherever Python does.
HEAVY = {"torch", "trl", "transformers", "peft", "accelerate", "vllm", "unsloth", "deepspeed"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _rank(module: str) -> int:
    parts = module.split(".")
    return WINGS.index(parts[1]) if len(parts) > 1 and parts[1] in WINGS else TOP


def _imports(path: Path) -> list[tuple[str, int]]:
    """``(imported module, line)`` for every import in the file, those inside functions too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


def test_the_wings_import_one_way():
    modules = _modules()
    climbs = []
    for name, path in modules.items():
        for imported, line in _imports(path):
            target = next((m for m in (imported, imported.rsplit(".", 1)[0]) if m in modules), None)
            if target is not None and _rank(target) > _rank(name):
                climbs.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert not climbs, "a wing imports one above it:\n" + "\n".join(climbs)


def test_the_front_doors_stand_side_by_side():
    """cli.py, notebook.py and demo.py each call the pipeline (grpo_kit.runs); none imports another."""
    doors = {f"grpo_kit.{name}" for name in ("cli", "notebook", "demo")}
    found = [f"{name} imports {imported} (line {line})" for name in sorted(doors)
             for imported, line in _imports(_modules()[name])
             if {imported, imported.rsplit(".", 1)[0]} & (doors - {name})]
    assert not found, "\n".join(found)


def test_no_import_cycle():
    """No module imports one that imports it back, however indirectly. An import inside a function counts (it only
    hides the cycle until the call), and so does a module's import of its own package (``from grpo_kit.tasks import
    X`` inside ``grpo_kit.tasks.rewards`` runs ``grpo_kit/tasks/__init__.py``, which may import the module back)."""
    modules = _modules()
    graph = defaultdict(set)
    for name, path in modules.items():
        for imported, _ in _imports(path):
            target = next((m for m in (imported, imported.rsplit(".", 1)[0]) if m in modules), None)
            if target is not None and target != name:
                graph[name].add(target)
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join([*trail, node, nxt])
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for node in list(modules):
        if node not in state:
            visit(node, [])


def test_the_task_wing_needs_no_torch_or_trl():
    heavy = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"
             for path in (PACKAGE / "tasks").rglob("*.py") for name, line in _imports(path)
             if name.split(".")[0] in HEAVY]
    assert not heavy, "\n".join(heavy)
    code = "import sys, grpo_kit, grpo_kit.tasks; print(sorted(m for m in sys.modules if m.split('.')[0] in %r))"
    out = subprocess.run([sys.executable, "-c", code % HEAVY], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _code_words(path: Path) -> list[tuple[str, int]]:
    """Names and string constants of the code, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.append((node.id, node.lineno))
        elif isinstance(node, ast.Attribute):
            words.append((node.attr, node.lineno))
        elif isinstance(node, ast.alias):
            words.append((node.name, node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append((node.value, node.lineno))
    return words


def test_no_module_outside_a_tasks_own_names_it():
    tasks = {"gsm8k", "countdown", "math500"}
    named = []
    for path in PACKAGE.rglob("*.py"):
        own = path.stem if path.parent.name == "tasks" else None
        catalogs = (PACKAGE / "tasks" / "__init__.py", PACKAGE / "tasks" / "reward_registry.py")  # they list them
        if path in catalogs or path.parent.name == "data_files":
            continue
        for word, line in _code_words(path):
            for task in tasks - {own}:
                if task in word.lower() and not word.startswith("grpo_kit.tasks."):
                    named.append(f"{path.relative_to(PACKAGE.parent)}:{line} names {task} ({word!r})")
    assert not named, "\n".join(named)
