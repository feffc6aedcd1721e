"""Build, run and verify the tutorials (instructors, CI and authors use this one script).

    python tutorials/build.py sync               # instructor/*.py -> .ipynb (no outputs), then the student
                                                 #   release (tutorials/NN_*.ipynb, tutorials/tests/)
    python tutorials/build.py check-sync         # exit 1 if a notebook or public test differs from sync's
    python tutorials/build.py student [--out D]  # otter assign: student notebooks (solutions stripped)
                                                 #   and autograder zips, in D (default tutorials/dist)
    python tutorials/build.py grade dist/NN_name SUBMISSION... --out R
                                                 # otter run each submission (a notebook or a folder of
                                                 #   them) against NN's autograder; results.json in R
                                                 #   (created if missing), one folder per submission
    python tutorials/build.py run [--out D] [NN ...]
                                                 # execute the notebooks with their solutions in a fresh
                                                 #   kernel, verify every check, keep executed copies
                                                 #   (with outputs and figures) in D (default tutorials/dist/executed)

The masters live in ``instructor/``: jupytext percent-format ``NN_*.py`` sources (reviewable diffs), each
paired with an ``NN_*.ipynb`` committed *without outputs*, in otter-grader's format (solutions, a public and
a hidden test per question; the hidden tests call ``instructor/grading/``).  ``sync`` rewrites the masters'
notebooks and then the student release in ``tutorials/``: otter assign's student notebooks (no solutions, no
hidden tests) and their public tests in ``tutorials/tests/``; ``check-sync`` compares all of it.

What ``run`` (and the test ``tests/tutorials/test_tutorials.py``) verifies for each notebook:
1. it executes top to bottom in a fresh kernel (nbclient), solutions included,
   so every check runs on the right answer;
2. otter-grader's student path (``grader.check``: the public tests) and the
   autograder's tests (public and hidden) pass every question on the notebook's
   own solution (the student build is made first);
3. every plausible wrong answer registered with a hidden check (``@exercise(wrong=[...])``)
   is rejected, both by the hidden test cell and by the autograder's tests, with a
   message that does not contain the right answer;
4. every question of the notebook has a check and every check a question.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TUTORIALS = Path(__file__).resolve().parent
REPO = TUTORIALS.parent
#: instructor material: the master notebooks (solutions, public and hidden tests) and the hidden checks
INSTRUCTOR = TUTORIALS / "instructor"
#: the student release in the repository: otter assign's student notebooks and their public tests
STUDENT_TESTS = TUTORIALS / "tests"
#: what a notebook run needs beside the notebooks (copied, so a run never writes into the checkout)
SUPPORT = ("checks", "data")


def sources() -> list:
    """The master notebooks' sources (instructor/NN_*.py), in course order."""
    return sorted(INSTRUCTOR.glob("[0-9][0-9]_*.py"))


def module_of(path) -> str:
    """``01_why_memory_bound.py`` -> ``nb01`` (its checks module)."""
    return "nb" + Path(path).name[:2]


def _jupytext():
    try:
        import jupytext
    except ImportError:
        raise SystemExit("this needs jupytext: pip install -e '.[tutorials]'") from None
    return jupytext


def notebook_from_source(py):
    """The notebook a .py source describes, outputs empty, with a kernelspec (otter needs one)."""
    jupytext = _jupytext()
    nb = jupytext.read(py)
    seen: dict = {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        # cell ids from the content, so that re-syncing an unchanged cell changes nothing in git
        digest = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:12]
        seen[digest] = seen.get(digest, 0) + 1
        cell.id = digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"
    nb.metadata.setdefault("kernelspec", {"display_name": "Python 3 (ipykernel)", "language": "python",
                                          "name": "python3"})
    return nb


def _cells(nb) -> list:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def out_of_sync(release: bool = True, assigned=None) -> list:
    """Sources whose .ipynb is missing, differs from the .py, or carries outputs; with ``release``, student
    notebooks or public tests in tutorials/ that differ from what otter assign makes of the masters
    (``assigned``: see :func:`build_release`)."""
    import nbformat
    bad = release_out_of_sync(assigned) if release else []
    for py in sources():
        ipynb = py.with_suffix(".ipynb")
        if not ipynb.exists():
            bad.append(f"{ipynb.name}: missing (run python tutorials/build.py sync)")
            continue
        nb = nbformat.read(ipynb, as_version=4)
        if _cells(nb) != _cells(notebook_from_source(py)):
            bad.append(f"{ipynb.name}: differs from {py.name} (run python tutorials/build.py sync)")
        if any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
            bad.append(f"{ipynb.name}: has outputs; commit notebooks without outputs (build.py sync)")
    return bad


