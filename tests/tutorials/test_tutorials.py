"""The tutorials (tutorials/): each notebook runs top to bottom with its solutions in a fresh kernel, every
check passes the solution through otter-grader's student path and rejects every registered wrong answer
with a hint that does not contain the answer; the sources and notebooks agree; the student build strips
the solutions.  ``tutorials/build.py`` does the work (instructors run the same code)."""
from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest
from anchor import TESTS_FILE

# a GPU image has no Jupyter stack: `pytest -m gpu` must still collect (tests/benchmarks/test_gpu_session.py checks it)
nbformat = pytest.importorskip("nbformat", reason="the tutorials need the test extra: pip install -e '.[test]'")

REPO = Path(TESTS_FILE).resolve().parent.parent
spec = importlib.util.spec_from_file_location("tutorials_build", REPO / "tutorials" / "build.py")
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)

NOTEBOOKS = [p.stem for p in build.sources()]


def test_there_are_seven_notebooks_in_sequence():
    assert len(NOTEBOOKS) >= 7
    assert [n[:2] for n in NOTEBOOKS] == [f"{i:02d}" for i in range(1, len(NOTEBOOKS) + 1)]


def test_notebooks_match_their_sources_and_carry_no_outputs(assigned):
    """The .ipynb files are their .py sources without outputs, and the student release in tutorials/ is what
    otter assign makes of them (the module's one assign per notebook, shared with the tests below)."""
    assert build.out_of_sync(assigned=assigned) == []


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_structure(name):
    nb = nbformat.read(build.INSTRUCTOR / f"{name}.ipynb", as_version=4)
    md = [c.source for c in nb.cells if c.cell_type == "markdown"]
    head = md[0]
    assert "Learning goals" in head and "Prerequisites" in head and "minutes" in head
    qs = build.questions(nb)
    assert 2 <= len(qs) <= 4, qs
    raw = [c.source for c in nb.cells if c.cell_type == "raw"]
    for tag in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN TESTS", "END TESTS", "END QUESTION"):
        assert sum(r.startswith(f"# {tag}") for r in raw) == len(qs), (name, tag)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    for q in qs:                                     # every question's test cell calls its check
        assert any(f"def test_{q}(" in c and f"{build.module_of(name)}.{q}(" in c for c in code), q
    assert any(s.startswith("## Our numbers") for s in md), "ends with a figure of our own numbers"
    for c in code:                                   # the public API only
        assert "from astitch_sim." not in c.replace("from astitch_sim import figures", "")
        assert "._" not in c.replace("__", ""), "no private names in notebook cells"


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    return build.stage_copy(tmp_path_factory.mktemp("tutorials"))


@pytest.fixture(scope="module")
def assigned(staged):
    """``assigned(name)``: otter assign of a staged master (student/ and autograder/), made once per module:
    several tests read it (they grade copies of it, execute beside it, parse it) and none writes into it."""
    made = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = build.assign(staged / f"{name}.ipynb", staged.parent / "dist" / name)
        return made[name]
    return get


