"""The architecture's two import rules, checked by parsing every module's imports.

1. The Plan is the contract: its readers -- the SIMT model (``astitch_sim/simt``), the
   Numba backend (``gpu_backend``) and the explorer (``app/explorer``) -- follow the
   decisions it records and decide nothing themselves, so they import nothing from the
   planner (``kernel_builder``, ``strategies``, ``analysis``).
2. No module imports another module's underscore names (``from x import _y``, ``x._y``):
   what one module needs from another is public, named and documented there.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("astitch_sim", "gpu_backend", "app", "benchmarks", "tests")
READERS = ("astitch_sim/simt", "gpu_backend", "app/explorer")
PLANNER = ("astitch_sim.planning.kernel_builder", "astitch_sim.planning.strategies", "astitch_sim.passes.analysis")


def sources(*roots):
    for root in roots:
        yield from sorted((ROOT / root).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path) -> str:
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(path: Path):
    """``(line, module, names)`` for every import in the file (function-level ones too), relative
    imports resolved to absolute module names; ``names`` is None for ``import x``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package_of(path).split(".")
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            yield node.lineno, base, [a.name for a in node.names]


def is_ours(module: str) -> bool:
    return module.split(".")[0] in OURS


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_the_rules_see_imports():
    """The parser finds relative, absolute and function-level imports (else the rules check nothing)."""
    found = list(imports(ROOT / "astitch_sim/simt/executor.py"))
    assert any(m == "astitch_sim.plan.plan" and "Plan" in (n or []) for _, m, n in found)
    assert any(m == "astitch_sim.simt" and "schedule" in (n or []) for _, m, n in found)   # inside a function
    planner = list(imports(ROOT / "astitch_sim/planning/strategies/astitch.py"))    # a planner module does import it
    assert any(m == "astitch_sim.planning.kernel_builder" for _, m, n in planner)
    assert len(list(sources(*READERS))) > 30


@pytest.mark.parametrize("reader", READERS)
def test_readers_import_nothing_from_the_planner(reader):
    bad = []
    for path in sources(reader):
        for line, module, names in imports(path):
            targets = [module] + [f"{module}.{n}" for n in names or ()]
            if any(t == p or t.startswith(p + ".") for t in targets for p in PLANNER):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports from {module} {names or ''}")
    assert not bad, ("readers of the Plan must not import the planner (record the fact in the Plan "
                     "instead):\n" + "\n".join(bad))


def test_no_module_imports_another_modules_underscore_names():
    bad = []
    for path in sources(*OURS):
        ours = set()          # names bound to modules of ours in this file
        for line, module, names in imports(path):
            if not is_ours(module):
                continue
            if names is None:
                ours.add(module.split(".")[0])
            else:
                bad += [f"{path.relative_to(ROOT)}:{line} from {module} import {n}" for n in names if private(n)]
                ours.update(names)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and private(node.attr):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in ours:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} uses {base.id}...{node.attr}")
    assert not bad, "underscore names are private to their module; make them public there:\n" + "\n".join(bad)