def sync() -> None:
    import nbformat
    for py in sources():
        nb = notebook_from_source(py)
        nb.metadata["jupytext"] = {"formats": "ipynb,py:percent"}
        nbformat.write(nb, py.with_suffix(".ipynb"))
        print(f"wrote {py.with_suffix('.ipynb').relative_to(REPO)}")
    write_release()


def build_release(assigned=None) -> dict:
    """``{path relative to tutorials/: text}``: the student release otter assign makes of the masters -- each
    student notebook (solutions stripped, hidden tests gone, a ``grader.check`` per question; cell ids from
    the content, no outputs) and the public tests in ``tests/``.  ``assigned(name)``, if given, is the folder
    otter assign already made of master ``name`` (the tests make one per notebook and share it); else each
    master is assigned here, in a temporary folder."""
    import nbformat
    out = {}
    with tempfile.TemporaryDirectory(prefix="astitch-release-") as tmp:
        tut = stage_copy(Path(tmp), wheel=False) if assigned is None else None
        for py in sources():
            built = assigned(py.stem) if assigned is not None else \
                assign(tut / py.with_suffix(".ipynb").name, Path(tmp) / "dist" / py.stem)
            nb = nbformat.read(built / "student" / f"{py.stem}.ipynb", as_version=4)
            seen: dict = {}
            for cell in nb.cells:
                if cell.cell_type == "code":
                    cell.outputs, cell.execution_count = [], None
                digest = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:12]
                seen[digest] = seen.get(digest, 0) + 1
                cell.id = digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"
                cell.metadata = {}
            nb.metadata.pop("jupytext", None)
            out[f"{py.stem}.ipynb"] = nbformat.writes(nb) + "\n"
            for t in sorted((built / "student" / "tests").glob("*.py")):
                out[f"tests/{t.name}"] = t.read_text()
    return out


def release_files() -> set:
    return {p.relative_to(TUTORIALS).as_posix() for p in
            [*TUTORIALS.glob("[0-9][0-9]_*.ipynb"), *STUDENT_TESTS.glob("*.py")]}


def write_release() -> None:
    files = build_release()
    for stale in release_files() - set(files):
        (TUTORIALS / stale).unlink()
    STUDENT_TESTS.mkdir(exist_ok=True)
    for rel, text in files.items():
        (TUTORIALS / rel).write_text(text)
    print(f"wrote the student release: {len(files)} files in tutorials/ (notebooks) and tutorials/tests/")


def release_out_of_sync(assigned=None) -> list:
    files = build_release(assigned)
    bad = [f"tutorials/{rel}: not what otter assign makes of the masters (run python tutorials/build.py sync)"
           for rel, text in files.items() if not (TUTORIALS / rel).exists() or (TUTORIALS / rel).read_text() != text]
    bad += [f"tutorials/{rel}: no master makes it (run python tutorials/build.py sync)"
            for rel in sorted(release_files() - set(files))]
    return bad


def stage_copy(dest: Path, wheel: bool = True) -> Path:
    """What otter assign and the master notebooks need, in one folder: dest/tutorials holds the masters, the
    public ``checks``, the hidden ``grading``, ``data``, and (``wheel``) astitch-sim's wheel and the
    requirements naming it; dest/benchmarks/results is the checkout's."""
    tut = dest / "tutorials"
    tut.mkdir(parents=True, exist_ok=True)
    for py in sources():
        shutil.copy(py.with_suffix(".ipynb"), tut)
    for src in [*(TUTORIALS / name for name in SUPPORT), INSTRUCTOR / "grading"]:
        if src.exists():
            shutil.copytree(src, tut / src.name, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    results = REPO / "benchmarks" / "results"
    if results.exists():
        shutil.copytree(results, dest / "benchmarks" / "results", dirs_exist_ok=True)
        # what notebook 6 reads, beside the notebooks too: its ``files:`` ship it to students and to the
        # autograder, whose submission folder has no checkout around it (q3 scored 0 there)
        for f in results_files():
            target = tut / "benchmarks" / "results" / f.relative_to(results)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, target)
    if wheel:
        autograder_environment(tut)
    else:                                   # the student release needs neither; otter assign needs them named
        (tut / "wheels").mkdir(exist_ok=True)
        (tut / "requirements.txt").write_text("")
    return tut