def python_of(cell_source: str) -> str:
    """A code cell as Python: IPython's ``!shell`` and ``%magic`` lines blanked (kept as lines, so line numbers
    match the cell)."""
    return "\n".join("" if line.lstrip().startswith(("!", "%")) else line for line in cell_source.splitlines())


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_student_cell_is_valid_python(name, assigned):
    """``otter assign`` turns each ``# SOLUTION`` line into ``...`` with that line's indent: a solution that
    continued over two lines left a stray indented ``...`` behind (an IndentationError in the student's copy
    of nb02 q3, nb04 q3 and nb07 q3).  Every code cell of every student notebook must parse."""
    import ast
    built = assigned(name)
    student = nbformat.read(built / "student" / f"{name}.ipynb", as_version=4)
    cells = [c.source for c in student.cells if c.cell_type == "code"]
    assert cells
    for i, src in enumerate(cells):
        try:
            ast.parse(python_of(src))
        except SyntaxError as e:
            pytest.fail(f"{name}: student code cell {i} is not valid Python ({e}):\n{src}")


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_its_checks_reject_wrong_answers(name, staged, assigned):
    ipynb = staged / f"{name}.ipynb"
    built = assigned(name)
    nb, report, seconds = build.execute(ipynb, built)
    assert report["problems"] == [], "\n".join(report["problems"])
    assert set(report["checked"]) == set(build.questions(nb))
    assert all(n >= 2 for n in report["checked"].values()), report["checked"]
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    images = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.outputs if "image/png" in o.get("data", {})]
    last_code = max(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    assert images and images[-1] == last_code, "the notebook ends in a figure"
    # the student version: solutions stripped, a grader.check per question, the tests beside it
    student = nbformat.read(built / "student" / f"{name}.ipynb", as_version=4)
    src = "\n".join(c.source for c in student.cells)
    assert "# SOLUTION" not in src and "BEGIN QUESTION" not in src
    code = "\n".join(c.source for c in student.cells if c.cell_type == "code")
    assert len(re.findall(r"^grader\.check\(", code, re.M)) == len(report["checked"])
    assert sorted(p.stem for p in (built / "student" / "tests").glob("*.py")) == sorted(report["checked"])
    assert list((built / "autograder").glob("*.zip"))


LAX_MASTER = '''# %% [raw]
# # ASSIGNMENT CONFIG
# name: 99_lax
# init_cell: true
# check_all_cell: false
# export_cell: false
# run_tests: false
# tests:
#   files: true
#   ok_format: false
# files:
#   - checks

# %% [markdown]
# Learning goals, Prerequisites.

# %% [raw]
# # BEGIN QUESTION
# name: q1_answer
# points: 1

# %% [raw]
# # BEGIN SOLUTION

# %%
answer = 42  # SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS

# %%
def test_q1_answer(answer):
    from grading import nb99
    nb99.q1_answer(answer)

test_q1_answer(answer)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION
'''

LAX_CHECKS = '''from checks.core import Wrong, exercise, integer

@exercise(wrong=[41, 7])
def q1_answer(answer):
    got = integer(answer, "answer")
    if got == 7:
        raise Wrong("no: the answer is 42")     # a hint that gives the answer away
    # 41 slips through: a check too lax to catch it
'''


@pytest.mark.slow
def test_the_verifier_catches_a_lax_check_and_a_leaking_hint(tmp_path):
    """The harness itself can fail: a check that accepts a wrong answer, or whose hint contains the
    answer, is reported (so a green run of the real notebooks means something)."""
    tut = build.stage_copy(tmp_path, wheel=False)
    (tut / "grading" / "nb99.py").write_text(LAX_CHECKS)
    src = tmp_path / "99_lax.py"
    src.write_text(LAX_MASTER)
    nbformat.write(build.notebook_from_source(src), tut / "99_lax.ipynb")
    built = build.assign(tut / "99_lax.ipynb", tmp_path / "dist" / "99")
    _, report, _ = build.execute(tut / "99_lax.ipynb", built)
    problems = "\n".join(report["problems"])
    assert "wrong answer {'answer': 41} accepted" in problems
    assert "the autograder's tests accept wrong answer {'answer': 41}" in problems
    assert "gives the answer away" in problems


#: a sentence that says "measured" about what the SIMT model (a cost model) computed, with no contrast
MEASURED = re.compile(r"\bmeasur\w*", re.I)
MODEL_WORDS = re.compile(r"SIMT model|simulator|simulated|cost model|astitch-sim|predicted|flops", re.I)
CONTRAST = re.compile(r"\b(not|no|never|nothing|none|against|vs|versus|wall clock|CPU|GPU-measured)\b", re.I)
PAPER_MEASURED = re.compile(r"paper\W+(\w+\W+){0,2}measured", re.I)


def sentences(text: str):
    text = re.sub(r"(?m)^\s*#\s?", "", text)                # comment markers of the percent-format sources
    for chunk in re.split(r"\n\s*\n|\n\s*[-*] |\n\|", text):  # paragraphs, list items, table rows
        yield from re.split(r"(?<=[.;!?])\s+", " ".join(chunk.split()))


def measured_claims(text: str) -> list:
    return [s for s in sentences(text) if MEASURED.search(s) and MODEL_WORDS.search(s)
            and not CONTRAST.search(s) and not PAPER_MEASURED.search(s)]


def app_strings(path: Path) -> str:
    """Every string literal of an explorer module (what its pages can say), one paragraph each."""
    import ast
    parts = [n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
             and isinstance(n.value, str)]
    return "\n\n".join(parts)


def test_the_measured_check_finds_a_prediction_called_measured():
    assert measured_claims("Every claim is run, drawn and measured in astitch-sim's SIMT model. No GPU.")
    assert measured_claims("- Measure TVM's recomputation in flops and predicted time;")
    assert not measured_claims("The paper measured 10 us per launch; the simulator charges 5 us.")
    assert not measured_claims("A prediction of the SIMT model is not a measurement.")


def test_predictions_are_never_called_measured():
    """Every time in the notebooks and the explorer is a prediction of the SIMT model's cost model; no sentence
    may call it measured (only the paper's numbers, the CPU wall clock and committed GPU results are)."""
    texts = {p.name: p.read_text() for p in build.sources()}
    assert len(texts) >= 7
    texts["tutorials/README.md"] = (REPO / "tutorials" / "README.md").read_text()
    for p in sorted((REPO / "app").rglob("*.py")):
        texts[str(p.relative_to(REPO))] = app_strings(p)
    found = {name: measured_claims(text) for name, text in texts.items()}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def setup_cell(name: str) -> str:
    nb = nbformat.read(REPO / "tutorials" / f"{name}.ipynb", as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and "google.colab" in c.source]
    assert len(cells) == 1, f"{name}: one Colab setup cell"
    return cells[0]


@pytest.mark.parametrize("name", NOTEBOOKS)
@pytest.mark.parametrize("on_colab", [False, True])
def test_the_colab_cell_acts_only_on_colab(name, on_colab, monkeypatch, tmp_path):
    """The install cell (git clone, pip install) ran everywhere once uncommented; now it runs only where
    ``google.colab`` is loaded, and there it clones, installs and moves into the clone's tutorials/.  Run here
    with the commands recorded instead of run."""
    import os
    import subprocess
    import sys
    import types
    calls = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    monkeypatch.setattr(os, "chdir", lambda path: calls.append(["chdir", path]))
    monkeypatch.setattr(sys, "path", list(sys.path))
    if on_colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    src = setup_cell(name)
    if not on_colab:
        exec(compile(python_of(src), name, "exec"), {})
        assert calls == []
        return
    with pytest.raises(RuntimeError, match="ASTITCH_SIM_REPO"):        # the placeholder address stops it
        exec(compile(python_of(src), name, "exec"), {})
    assert calls == []
    exec(compile(python_of(src).replace("github.com/YOUR-ORG/", "github.com/example-org/"), name, "exec"), {})
    assert calls[0][:2] == ["git", "clone"] and "https://github.com/example-org/astitch-sim.git" in calls[0]
    assert calls[1][1:4] == ["-m", "pip", "install"] and calls[1][-1].endswith("[tutorials]")
    assert calls[-1] == ["chdir", "/content/astitch-sim/tutorials"]


def test_plan_notes_never_call_a_prediction_measured():
    """The explorer's Compare view and ``print(plan)`` show the planners' notes: astitch's never-behind note
    said its SIMT-model comparison was "measured"."""
    import astitch_sim as asim
    g = asim.workload("paper_fig7", n=32, c=64)
    for s in asim.STRATEGIES:
        plan = asim.compile(g, strategy=s, gpu="V100")
        notes = "\n\n".join(list(plan.notes) + [n for k in plan.kernels for n in k.notes])
        assert not MEASURED.search(notes), (s, notes)       # a planner runs no GPU: nothing it notes is measured


# -- grading (issue 31 item 12) ----------------------------------------------------------------------------

def grade_scores(results_json: Path) -> dict:
    import json
    return {t["name"]: (t["score"], t["max_score"]) for t in json.loads(results_json.read_text())["tests"]
            if "score" in t}


def test_the_autograder_environment_installs_astitch_sim(assigned):
    """otter's environment.yml (Gradescope, ``otter grade``) installed otter and nothing else: no astitch-sim,
    which is on no package index.  The zip now carries a wheel of the checkout and installs it from there."""
    import io
    import zipfile

    import yaml
    built = assigned("01_why_memory_bound")
    (zpath,) = (built / "autograder").glob("*.zip")
    with zipfile.ZipFile(zpath) as z:
        env = yaml.safe_load(z.read("environment.yml"))
        pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
        ours = [r for r in pip if r.replace("_", "-").startswith("astitch-sim")]
        assert len(ours) == 1, pip
        name, url = (x.strip() for x in ours[0].split(" @ "))
        assert name == "astitch-sim[tutorials]"
        prefix = f"file://{build.AUTOGRADER_FILES}/"
        assert url.startswith(prefix), url
        member = "files/" + url[len(prefix):]
        assert member in z.namelist(), (member, z.namelist())
        with zipfile.ZipFile(io.BytesIO(z.read(member))) as wheel:
            names = wheel.namelist()
    assert "astitch_sim/__init__.py" in names and "gpu_backend/__init__.py" in names
    assert any(n.endswith("METADATA") for n in names)


def markdown_before(name: str, question: str) -> tuple:
    """(markdown, code) of a master notebook's cells before a question's solution, the question's prompt
    included."""
    nb = nbformat.read(build.INSTRUCTOR / f"{name}.ipynb", as_version=4)
    md, code, in_q = [], [], False
    for c in nb.cells:
        if c.cell_type == "raw" and c.source.startswith("# BEGIN QUESTION"):
            in_q = f"name: {question}" in c.source
        if in_q and c.cell_type == "raw" and c.source.startswith("# BEGIN SOLUTION"):
            break
        (md if c.cell_type == "markdown" else code if c.cell_type == "code" else []).append(c.source)
    else:
        raise AssertionError(f"{name} has no question {question}")
    return "\n".join(md), "\n".join(code)


def test_the_prose_gives_no_answer_away():
    """What a student reads before an exercise must not state its answer: nb02 q2 listed XLA's kernel ends,
    nb05 q1 said how many blocks each SM holds (times the SMs: the answer), nb05 q4 printed the race count and
    the raced node, nb06 q3 said 'There are none' (and its goals: no GPU measurements yet)."""
    import astitch_sim as asim
    md, _ = markdown_before("02_where_xla_stops", "q2_xla_ends")
    ends = [k.computed[-1] for k in asim.compile(asim.workload("paper_fig7"), "xla", "V100").kernels]
    named = [n for n in ends if re.search(rf"`{re.escape(n)}`", md)]
    assert len(named) < len(ends), named
    md, _ = markdown_before("05_grid_barriers", "q1_max_grid")
    k = asim.compile(asim.workload("softmax", rows=64, cols=30000), "astitch", "V100", launch_search=False).kernels[0]
    per_sm = asim.gpu("V100").blocks_per_wave(k.block, k.shared_bytes, k.registers_per_thread) // 80
    words = {1: "one", 2: "two", 3: "three", 4: "four"}
    assert not re.search(rf"\b(hold|holds|fit|fits)\s+({per_sm}|{words.get(per_sm, per_sm)})\b", md), md
    _, code = markdown_before("05_grid_barriers", "q4_races")
    assert not re.search(r"print\([^)]*(len\(traced\.races\)|traced\.races\[)", code)
    md, code = markdown_before("06_plan_to_cuda", "q3_measurements")
    assert not re.search(r"there are none|no GPU measurements|has no\s+GPU measurements", md, re.I), md
    assert "print(measured)" not in code


def test_hints_say_what_is_missing_and_say_it_whole():
    """nb02 q2's hint for a list missing the output kernel said an expensive broadcast was missing; nb05 q3's
    hint cut the simulator's error at its first colon ('... (AStitchError: ...)')."""
    import dataclasses
    import sys

    import astitch_sim as asim
    paths = [str(REPO / "tutorials"), str(build.INSTRUCTOR)]
    sys.path[:0] = paths
    try:
        from checks.core import Wrong
        from grading import nb02, nb05
    finally:
        del sys.path[:2]
    g = asim.workload("paper_fig7")
    ends = [k.computed[-1] for k in asim.compile(g, "xla", "V100").kernels]
    out = next(e for e in ends if e in {o.name for o in g.outputs})
    with pytest.raises(Wrong) as e:
        nb02.q2_xla_ends([n for n in ends if n != out])
    assert "output" in str(e.value) and "expensive" not in str(e.value)
    tfm = asim.workload("softmax", rows=64, cols=30000)
    v100 = asim.gpu("V100")
    half = dataclasses.replace(v100, name="V100-half", sms=40)
    plan = asim.compile(tfm, "astitch", v100, launch_search=False)     # notebook 5's plan: the paper's split
    moved = asim.Plan(plan.graph, plan.strategy, half, plan.kernels)
    with pytest.raises(asim.AStitchError) as err:
        asim.simulate(moved, asim.random_inputs(tfm))
    with pytest.raises(Wrong) as e:
        nb05.q3_fixed_plan(moved)
    assert str(err.value) in str(e.value)


# -- student and instructor material apart (issue 31, closing paragraph) ---------------------------------

#: a line of a solution block shorter than this (``else:``, ``return out``) may well appear elsewhere
BLOCK_LINE_MIN = 16


def solution_lines(name: str) -> list:
    """The master's solution lines (``x = ...  # SOLUTION``), without the marker, and the lines of its solution
    blocks inside code (``# BEGIN SOLUTION`` ... ``# END SOLUTION`` in a function body: notebook 4's
    ``choose_splits``, notebook 8's whole pass), but for short ones."""
    src = (build.INSTRUCTOR / f"{name}.py").read_text()
    out, inside = [], False
    for line in src.splitlines():
        text = line.strip()
        if text == "# BEGIN SOLUTION":
            inside = True
        elif text == "# END SOLUTION":
            inside = False
        elif "# SOLUTION" in line:
            out.append(line.split("# SOLUTION")[0].strip())
        elif inside and len(text) >= BLOCK_LINE_MIN and not text.startswith("#"):
            out.append(text)
    return out


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_student_notebook_carries_no_answers(name):
    """tutorials/NN_*.ipynb is the student release (the masters, with solutions and hidden tests, live in
    tutorials/instructor/): none of the master's solution lines, no hidden check, a grader.check per question."""
    student = nbformat.read(REPO / "tutorials" / f"{name}.ipynb", as_version=4)
    code = "\n".join(c.source for c in student.cells if c.cell_type == "code")
    sols = solution_lines(name)
    assert sols
    leaked = [line for line in sols if line in code]
    assert not leaked, leaked
    assert "grading" not in code and "# SOLUTION" not in code and "BEGIN QUESTION" not in code
    qs = build.questions(nbformat.read(build.INSTRUCTOR / f"{name}.ipynb", as_version=4))
    assert sorted(re.findall(r'^grader\.check\("(\w+)"\)', code, re.M)) == sorted(qs)
    for q in qs:                                     # the public test beside it checks the form only
        test = (REPO / "tutorials" / "tests" / f"{q}.py").read_text()
        assert "from checks import public" in test and "grading" not in test and "hidden=True" not in test


def test_the_public_checks_hold_no_answers():
    """The check modules students got computed the right answer with astitch-sim (a student could read the
    method off them).  The public ones check forms; the answers live in instructor/grading/ only."""
    import ast
    public = REPO / "tutorials" / "checks"
    assert sorted(p.name for p in public.glob("*.py")) == ["__init__.py", "core.py", "public.py"]
    for p in public.glob("*.py"):                    # astitch-sim's types only: no compiling, no simulating
        tree = ast.parse(p.read_text())
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id == "asim"}
        imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names} | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert used <= {"Graph", "Plan"}, (p.name, used)
        assert not {"gpu_backend", "grading"} & imported, (p.name, imported)
    assert sorted(p.stem for p in (build.INSTRUCTOR / "grading").glob("nb*.py")) == \
        [build.module_of(s) for s in build.sources()]
    spec = importlib.util.spec_from_file_location("checks", public / "__init__.py",
                                                  submodule_search_locations=[str(public)])
    import sys
    mod = importlib.util.module_from_spec(spec)
    sys.modules["checks"] = mod
    try:
        spec.loader.exec_module(mod)
        from checks import public as pub
        from checks.core import Wrong
        every = {q: nb for nb in NOTEBOOKS
                 for q in build.questions(nbformat.read(build.INSTRUCTOR / f"{nb}.ipynb", as_version=4))}
        assert set(pub.FORMS) == set(every)
        for q, forms in pub.FORMS.items():              # a blank answer fails its public check, with a hint
            with pytest.raises(Wrong, match="not answered yet"):
                pub.check(q, **{a: ... for a in forms})
        tree = ast.parse((public / "public.py").read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Compare)
                    and any(isinstance(c, ast.Constant) and isinstance(c.value, (int, float)) and
                            not isinstance(c.value, bool) for c in n.comparators)], "public checks compare values"
    finally:
        for m in [m for m in sys.modules if m == "checks" or m.startswith("checks.")]:
            del sys.modules[m]


