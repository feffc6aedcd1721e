"""How many global loads and stores one thread of a generated kernel executes, read off its Python source.

A static SASS count says how many instructions a kernel's main body holds, not how often a thread runs
them: a loop the compiler kept runs its body once per trip, and ``ptxas`` unrolls the generated loops
(a column reduction's ``for inner in range(256)`` becomes a loop of 16 copies of the body, 16 trips).
Counting the kept body once per *element* -- what :mod:`.sass_profile` assumed before -- made that
column reduction look issue-bound at 228 instructions per element where a thread issues about 14.

The generated source states every trip count (its loops are ``for i in range(N)`` with constant ``N``,
``gpu_backend/codegen/task_loops.py``, ``loops.py``), and every global access is a call of one of the
access intrinsics (``ldg``, ``stg`` and their vector forms ``ldg4``..., :mod:`gpu_backend.intrinsics`).
So the accesses one thread executes are the sum, over the access calls, of the product of the trip counts
of the loops around each call -- exact for the source as written (an access under an ``if`` counts as
executed, as a predicated SASS instruction issues).  Set against the SASS's accesses outside and inside its
kept loops, that gives the kept loops' trips (:meth:`.sass_profile.SassProfile.loop_trips`).

A stitched kernel's grid is sized by its largest stage, so a smaller stage leaves most threads without an
element (layer-norm backward's column stage: 9% of the 16384 x 128 threads); their accesses are guarded
off, and most of the stage's instructions with them.  :attr:`Accesses.loop_share` says which share of the
kernel's threads does the work inside the source's loops (each loop access weighted by its stage's busy
threads, :attr:`astitch_sim.plan.mapping.ThreadMapping.busy_threads`, read from the source's
``# ---- stage i`` sections), so that an issue rate over the whole grid counts a kept loop's trips for
the threads that make them.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

#: the access intrinsics' names (``gpu_backend.intrinsics``): one global load or store instruction each
ACCESS = re.compile(r"^(ldg|stg)\d*$")
#: the comment that opens stage ``i``'s code (``gpu_backend/codegen/stage.py``)
STAGE = re.compile(r"^\s*# ---- stage (\d+):")


@dataclass(frozen=True)
class Accesses:
    """What one kernel's source says about its global accesses (the module docstring)."""
    per_thread: int           # load and store instructions a thread with elements in every stage executes
    loop_share: float = 1.0   # share of the kernel's threads that make the accesses inside loops


class _Unstated(Exception):
    """An access inside a loop whose trip count the source does not state."""


def global_accesses(source: str, func: str, busy=None) -> Accesses | None:
    """The global loads and stores one thread of ``func`` (a kernel of the generated ``source``) executes;
    ``None`` if the function is missing or an access sits in a loop of unstated trips.  ``busy``: per
    stage, the share of the kernel's threads with elements of it (:func:`busy_shares`), for
    :attr:`Accesses.loop_share`."""
    return _kernel_accesses(ast.parse(source), source.splitlines(), func, busy)


def _kernel_accesses(tree, lines: list, func: str, busy) -> Accesses | None:
    """:func:`global_accesses` on the module's parsed ``tree`` and its ``lines`` (read once for all of a
    plan's kernels)."""
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func), None)
    if fn is None:
        return None
    starts = [(i + 1, int(m.group(1))) for i, line in enumerate(lines[fn.lineno - 1:fn.end_lineno], fn.lineno - 1)
              if (m := STAGE.match(line))]

    def share(lineno: int) -> float:
        stage = next((s for start, s in reversed(starts) if start <= lineno), None)
        return 1.0 if busy is None or stage is None or stage >= len(busy) else float(busy[stage])
    found: list = []                   # (trips, in a loop, busy share) per access call
    try:
        for node in fn.body:
            _collect(node, 1, False, share, found)
    except _Unstated:
        return None
    looped = [(n, w) for n, inside, w in found if inside]
    weight = sum(n for n, _ in looped)
    return Accesses(per_thread=sum(n for n, _, _ in found),
                    loop_share=sum(n * w for n, w in looped) / weight if weight else 1.0)


def plan_accesses(plan) -> dict:
    """``kernel index -> Accesses`` (or ``None``) for every kernel of ``plan``'s generated module, each with its
    stages' busy shares: what :mod:`.sass_profile` needs beside a kernel's SASS."""
    from ..launch.plans import compile_plan
    generated = compile_plan(plan).generated             # cached by the plan's JSON
    tree, lines = ast.parse(generated.source), generated.source.splitlines()
    return {spec.index: _kernel_accesses(tree, lines, spec.func, busy_shares(plan.kernels[spec.index]))
            for spec in generated.kernels}


def busy_shares(kernel) -> list:
    """Per stage of a plan's ``kernel``: busy threads over the kernel's threads (at most 1)."""
    threads = max(1, kernel.grid * kernel.block)
    return [min(1.0, s.mapping.busy_threads / threads) for s in kernel.stages]


def _collect(node, trips: int, inside: bool, share, found: list) -> None:
    if isinstance(node, ast.For):
        n = range_trips(node.iter)
        if n is None and _has_access(node):
            raise _Unstated
        for child in node.body if n else ():
            _collect(child, trips * n, inside or n > 1, share, found)
        for child in node.orelse:
            _collect(child, trips, inside, share, found)
        return
    if isinstance(node, ast.While):
        if _has_access(node):
            raise _Unstated
        return
    if isinstance(node, ast.Call) and _is_access(node):
        found.append((trips, inside, share(node.lineno)))
    for child in ast.iter_child_nodes(node):
        _collect(child, trips, inside, share, found)


def range_trips(it) -> int | None:
    """Trips of ``range(...)`` with constant arguments; ``None`` for anything else."""
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"):
        return None
    try:
        args = [ast.literal_eval(a) for a in it.args]
    except ValueError:
        return None
    if not all(isinstance(a, int) for a in args) or not 1 <= len(args) <= 3:
        return None
    return len(range(*args))


def _is_access(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and bool(ACCESS.match(call.func.id))


def _has_access(node) -> bool:
    return any(isinstance(n, ast.Call) and _is_access(n) for n in ast.walk(node))
