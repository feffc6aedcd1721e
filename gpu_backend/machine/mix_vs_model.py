"""The compiler's instruction mix held against the SIMT model's per-thread accounting of the same plan.

The SIMT model says, for every thread, which loads and stores it performs in which
memory space, how many barriers it passes, which atomics it issues.  NVIDIA's
compiler turns the generated kernel into machine code (SASS) whose instructions we
can count (:func:`gpu_backend.machine.machine_code.instruction_mix`).  If the model is
faithful, the two agree; where they differ, one of them does something the other
does not know about -- that is what this module reports.

The normalisation (the two are different kinds of count):

* **SASS counts are static**: each instruction once, however often it runs.
  A loop the compiler kept (``backward_branch > 0``) contributes its body once.
* **Model counts are dynamic, per thread**: for each class we take the *busiest
  thread* of the kernel (the maximum over all threads of the accesses it makes,
  from ``simulate(plan, inputs, trace=True)``), summed over the kernel's stages
  and task trips.  With no loop left in the SASS (every loop of the generated code
  has a trip count known at compile time, and NVVM/ptxas unroll them), each SASS
  instruction runs at most once per thread, so *if the compiler emits one
  instruction per access the model makes*, the busiest thread's count equals
  the static count.  Any difference is then a real difference: the compiler
  vectorised (one ``LDG.E.64`` for two floats), merged or dropped a reload the
  model counts (common-subexpression elimination), or the model counts an access
  the code does not make (or the reverse).  With loops left in the SASS the
  static count is a per-loop-body count, and the comparison says so instead of
  calling a difference a disagreement.
* **Reduction trees** are not traced (the model adds their shared-memory traffic
  analytically); the busiest thread of a tree over ``lanes`` threads (lane 0) makes
  ``steps + 1`` shared stores (its partial, then one per fold) and ``2 * steps``
  shared loads, ``steps = ceil(log2 lanes)``, and passes ``steps + 1`` barriers.
  A shuffle reduction: every thread runs every ``shfl_xor`` step (the stage's
  ``shuffles`` per warp); a task spanning warps adds, per task trip and reduced
  value, one shared store (lane 0 of each warp), one shared load (lanes ``< W``)
  and, per trip, one barrier.
  These are added to the traced counts, per reduce and per task trip.
* **Barriers**: the model's block barriers per block (``block_barriers / grid``) plus
  its tree and shuffle barriers per block, against SASS ``BAR``; grid barriers against
  calls of CUDA's ``cudaCGSynchronize`` (Numba's ``grid.sync()``).
* **Shuffles**: the model's ``shfl_xor`` steps per thread (shuffle reductions)
  against SASS ``SHFL`` (its out-of-line ``WARPSYNC.COLLECTIVE`` retry copies left
  out); a tree reduction has none.
* **Widths**: the model accesses one element per access, ``itemsize`` bytes;
  SASS widths come from the opcode's suffix (``LDG.E.64``: 64 bits).  A plan with
  vectors (``print(plan)`` shows ``4-element vector(s) per lane``) makes the code
  load a row's elements four at a time: one ``LDG.E.128`` where the model counts
  four element accesses.  Each row therefore also carries ``sass_elements``: the
  SASS accesses in the model's elements (an instruction of ``b`` bits counts
  ``b / element bits``), which is what the model's count must equal when the only
  difference is the vector width.

Only generated kernels are compared (library kernels -- matrix products, sorts --
are costed as whole ops by the model, with no per-thread accounting).  The
comparison needs traced simulation, so it runs at shapes the trace accepts
(``TRACE_LIMIT`` domain elements per kernel); the kernel compiled is the one for
that same plan.
"""
from __future__ import annotations

from collections import Counter
import numpy as np

from astitch_sim.errors import AStitchError

#: the classes compared (names as in :data:`gpu_backend.machine.machine_code.MIX_CLASSES`, plus ``grid_sync``)
COMPARED = ("global_load", "global_store", "global_atomic", "shared_load", "shared_store", "barrier",
            "grid_sync", "shuffle")
#: the model's traced accesses, (space, kind) -> class
_TRACE_CLASS = {("global", "read"): "global_load", ("global", "write"): "global_store",
                ("global", "atomic"): "global_atomic", ("shared", "read"): "shared_load",
                ("shared", "write"): "shared_store", ("shared", "atomic"): "shared_atomic"}


def _itemsize(dtype) -> int:
    from astitch_sim.ir.dtypes import itemsize
    return itemsize(dtype)