#: graded one submission at a time (``build.py grade AUTOGRADER NOTEBOOK``: results.json straight into --out); the
#: others as a class's folder (a results folder per submission).  Notebook 6's q3 once scored 0 on its own
#: solution (the check looked for benchmarks/results above the autograder's submission folder, which has no
#: checkout around it), and ``otter run -o`` refused an output folder that did not exist.
ONE_AT_A_TIME = "06_plan_to_cuda"


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_grading_a_blank_and_a_solved_copy(name, tmp_path, staged, assigned):
    """The documented grading command (``build.py grade``, into a folder that does not exist yet) on the
    student's blank copy scores below full marks on every question, and on the solved copy (otter's
    autograder notebook, the master with its solutions) full marks on every question."""
    built = assigned(name)
    qs = build.questions(nbformat.read(staged / f"{name}.ipynb", as_version=4))
    copies = {"blank": built / "student" / f"{name}.ipynb", "solved": built / "autograder" / f"{name}.ipynb"}
    out = tmp_path / "results" / "not" / "there"
    if name == ONE_AT_A_TIME:
        for who, nb in copies.items():
            assert build.main(["grade", str(built), str(nb), "--out", str(out / who)]) == 0
        results = {who: out / who / "results.json" for who in copies}
    else:
        subs = tmp_path / "class"
        for who, nb in copies.items():
            (subs / who).mkdir(parents=True)
            shutil.copy(nb, subs / who / nb.name)
        assert build.main(["grade", str(built), str(subs), "--out", str(out)]) == 0
        results = {who: out / f"{who}_{name}" / "results.json" for who in copies}
    blank, solved = grade_scores(results["blank"]), grade_scores(results["solved"])
    assert set(blank) == set(solved) == set(qs), (blank, solved)
    assert all(got < full for got, full in blank.values()), blank
    assert all(got == full > 0 for got, full in solved.values()), solved