def results_files() -> list:
    """The files of ``benchmarks/results`` notebook 6 reads: the SIMT model's predictions and every GPU run's
    ``results.json`` (what ``asim.gpu_measurements`` collects)."""
    results = REPO / "benchmarks" / "results"
    return sorted({results / "simt_predictions.json", *results.rglob("results.json")} & set(results.rglob("*")))


def build_wheel(dest: Path) -> Path:
    """A wheel of this checkout's astitch-sim (``astitch_sim`` and ``gpu_backend``) in ``dest``; built from a
    copy, so the build writes nothing into the checkout."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="astitch-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (REPO / name).exists():
                shutil.copy(REPO / name, src / name)
        for pkg in ("astitch_sim", "gpu_backend"):
            shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
        cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dest),
               str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"building astitch-sim's wheel failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    wheels = sorted(dest.glob("astitch_sim-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one astitch-sim wheel in {dest}, found {[w.name for w in wheels]}")
    return wheels[0]


#: where Gradescope (and ``otter grade``'s Docker image) unpacks an autograder zip's ``files/``
AUTOGRADER_FILES = "/autograder/source/files"


def autograder_environment(tut: Path) -> None:
    """What the masters' ``requirements: requirements.txt`` and ``autograder_files: [wheels]`` name: a wheel of
    this checkout in ``wheels/`` and a requirements file installing it with the tutorials extra, so that the
    autograder's environment (otter's environment.yml: Gradescope, ``otter grade``) has astitch-sim -- it is on
    no package index.  ``otter run`` (``build.py grade``) grades in the current environment instead."""
    wheel = build_wheel(tut / "wheels")
    (tut / "requirements.txt").write_text(
        "# astitch-sim, from the wheel the autograder zip carries (tutorials/build.py writes this file)\n"
        f"astitch-sim[tutorials] @ file://{AUTOGRADER_FILES}/wheels/{wheel.name}\n")


def assign(ipynb: Path, out: Path) -> Path:
    """``otter assign`` one master notebook into ``out`` (student/ and autograder/); returns ``out``."""
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "otter", "assign", str(ipynb), str(out)]
    proc = subprocess.run(cmd, cwd=ipynb.parent, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"otter assign {ipynb.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return out


VERIFY = r'''
import inspect as _inspect, json as _json, re as _re
import otter as _otter
from checks import core as _core

def _forms(v):
    """How the right answer could appear in a hint (numbers with word boundaries)."""
    if isinstance(v, bool) or v is None:
        return []
    if isinstance(v, str):
        return [v]
    try:
        import numbers
        if isinstance(v, numbers.Real):
            f = float(v)
            out = {f"{f:.3g}", f"{f:.4g}", f"{f:.2f}", repr(v)}
            if f == int(f):
                out.add(str(int(f)))
            return sorted(out)
    except Exception:
        pass
    if isinstance(v, dict):
        return [f"{k}: {x}" for k, x in v.items()] or []
    if isinstance(v, (list, tuple, set, frozenset)) and all(isinstance(x, str) for x in v):
        return list(v)
    return []

def _leaks(msg, v):
    forms = _forms(v)
    if not forms:
        return False
    hits = [f for f in forms if _re.search(r"(?<![\w.])" + _re.escape(f) + r"(?![\w])", msg)]
    if isinstance(v, (str, int, float)) and not isinstance(v, bool):
        return bool(hits)
    return len(hits) == len(forms)          # a collection: leaked when every item is named

_report = {"checked": {}, "problems": []}
_grader = _otter.Notebook(nb_path=__STUDENT_NB__, tests_dir=__TESTS_DIR__)        # the student's: public
_hidden = _otter.Notebook(nb_path=__STUDENT_NB__, tests_dir=__AUTOGRADER_TESTS__)  # the autograder's: all
for _name, _ex in _core.exercises(__MODULE__).items():
    _test = globals().get("test_" + _name)
    if _test is None:
        _report["problems"].append(f"{_name}: the notebook has no test cell test_{_name}")
        continue
    _params = list(_inspect.signature(_test).parameters)
    _right = {p: globals().get(p) for p in _params}
    for _which, _g in (("grader.check", _grader), ("the autograder's tests", _hidden)):
        _res = _g.check(_name, dict(globals()))
        if not _res.passed_all:
            _report["problems"].append(f"{_name}: {_which} fails on the notebook's solution: {_res}")
    if not _ex.wrong:
        _report["problems"].append(f"{_name}: no wrong answers registered")
    _n = 0
    for _args in _ex.wrong_arguments(dict(globals())):
        _n += 1
        try:
            _test(**_args)
        except AssertionError as _e:
            _msg = str(_e)
            if not _msg.strip():
                _report["problems"].append(f"{_name}: wrong answer {_args} rejected with no message")
            for _p, _v in _right.items():
                if _p in _args and _leaks(_msg, _v):
                    _report["problems"].append(f"{_name}: the hint for {_args} gives the answer away: {_msg}")
        else:
            _report["problems"].append(f"{_name}: wrong answer {_args} accepted")
        _env = dict(globals()); _env.update(_args)
        if _hidden.check(_name, _env).passed_all:
            _report["problems"].append(f"{_name}: the autograder's tests accept wrong answer {_args}")
    _report["checked"][_name] = _n
_questions = __QUESTIONS__
_missing = sorted(set(_questions) - set(_report["checked"]))
if _missing:
    _report["problems"].append(f"questions without a registered check: {_missing}")
print("VERIFY-REPORT " + _json.dumps(_report, default=str))
'''


def questions(nb) -> list:
    """Question names of a master notebook (its ``# BEGIN QUESTION`` raw cells)."""
    import yaml
    out = []
    for c in nb.cells:
        if c.cell_type == "raw" and c.source.lstrip().startswith("# BEGIN QUESTION"):
            out.append(yaml.safe_load(c.source.split("\n", 1)[1])["name"])
    return out


def execute(ipynb: Path, student: Path, timeout: int = 600) -> tuple:
    """Execute a master notebook in a fresh kernel, then verify its checks in the same kernel.

    Returns ``(executed notebook, report dict, seconds)``; raises on a failing cell.
    """
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(ipynb, as_version=4)
    qs = questions(nb)
    student_nb = student / "student" / ipynb.name
    code = (VERIFY.replace("__STUDENT_NB__", repr(str(student_nb)))
            .replace("__TESTS_DIR__", repr(str(student / "student" / "tests")))
            .replace("__AUTOGRADER_TESTS__", repr(str(student / "autograder" / "tests")))
            .replace("__MODULE__", repr(module_of(ipynb))).replace("__QUESTIONS__", repr(qs)))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(ipynb.parent)}})
    t0 = time.time()
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            client.execute_cell(cell, i)
        extra = nbformat.v4.new_code_cell(code)
        nb.cells.append(extra)
        client.execute_cell(extra, len(nb.cells) - 1)
    seconds = time.time() - t0
    report = None
    for out in nb.cells[-1].outputs:
        text = out.get("text", "")
        for line in text.splitlines():
            if line.startswith("VERIFY-REPORT "):
                report = json.loads(line[len("VERIFY-REPORT "):])
    nb.cells.pop()                                    # the executed copy shows only the notebook itself
    if report is None:
        raise RuntimeError(f"{ipynb.name}: the verification cell printed no report: {nb.cells[-1]}")
    return nb, report, seconds


