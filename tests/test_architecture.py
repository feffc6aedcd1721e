"""The architecture's import rules, checked by parsing every module's imports.

1. The Plan is the contract: its readers -- the SIMT model (``astitch_sim/simt``), the
   Numba backend (``gpu_backend``) and the explorer (``app/explorer``) -- follow the
   decisions it records and decide nothing themselves, so they import nothing from the
   planner (``planning/``, and the analysis the strategies run).
2. No module imports another module's underscore names (``from x import _y``, ``x._y``):
   what one module needs from another is public, named and documented there.
3. Imports flow one way between the folders (the pipeline: front ends and passes build on
   the IR, the Plan on those, readers on the Plan, planning on all of them, ``compile`` and
   the command line on top): :data:`MAY_IMPORT` is the table, one row per folder, and
   every import of every module -- ``import x`` inside a function too -- must follow it.
4. No circles between modules, function-level imports included (a lazy import that hides
   a circle is still one).  Imports under ``if TYPE_CHECKING:`` are left out: they never
   run (annotations only), so they cannot make an import order matter.
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


# -- rules 3 and 4: the folders' table, and no circles ------------------------------------------------------------

PACKAGES = ("astitch_sim", "gpu_backend")
E, IR, HW, PASSES, FRONT = ("astitch_sim.errors", "astitch_sim.ir", "astitch_sim.hardware", "astitch_sim.passes",
                            "astitch_sim.frontends")
PLAN, SIMT, PLANNING, FIGS = "astitch_sim.plan", "astitch_sim.simt", "astitch_sim.planning", "astitch_sim.figures"
READS = {E, IR, HW, PLAN}                  # what every reader of the Plan may import
#: each folder (or top-level module) and what it may import besides itself; the package __init__ files are the
#: public API (``import astitch_sim as asim``; ``gpu_backend.run``) and may import their whole package
MAY_IMPORT = {
    E: set(),
    IR: {E},
    HW: {E},
    PASSES: {E, IR},
    FRONT: {E, IR},
    PLAN: {E, IR, HW, PASSES},
    SIMT: READS,
    FIGS: READS | {SIMT},
    PLANNING: READS | {PASSES, SIMT, FRONT},
    "astitch_sim.compiler": READS | {PASSES, PLANNING},
    "astitch_sim.cli": {"*"},
    "astitch_sim.__main__": {"astitch_sim.cli"},
    "astitch_sim": {"astitch_sim.*"},
    "gpu_backend.numba_compat": {E},
    "gpu_backend.prelude": {"gpu_backend.numba_compat"},
    "gpu_backend.intrinsics": {"gpu_backend.numba_compat"},
    "gpu_backend.codegen": READS,
    "gpu_backend.launch": READS | {"gpu_backend.codegen", "gpu_backend.numba_compat"},
    # its command-line tools (typecheck, resource_check, mix_vs_model) compile workloads through the public API
    "gpu_backend.machine": READS | {"gpu_backend.launch", "gpu_backend.codegen", "gpu_backend.numba_compat",
                                    "astitch_sim", "astitch_sim.compiler", FRONT, SIMT},
    "gpu_backend": {"gpu_backend.*"},
}


def package_modules():
    return {module_name(p): p for p in sources(*PACKAGES)}


def folder_of(module: str) -> str:
    """The row of MAY_IMPORT a module belongs to: its folder (``astitch_sim.plan.validate`` -> ``astitch_sim.plan``;
    nested folders belong to the outer one), else the top-level module itself."""
    parts = module.split(".")
    if len(parts) >= 2 and (ROOT / parts[0] / parts[1]).is_dir():
        return ".".join(parts[:2])
    return ".".join(parts[:2]) if len(parts) >= 2 else parts[0]


def type_checking_only(tree) -> set:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                skip.update(id(n) for n in ast.walk(stmt))
    return skip


def module_edges(modules: dict) -> dict:
    """module -> {(line, imported module of ours)}; ``from pkg import mod`` counts as an import of ``pkg.mod``."""
    edges = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = type_checking_only(tree)
        found = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                found.update((node.lineno, a.name) for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = package_of(path).split(".")
                    base = ".".join(pkg[:len(pkg) - (node.level - 1)] + ([base] if base else []))
                for a in node.names:
                    target = f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    if target in modules:
                        found.add((node.lineno, target))
        edges[name] = {(line, t) for line, t in found if t != name}
    return edges


def allowed(source: str, target: str) -> bool:
    a, b = folder_of(source), folder_of(target)
    if a == b:
        return True
    rules = MAY_IMPORT[a]
    return "*" in rules or b in rules or any(r.endswith(".*") and b.startswith(r[:-1]) for r in rules)


def forbidden_imports(modules: dict) -> list:
    return [f"{src} (line {line}) imports {dst}: {folder_of(src)} may import only "
            f"{sorted(MAY_IMPORT[folder_of(src)]) or 'nothing of ours'}"
            for src, found in module_edges(modules).items() for line, dst in sorted(found) if not allowed(src, dst)]


def circles(modules: dict) -> list:
    """The groups of modules that reach each other through imports (the strongly connected components of more
    than one module): a few hundred modules, so plain reachability is quick and easy to check by eye."""
    graph = {m: {t for _, t in found} for m, found in module_edges(modules).items()}
    reach = {}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph.get(m, ()))
        reach[start] = seen
    groups = {tuple(sorted({m} | {n for n in reach[m] if m in reach[n]})) for m in graph if m in reach[m]}
    return sorted(list(g) for g in groups)


def test_every_folder_has_a_row_and_says_what_it_may_import():
    modules = package_modules()
    missing = sorted({folder_of(m) for m in modules} - set(MAY_IMPORT))
    assert not missing, f"add a row to MAY_IMPORT (and a docstring to the folder's __init__) for {missing}"
    for pkg in PACKAGES:
        for init in sorted((ROOT / pkg).rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            assert "may import" in doc.lower(), f"{init.relative_to(ROOT)}: its docstring must say what it may import"


@pytest.mark.parametrize("package", PACKAGES)
def test_at_most_eight_modules_at_the_top(package):
    top = sorted(p.name for p in (ROOT / package).glob("*.py"))
    assert len(top) <= 8, f"{package}/ has {len(top)} modules at the top ({top}): put them in the folder they belong to"


def test_imports_flow_one_way_between_folders():
    bad = forbidden_imports(package_modules())
    assert not bad, "imports against the pipeline's direction (MAY_IMPORT):\n" + "\n".join(bad)


def test_no_import_circles():
    found = circles(package_modules())
    assert not found, ("import circles (function-level imports count): move what both need to the lower "
                       "module:\n" + "\n".join(" <-> ".join(c) for c in found))


def test_the_checks_catch_a_forbidden_import_and_a_circle(tmp_path):
    """The two checks fail when they should: a lazy import of a planner from the IR is both against the table
    and (the planner imports the IR) a circle."""
    modules = package_modules()
    graph = modules["astitch_sim.ir.graph"]
    spoiled = tmp_path / "graph.py"
    spoiled.write_text(graph.read_text() + "\n\ndef _spoil():\n    from ..planning import kernel_builder\n")
    # the copy keeps its module name: module_edges resolves its relative imports from the real path's package
    modules = dict(modules)
    modules["astitch_sim.ir.graph"] = spoiled
    real_package_of = globals()["package_of"]
    try:
        globals()["package_of"] = lambda p: "astitch_sim.ir" if p == spoiled else real_package_of(p)
        assert any("astitch_sim.ir.graph" in b and "astitch_sim.planning.kernel_builder" in b
                   for b in forbidden_imports(modules))
        assert any("astitch_sim.ir.graph" in c and "astitch_sim.planning.kernel_builder" in c
                   for c in circles(modules))
    finally:
        globals()["package_of"] = real_package_of


def test_every_import_of_ours_names_a_module_that_exists():
    """An import of a module that moved away must fail here, not quietly find an old copy elsewhere on the path
    (an editable install of another checkout serves ``astitch_sim.reference`` long after it moved to ir/)."""
    modules = package_modules()
    bad = []
    for path in sources(*OURS):
        for line, module, names in imports(path):
            if module.split(".")[0] in PACKAGES and module not in modules:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}, which is not a module of the tree")
    assert not bad, "\n".join(bad)


def test_every_test_folder_is_on_pytests_path():
    """Test modules import each other by name across the area folders (``from test_hlo import ...``): pytest's
    ``pythonpath`` (pyproject.toml) lists tests/ and every area folder, so a new folder cannot be forgotten."""
    import re
    block = re.search(r"^pythonpath = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.S | re.M)
    listed = set(re.findall(r'"([^"]+)"', block.group(1)))
    areas = {f"tests/{p.name}" for p in (ROOT / "tests").iterdir()
             if p.is_dir() and p.name not in ("fixtures", "__pycache__") and any(p.glob("test_*.py"))}
    assert areas | {".", "tests"} <= listed, sorted(areas - listed)