# -- the lab: write the AStitch pass (issue 31 item 14) --------------------------------------------------------

LAB = "08_write_the_pass"


def lab_grading():
    """The lab's hidden checks (``instructor/grading/nb08.py``) and ``Wrong``, imported as the autograder does."""
    import sys
    sys.path[:0] = [str(REPO / "tutorials"), str(build.INSTRUCTOR)]
    try:
        from checks.core import Wrong
        from grading import nb08
    finally:
        del sys.path[:2]
    return Wrong, nb08


def notebook_workloads(name: str) -> list:
    """The graphs a master builds with ``asim.workload("name", shape=...)`` (literal arguments)."""
    import ast

    import astitch_sim as asim
    out = []
    for node in ast.walk(ast.parse((build.INSTRUCTOR / f"{name}.py").read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "workload" and node.args \
                and isinstance(node.args[0], ast.Constant):
            kw = {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
            if len(kw) == len(node.keywords):
                out.append(asim.workload(node.args[0].value, **kw))
    return out


def test_the_lab_grades_on_graphs_the_notebook_never_builds():
    """The lab's hidden tests run a student's pass on graphs "they have not seen": none of the graphs the
    notebook builds is one of the hidden ones (same ops, names and shapes), and the hidden checks hand the
    student's functions stripped stages (no scheme, no barrier: nothing the kernel builder decided)."""
    import astitch_sim as asim
    _, nb08 = lab_grading()
    shown = {str(g) for g in notebook_workloads(LAB)}
    assert len(shown) >= 4
    hidden = {str(p.graph) for p in nb08.hidden_plans()}
    assert len(hidden) >= 30
    assert not shown & hidden
    plan = nb08.hidden_plans()[0]
    stage = plan.kernels[0].stages[-1]
    bare = nb08._stripped(stage)
    assert (bare.ops, bare.epilogue, bare.mapping) == (stage.ops, stage.epilogue, stage.mapping)
    assert bare.barrier_after is asim.Barrier.NONE and not bare.live_out and not bare.barrier_why


def test_the_labs_hidden_graphs_exercise_every_rule():
    """A hidden test that never meets a rule cannot tell a pass that breaks it: the lab's hidden graphs hold
    every kind of candidate (a reduce, a value leaving the kernel, an expensive op broadcast), every kind of
    merge (sibling reduces, sub-dominants of an epilogue, elementwise values sharing a stage), every scheme,
    and split reductions; its mapping pairs are block-local and not, with and without splits."""
    Wrong, nb08 = lab_grading()
    seen = set()
    for plan, k, scope, outputs in nb08.stitch_kernels():
        g = plan.graph
        leaders = nb08._leaders(k)
        for c in nb08.dominant_candidates(g, scope, outputs):
            node, lead = g[c], g[leaders[c]]
            seen.add("reduce" if node.op == "reduce" else "leaves" if c in outputs else "one-to-many")
            if lead.name != c:
                seen.add("sibling" if node.op == "reduce" else
                         "sub-dominant" if lead.op == "reduce" and node.shape == lead.shape else "elementwise join")
        for name, v in k.values.items():
            if v.stage >= 0 and any(j > v.stage for j in v.read_by):
                per_task = g[name].op == "reduce" or name in k.stages[v.stage].epilogue
                seen.add(f"{v.scheme.value} {'per row' if per_task else 'per element'}")
                if g[name].op == "reduce" and k.stages[v.stage].mapping.splits > 1:
                    seen.add("split")
        reduces = {tuple(g[n].attrs["dimensions"]) for s in k.stages for n in s.ops if g[n].op == "reduce"}
        ranks = {g[n].operands[0].rank for s in k.stages for n in s.ops if g[n].op == "reduce"}
        if ranks == {2} and {(0,), (1,)} <= reduces:
            seen.add("row and column reduces joined")
        seen |= {"column reduce"} if (0,) in reduces and ranks == {2} else set()
        seen |= {"elementwise only"} if not reduces else set()
        if any(g[n].op == "broadcast" and g[n].rank == 2 and tuple(g[n].attrs.get("dimensions", ())) == (1,)
               for n in scope):
            seen.add("a vector broadcast along the rows")
    assert seen >= {"reduce", "leaves", "one-to-many", "sibling", "sub-dominant", "elementwise join",
                    "local per element", "global per element", "regional per row", "global per row", "split",
                    "column reduce", "row and column reduces joined", "elementwise only",
                    "a vector broadcast along the rows"}, seen
    families = {p.graph.name.rstrip("0123456789") for p in nb08.hidden_plans()}
    assert set(nb08.MIXED) <= families, families
    pairs = nb08.mapping_pairs()
    kinds = {(truth, prod.splits > 1, prod == cons) for prod, cons, _, truth in pairs}
    assert {(True, False, False), (True, True, False), (False, False, False), (False, True, False)} <= kinds, kinds


def test_the_labs_plan_assembly_gives_the_planners_plan_for_the_planners_decisions():
    """The seam the lab grades plans through: the planner's stages, assembled again with the planner's own
    schemes imposed, are the planner's kernel (JSON for JSON, but for the values' reasons in words) -- so a plan that differs, differs because
    a student's decision does; and a scheme outside the vocabulary of a value crossing stages is refused."""
    import astitch_sim as asim
    _, nb08 = lab_grading()
    for plan in nb08.hidden_plans():
        again = plan
        for i, k in enumerate(plan.kernels):
            if k.name.startswith("stitch."):
                schemes = {n: v.scheme.value for n, v in k.values.items() if v.stage >= 0 and v.read_later}
                again = nb08.rebuilt(again, i, k.stages, schemes)
        assert _without_whys(again) == _without_whys(plan), plan.graph.name
    plan = next(p for p in nb08.hidden_plans() if any(v.read_later for v in p.kernels[0].values.values()))
    name = next(n for n, v in plan.kernels[0].values.items() if v.stage >= 0 and v.read_later)
    with pytest.raises(asim.AStitchError, match="its scheme must be one of local, regional, global"):
        nb08.rebuilt(plan, 0, plan.kernels[0].stages, {name: "independent"})


def _without_whys(plan) -> dict:
    """A plan's JSON with each value's reason in words left out (an imposed scheme says it was given)."""
    d = plan.to_dict()
    for k in d["kernels"]:
        for v in k.get("values", {}).values():
            v.pop("why", None)
    return d


def test_the_labs_wrong_passes_lose_because_their_plans_lose():
    """A wrong pass fails because the plan its decisions make is refused, computes a wrong value, or is
    predicted slower than the planner's -- not only because a field differs -- for every rule but those
    the instructor's guide names (their plans are as fast on the SIMT model: decisions catch them); a
    packing with fewer threads per row than the planner's is priced too, a wider one is as fast."""
    Wrong, nb08 = lab_grading()
    plan_level = "the plan your decisions make (is refused|computes output .* wrong|is predicted .* slower)"
    for flag in ("leaving", "expensive_only"):
        with pytest.raises(Wrong, match=plan_level):
            nb08.q1_dominants(nb08._variant(nb08._find, flag, **{flag: False}), nb08._merge)
    with pytest.raises(Wrong, match="^find_dominants"):         # decisions only: its plans are as fast
        nb08.q1_dominants(nb08._variant(nb08._find, "broadcast", broadcast=False), nb08._merge)
    for flag in ("siblings", "independent", "epilogue", "elementwise"):
        with pytest.raises(Wrong, match=plan_level):
            nb08.q1_dominants(nb08._find, nb08._variant(nb08._merge, flag, **{flag: False}))
    with pytest.raises(Wrong, match="is predicted .* slower"):
        nb08.q1_dominants(nb08._find, lambda graph, dominants: {d: d for d in dominants})
    reference = nb08._scheme_variant("reference")
    for wrong, match in ((nb08._scheme_variant("w", shared_for_elements=True), "is refused"),
                         (lambda graph, name, producer, readers: "regional", "is refused"),
                         # a per-row value in registers under the paper's trees: the validator refuses it
                         # (only a shuffle leaves the total in every lane, plan/task_registers.py)
                         (lambda graph, name, producer, readers: "local", "is refused: .* only a shuffle"),
                         (lambda graph, name, producer, readers: "global", "is predicted .* slower")):
        with pytest.raises(Wrong, match=match):
            nb08.q2_schemes(nb08._ref_block_local, wrong)
    with pytest.raises(Wrong, match="^choose_scheme"):          # the builder combines a split in global memory
        nb08.q2_schemes(nb08._ref_block_local, nb08._scheme_variant("w", split_global=False))
    nb08.q2_schemes(nb08._ref_block_local, reference)
    with pytest.raises(Wrong, match="packed_owner.*is predicted .* slower"):      # fewer threads per row
        nb08.q3_packing(lambda rows, cols, block=1024: nb08._packed(rows, cols, block, narrow=True))
    with pytest.raises(Wrong, match=r"^packed_owner\([^:]*\): some elements are in the wrong block"):
        nb08.q3_packing(lambda rows, cols, block=1024: nb08._packed(rows, cols, block, round_up=True))


def test_the_labs_checks_reject_a_pass_missing_any_one_rule():
    """The reference rules pass the hidden checks; each rule left out fails them (the notebook's solution
    and these registered wrong passes also go through otter in test_notebook_runs_and_its_checks_...)."""
    Wrong, nb08 = lab_grading()
    nb08.q1_dominants(nb08._find, nb08._merge)
    for flag in ("leaving", "broadcast", "expensive_only"):
        with pytest.raises(Wrong, match="find_dominants"):
            nb08.q1_dominants(nb08._variant(nb08._find, flag, **{flag: False}), nb08._merge)
    for flag in ("siblings", "independent", "epilogue", "elementwise"):
        with pytest.raises(Wrong, match="merge_dominants"):
            nb08.q1_dominants(nb08._find, nb08._variant(nb08._merge, flag, **{flag: False}))
    reference = nb08._scheme_variant("reference")
    nb08.q2_schemes(nb08._ref_block_local, reference)
    for wrong in (nb08._wrong_local_always, nb08._wrong_ignores_splits, nb08._wrong_first_element_only):
        with pytest.raises(Wrong, match="is_block_local"):
            nb08.q2_schemes(wrong, reference)
    for flags in ({"shared_for_elements": True}, {"split_global": False}):
        with pytest.raises(Wrong, match="choose_scheme"):
            nb08.q2_schemes(nb08._ref_block_local, nb08._scheme_variant("wrong", **flags))
    nb08.q3_packing(nb08._packed)
    with pytest.raises(Wrong, match="packed_owner"):
        nb08.q3_packing(lambda rows, cols, block=1024: nb08._packed(rows, cols, block, contiguous=True))
    nb08.q4_shuffle(lambda x, lanes, shfl_xor: nb08._butterflies(_lane_partials(x, lanes), shfl_xor))
    for wrong in (nb08._wrong_numpy_sum, nb08._wrong_contiguous, nb08._wrong_tree):
        with pytest.raises(Wrong, match="warp_row_sum"):
            nb08.q4_shuffle(wrong)


def _lane_partials(x, lanes):
    """Each lane's float32 partial over its strided columns, folded in loop order."""
    import numpy as np
    acc = np.zeros((x.shape[0], lanes), np.float32)
    for start in range(0, x.shape[1], lanes):
        part = x[:, start:start + lanes]
        acc[:, :part.shape[1]] += part
    return acc