def model_counts(plan, inputs) -> dict:
    """``{kernel index: {"counts": {class: busiest thread's count}, "sites": {class: distinct access points},
    "widths": {"class.bits": access points}, "trees": reduction trees per block}}``.

    Generated kernels only; see the module docstring for what each count means.
    """
    import astitch_sim as asim
    from astitch_sim.simt.trace import KINDS, SPACES
    res = asim.simulate(plan, inputs, trace=True)
    tr = res.trace
    c = tr.columns
    out = {}
    for ki, (k, ks) in enumerate(zip(plan.kernels, res.stats.kernels)):
        if k.kind != "generated":
            continue
        sel_k = c["kernel"] == ki
        thread_key = c["block"][sel_k] * k.block + c["thread"][sel_k]
        space, kind = c["space"][sel_k], c["kind"][sel_k]
        access, node = c["access"][sel_k], c["node"][sel_k]
        counts: Counter = Counter()
        sites: Counter = Counter()
        widths: Counter = Counter()
        for (sp, kd), cls in _TRACE_CLASS.items():
            sel = (space == SPACES.index(sp)) & (kind == KINDS.index(kd))
            if not sel.any():
                continue
            counts[cls] = int(np.bincount(thread_key[sel]).max())
            if kd == "read":        # the same element read again by the same thread in the same stage
                keys = np.stack([thread_key[sel], c["stage"][sel_k][sel], node[sel], c["element"][sel_k][sel]])
                _, first = np.unique(keys, axis=1, return_index=True)
                again = np.ones(keys.shape[1], bool)
                again[first] = False
                counts[f"{cls}_repeats"] = int(np.bincount(thread_key[sel][again], minlength=1).max())
            ids = np.unique(access[sel])
            sites[cls] = int(ids.size)
            for a in ids.tolist():
                name = tr.nodes[int(node[sel][access[sel] == a][0])]
                widths[f"{cls}.{8 * _itemsize(plan.graph[name].dtype)}"] += 1
        tree_barriers = trees_total = 0
        for i, (stage, st) in enumerate(zip(k.stages, ks.stages)):
            if not st.tree_barriers:
                continue
            per_block = st.tree_barriers // k.grid            # sum over reduces and trips of (steps + 1)
            trees = len(stage.reduces) * stage.mapping.task_iterations
            steps = per_block // max(1, trees) - 1
            counts["shared_store"] += per_block
            counts["shared_load"] += 2 * steps * trees
            tree_barriers += per_block
            trees_total += trees
        shuffle_barriers = sum(st.shuffle_barriers for st in ks.stages) // k.grid
        counts["shuffle"] = 0
        for stage, st in zip(k.stages, ks.stages):    # shuffle reductions: every thread runs every step
            if st.shuffles:
                counts["shuffle"] += st.shuffles // (k.grid * (k.block // 32))
            if st.shuffle_barriers:                    # warp totals: lane 0 stores, lanes < W load, per value
                values = sum(len(plan.graph[r].operands) // 2 for r in stage.reduces)
                counts["shared_store"] += values * stage.mapping.task_iterations
                counts["shared_load"] += values * stage.mapping.task_iterations
        counts["barrier"] = sum(st.block_barriers for st in ks.stages) // k.grid + tree_barriers + shuffle_barriers
        counts["grid_sync"] = sum(st.grid_barriers for st in ks.stages)
        out[ki] = {"counts": dict(counts), "sites": dict(sites), "widths": dict(widths), "trees": trees_total}
    return out


def sass_counts(mix: dict) -> dict:
    """The SASS mix in the compared classes (atomics: global and generic together)."""
    out = {cls: mix.get(cls, 0) for cls in COMPARED}
    out["global_atomic"] += mix.get("generic_atomic", 0)
    return out


def _model_bits(cls: str, widths: dict) -> int | None:
    """The model's element width for one class, in bits (None: no traced access, or mixed widths)."""
    bits = {int(key.rsplit(".", 1)[1]) for key in widths if key.startswith(cls + ".")}
    return bits.pop() if len(bits) == 1 else None


def sass_elements(cls: str, sass: int, mix: dict, widths: dict) -> int:
    """The class's SASS accesses counted in the model's elements: a 128-bit load of 32-bit elements counts 4.

    Classes without widths (barriers, shuffles) or with no single model element width count as instructions.
    """
    bits = _model_bits(cls, widths)
    sized = {int(key.rsplit(".", 1)[1]): v for key, v in mix.items() if key.startswith(cls + ".")}
    if bits is None or not sized or sum(sized.values()) != sass:
        return sass
    return sum(v * max(1, w // bits) for w, v in sized.items())


def explain(cls: str, model: int, sass: int, loops: int, mix: dict, widths: dict, trees: int = 0,
            repeats: int = 0) -> str:
    """Why SASS and the model differ for one class of one kernel (the causes we can tell from the counts)."""
    if model == sass:
        return "agree"
    words = []
    if loops:
        return ("SASS keeps a loop (its static count is one loop body, the model's is every trip): "
                "not comparable one to one")
    elements = sass_elements(cls, sass, mix, widths)
    if elements == model and elements != sass:
        return (f"agree element for element: {sass} instruction(s) move {elements} of the model's "
                f"{_model_bits(cls, widths)}-bit elements (the plan's vectors: one wide access per vector)")
    if cls.endswith("_load") and repeats and sass < model and model - sass <= repeats:
        return (f"loop-invariant loads hoisted: the busiest thread re-reads {repeats} element(s) it already loaded "
                "in the same stage (a broadcast operand, once per element in the model); the code loads them once")
    if cls == "barrier" and trees and sass < model:
        return ("sibling reductions share one tree: the code folds every reduce of a stage in the same loop, one "
                "barrier per fold; the model counts steps + 1 barriers per reduce")
    if cls == "shared_load" and trees and sass - model == trees and not loops:
        return (f"tree result read: lane 0 loads each of the {trees} tree(s)' result once more; the model's tree "
                f"accounting counts only the 2 loads per fold")
    wide = sum(v for key, v in mix.items() if key.startswith(cls + ".") and int(key.rsplit(".", 1)[1]) > 32)
    model_bits = {int(key.rsplit(".", 1)[1]) for key in widths if key.startswith(cls + ".")}
    if wide and model_bits and max(model_bits) <= 32:
        words.append(f"{wide} vectorised ({cls} wider than the model's {max(model_bits)}-bit elements)")
    if cls == "barrier" and sass < model:
        words.append("fewer barriers in code than the model passes")
    if not loops and sass > model:
        words.append("code has paths the busiest thread does not take (guards, tails), or reloads the model "
                     "does not count")
    if not loops and sass < model and not wide:
        words.append("the compiler merged or dropped accesses the model counts")
    return "; ".join(words) or "differ"


def compare(plan, inputs, arch: str) -> list:
    """One row per generated kernel and class: model (busiest thread), SASS (static instructions, and in the
    model's elements), why they differ."""
    from .machine_code import compile_kernels
    model = model_counts(plan, inputs)
    rows = []
    for km in compile_kernels(plan, arch):
        if km.index not in model:
            continue
        if km.mix is None:
            raise AStitchError(f"{km.name}: no instruction mix for {arch} ({km.mix_missing})")
        m = model[km.index]
        sass = sass_counts(km.mix)
        loops = km.mix.get("backward_branch", 0)
        for cls in COMPARED:
            mv, sv = m["counts"].get(cls, 0), sass[cls]
            rows.append({"kernel": km.name, "index": km.index, "class": cls, "model": mv, "sass": sv,
                         "sass_elements": sass_elements(cls, sv, km.mix, m["widths"]),
                         "model_sites": m["sites"].get(cls, 0), "loops": loops,
                         "sass_widths": {key: v for key, v in km.mix.items() if key.startswith(cls + ".")},
                         "model_widths": {key: v for key, v in m["widths"].items() if key.startswith(cls + ".")},
                         "registers": km.resources.registers, "spills": km.resources.spills,
                         "why": explain(cls, mv, sv, loops, km.mix, m["widths"], m["trees"],
                                        m["counts"].get(f"{cls}_repeats", 0))})
    return rows


def main(argv=None) -> int:
    """``python -m gpu_backend.machine.mix_vs_model WORKLOAD STRATEGY GPU [key=value ...]``: the rows as JSON."""
    import json
    import sys

    import astitch_sim as asim
    from astitch_sim.frontends.workloads import workload_inputs

    from .machine_code import arch_of
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3:
        print(main.__doc__, file=sys.stderr)
        return 2
    name, strategy, gpu, *shape = argv
    g = asim.workload(name, **{k: int(v) for k, v in (kv.split("=", 1) for kv in shape)})
    plan = asim.compile(g, strategy, gpu)
    json.dump(compare(plan, workload_inputs(g, 0), arch_of(plan.gpu)), sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