def run(selected=None, out: Path | None = None) -> int:
    import nbformat
    failures = 0
    with tempfile.TemporaryDirectory(prefix="astitch-tutorials-") as tmp:
        tut = stage_copy(Path(tmp))
        for py in sources():
            if selected and not any(py.name.startswith(s) for s in selected):
                continue
            ipynb = tut / py.with_suffix(".ipynb").name
            built = assign(ipynb, Path(tmp) / "dist" / py.stem)
            nb, report, seconds = execute(ipynb, built)
            status = "ok" if not report["problems"] else "PROBLEMS"
            print(f"{py.stem}: {status} in {seconds:.1f}s; wrong answers rejected per check: {report['checked']}")
            for p in report["problems"]:
                print(f"  - {p}")
            failures += bool(report["problems"])
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, out / ipynb.name)
    return failures


def student(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="astitch-tutorials-") as tmp:
        tut = stage_copy(Path(tmp))
        for py in sources():
            built = assign(tut / py.with_suffix(".ipynb").name, Path(tmp) / "dist" / py.stem)
            dest = out / py.stem
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(built, dest, ignore=shutil.ignore_patterns("__pycache__"))
            print(f"{py.stem}: student/ and autograder/ in {dest.relative_to(Path.cwd()) if dest.is_relative_to(Path.cwd()) else dest}")


def grade(autograder: Path, submissions: list, out: Path) -> dict:
    """Grade submissions with ``otter run`` (no Docker; the current environment, which has astitch-sim).

    ``autograder`` is a built notebook folder (``dist/NN_name``), its ``autograder/`` folder or the zip;
    each submission's ``results.json`` goes to ``out/<submission name>/`` (one notebook: ``out/`` itself);
    ``out`` and its parents are created (``otter run -o`` wants an existing folder).  Returns
    ``{submission: {question: score}}`` and prints a table."""
    autograder = Path(autograder)
    zips = ([autograder] if autograder.suffix == ".zip" else
            sorted(autograder.glob("*.zip")) or sorted(autograder.glob("autograder/*.zip")))
    if len(zips) != 1:
        raise SystemExit(f"{autograder}: expected one autograder zip (python tutorials/build.py student builds "
                         f"it), found {len(zips)}")
    paths = []
    for s in submissions:
        s = Path(s)
        paths += (sorted(n for n in s.rglob("*.ipynb") if ".ipynb_checkpoints" not in n.parts) if s.is_dir()
                  else [s])
    if not paths:
        raise SystemExit("no submissions to grade")
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"no such submission: {missing[0]}")
    stems = [p.stem for p in paths]
    unique = len(set(stems)) == len(stems)       # a class's folder: student_a/06_x.ipynb, student_b/06_x.ipynb
    scores = {}
    for p in paths:
        dest = out if len(paths) == 1 else out / (p.stem if unique else f"{p.parent.name}_{p.stem}")
        dest.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "otter", "run", "-a", str(zips[0].resolve()), "-o", str(dest.resolve()),
               str(p.resolve())]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        results = dest / "results.json"
        if proc.returncode != 0 or not results.exists():
            raise RuntimeError(f"otter run {p} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        data = json.loads(results.read_text())
        graded = [t for t in data["tests"] if "score" in t]        # otter adds an unscored "Public Tests" row
        scores[str(p)] = {t["name"]: t["score"] for t in graded}
        print(f"{p}: {sum(t['score'] for t in graded):g} / {sum(t['max_score'] for t in graded):g}  ->  {results}")
    return scores


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sync", help="write every .ipynb from its .py source (no outputs)")
    sub.add_parser("check-sync", help="exit 1 if an .ipynb differs from its .py source")
    s = sub.add_parser("student", help="otter assign: student notebooks and autograder zips")
    s.add_argument("--out", type=Path, default=TUTORIALS / "dist")
    gr = sub.add_parser("grade", help="grade submissions with otter run (results.json per submission)")
    gr.add_argument("autograder", type=Path, help="dist/NN_name (or its autograder zip)")
    gr.add_argument("submissions", nargs="+", type=Path, help="notebooks, or folders of them")
    gr.add_argument("--out", "-o", type=Path, required=True, help="results folder (created if missing)")
    r = sub.add_parser("run", help="execute and verify the notebooks; keep executed copies")
    r.add_argument("--out", type=Path, default=TUTORIALS / "dist" / "executed")
    r.add_argument("only", nargs="*", help="notebook numbers (01 02 ...); default all")
    a = ap.parse_args(argv)
    if a.cmd == "sync":
        sync()
        return 0
    if a.cmd == "check-sync":
        bad = out_of_sync()
        print("\n".join(bad) or "all notebooks in sync with their sources")
        return 1 if bad else 0
    if a.cmd == "student":
        student(a.out.resolve())
        return 0
    if a.cmd == "grade":
        grade(a.autograder, a.submissions, a.out)
        return 0
    return 1 if run(a.only, a.out.resolve()) else 0


if __name__ == "__main__":
    sys.exit(main())
