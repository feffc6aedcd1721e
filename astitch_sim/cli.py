"""The ``astitch`` command: look at graphs, run them, plan them and simulate the plans.

Layout, so new subcommands slot in without touching the others:

* one ``add_<name>_parser(subparsers)`` function per subcommand registers its
  arguments and sets ``func=cmd_<name>``; :data:`SUBCOMMANDS` lists them in the
  order ``astitch --help`` shows them -- append to it to add ``plan`` or
  ``simulate``;
* ``cmd_<name>(args) -> int`` does the work and returns the exit code;
* :func:`add_graph_arguments` + :func:`load_graph` give every subcommand the same
  ``--workload NAME [--shape k=v ...] | --hlo FILE`` way to name a graph.

Every :class:`~astitch_sim.errors.AStitchError` (and an unreadable file) ends
the command with ``astitch: error: <message>`` on stderr and exit status 2,
never a traceback.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from typing import Callable, Optional, Sequence

import numpy as np

from .errors import AStitchError
from .ir.graph import Graph, shape_str

PROG = "astitch"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keep the hand-wrapped descriptions and examples as written."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=32)


class _TopFormatter(_Formatter):
    """The top-level help: leave room for the command names so each help stays on its line."""

    def __init__(self, prog):
        super().__init__(prog)
        self._action_max_length = 16      # argparse measures only the "COMMAND" metavar otherwise


# ---------------------------------------------------------------------------
# naming a graph: --workload/--shape or --hlo
# ---------------------------------------------------------------------------

GRAPH_EPILOG = """\
a graph is named by one of:
  --workload NAME [--shape k=v ...]   a catalog workload ('astitch workloads' lists them)
  --hlo FILE                          JAX's text: StableHLO (jax.jit(f).lower(x).as_text()) or HLO (as_text('hlo'))
"""


def add_graph_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workload NAME [--shape k=v ...] | --hlo FILE``: how every subcommand names its graph."""
    group = parser.add_argument_group("graph (one of --workload or --hlo)")
    source = group.add_mutually_exclusive_group(required=True)
    source.add_argument("-w", "--workload", metavar="NAME",
                        help="a catalog workload, e.g. layernorm, softmax, paper_fig7")
    source.add_argument("--hlo", metavar="FILE", help="a file of JAX's default text, StableHLO (module @jit_f "
                        "{ func.func ...}), or of XLA HLO text (HloModule ... ENTRY ...)")
    group.add_argument("-s", "--shape", metavar="k=v", nargs="+", action="extend", default=[],
                       help="override a workload's default shape, e.g. --shape rows=64 cols=1024 "
                            "(also rows=64,cols=1024)")


def parse_shape(items: Sequence[str]) -> dict:
    """``["rows=64", "cols=8,x=2"]`` -> ``{"rows": 64, "cols": 8, "x": 2}``."""
    shape = {}
    for item in items:
        for part in filter(None, item.split(",")):
            key, sep, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not key:
                raise AStitchError(f"--shape {part!r}: write key=value, e.g. --shape rows=64 cols=1024")
            try:
                shape[key] = int(value.replace("_", ""))
            except ValueError:
                raise AStitchError(f"--shape {part!r}: {value!r} is not an integer") from None
    return shape


def read_text(path: str) -> str:
    """A text file's contents; an unreadable file is an AStitchError (exit 2), not a traceback."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise AStitchError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise AStitchError(f"{path} is not a text file (expected StableHLO or XLA HLO text)") from None


def load_graph(args: argparse.Namespace) -> Graph:
    """The graph named by ``--workload``/``--shape`` or ``--hlo`` (see :func:`add_graph_arguments`)."""
    if getattr(args, "hlo", None):
        if args.shape:
            raise AStitchError("--shape applies to --workload only; an HLO file fixes its own shapes")
        text = read_text(args.hlo)
        try:
            from .frontends.from_text import from_hlo      # imported lazily: only --hlo needs the importer (it reads both texts)
        except ImportError as e:
            raise AStitchError(f"the HLO importer is not available ({e}); use --workload") from None
        return from_hlo(text)
    from .frontends.workloads import workload
    return workload(args.workload, **parse_shape(args.shape))


def graph_inputs(graph: Graph, args: argparse.Namespace) -> list:
    """Inputs for ``graph``: ``--inputs FILE.npz`` if given, else random ones from ``--seed``."""
    if getattr(args, "inputs", None):
        return load_npz_inputs(graph, args.inputs)
    from .frontends.workloads import workload_inputs
    seed = getattr(args, "seed", 0)
    return workload_inputs(graph, seed) if getattr(args, "workload", None) else _random(graph, seed)


def _random(graph, seed):
    from .ir.reference import random_inputs
    return random_inputs(graph, seed)


def load_npz_inputs(graph: Graph, path: str) -> list:
    """Read inputs from an ``.npz``: arrays named after the parameters, or ``in0``, ``in1``... in order."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise AStitchError(f"cannot read inputs from {path}: {e}") from None
    names = [p.name for p in graph.inputs]
    if all(n in arrays for n in names):
        return [arrays[n] for n in names]
    positional = [f"in{i}" for i in range(len(names))]
    if all(k in arrays for k in positional):
        return [arrays[k] for k in positional]
    raise AStitchError(f"{path} has arrays {sorted(arrays)}; graph {graph.name!r} needs its parameters "
                       f"by name ({', '.join(names)}) or by position ({', '.join(positional)})")


def _nbytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""  # pragma: no cover


def graph_summary(graph: Graph) -> str:
    """One comment line: node counts by kind and the bytes in and out."""
    counts: dict[str, int] = {}
    for n in graph:
        counts[n.kind] = counts.get(n.kind, 0) + 1
    kinds = ", ".join(f"{v} {k}" for k, v in counts.items())
    ins = sum(p.nbytes for p in graph.inputs)
    outs = sum(o.nbytes for o in graph.outputs)
    return f"# {len(graph)} nodes ({kinds}); reads {_nbytes(ins)}, writes {_nbytes(outs)}"


# ---------------------------------------------------------------------------
# astitch workloads
# ---------------------------------------------------------------------------

def add_workloads_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "workloads", formatter_class=_Formatter,
        help="list the workload catalog",
        description="List the catalog of memory-intensive subgraphs from real models\n"
                    "(BERT, Transformer, DIEN, LLaMA, the paper's Figure 7): name, default\n"
                    "shape, what it computes and where the default shape comes from.",
        epilog="examples:\n"
               "  astitch workloads\n"
               "  astitch workloads --names          # just the names, one a line\n"
               "  astitch show --workload softmax --shape rows=4 cols=8\n")
    p.add_argument("--names", action="store_true", help="print only the names, one a line")
    p.set_defaults(func=cmd_workloads)
    return p


def cmd_workloads(args) -> int:
    from .frontends.workloads import list_workloads
    entries = list_workloads()
    if args.names:
        print("\n".join(e.name for e in entries))
        return 0
    w_name = max(len(e.name) for e in entries)
    w_shape = max(len(e.shape_str) for e in entries)
    print(f"{'name':<{w_name}}  {'default shape':<{w_shape}}  description")
    print(f"{'-' * w_name}  {'-' * w_shape}  {'-' * 11}")
    pad = " " * (w_name + w_shape + 4)
    width = max(40, shutil.get_terminal_size((110, 24)).columns - len(pad) - 1)
    for e in entries:
        # words stay whole at any width (no break at a hyphen or inside a long word): the text stays searchable
        doc = textwrap.wrap(e.doc, width, break_on_hyphens=False, break_long_words=False) + \
            textwrap.wrap("shape: " + e.source, width, subsequent_indent="       ",
                          break_on_hyphens=False, break_long_words=False)
        print(f"{e.name:<{w_name}}  {e.shape_str:<{w_shape}}  {doc[0]}")
        for line in doc[1:]:
            print(pad + line)
    return 0


# ---------------------------------------------------------------------------
# astitch show
# ---------------------------------------------------------------------------

def add_show_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "show", formatter_class=_Formatter,
        help="print a graph (text IR or Graphviz DOT)",
        description="Print a graph in the package's IR: one line per node,\n"
                    "  name: dtype[shape] = op[attributes](operands)\n"
                    "in topological order, then a summary line (node kinds, bytes read and\n"
                    "written). With --dot, print Graphviz DOT instead: parameters are ellipses,\n"
                    "reduces inverted houses, broadcasts houses, expensive ops orange, outputs\n"
                    "double-bordered.\n\n" + GRAPH_EPILOG,
        epilog="examples:\n"
               "  astitch show --workload paper_fig7\n"
               "  astitch show --workload layernorm --shape rows=4 cols=8\n"
               "  astitch show --hlo model.hlo\n"
               "  astitch show --workload softmax --dot | dot -Tsvg > softmax.svg\n")
    add_graph_arguments(p)
    p.add_argument("--dot", action="store_true", help="print Graphviz DOT instead of the text IR")
    p.set_defaults(func=cmd_show)
    return p


def cmd_show(args) -> int:
    g = load_graph(args)
    if args.dot:
        print(g.to_dot())
    else:
        print(g)
        print(graph_summary(g))
    return 0


# ---------------------------------------------------------------------------
# astitch reference
# ---------------------------------------------------------------------------

def add_reference_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "reference", formatter_class=_Formatter,
        help="run a graph with the numpy reference and summarise its outputs",
        description="Run a graph with the numpy reference interpreter (the ground truth every\n"
                    "strategy and the simulator are checked against) and print, per output:\n"
                    "its shape and dtype, min / max / mean (and how many NaN or inf) and its\n"
                    "first values.\n\n"
                    "Inputs come from --inputs FILE.npz (arrays named after the parameters, or\n"
                    "in0, in1, ... in parameter order, with the parameters' dtypes), else they\n"
                    "are random from --seed: standard normals, adjusted for catalog workloads\n"
                    "where a value has a domain (Adam's v >= 0, one-hot labels, ...).\n\n"
                    + GRAPH_EPILOG,
        epilog="examples:\n"
               "  astitch reference --workload softmax --shape rows=4 cols=8\n"
               "  astitch reference --workload paper_fig7 --seed 3 --save fig7_out.npz\n"
               "  astitch reference --hlo layernorm.hlo --inputs layernorm_inputs.npz\n"
               "\n"
               "--save writes the outputs to an .npz keyed by output name\n"
               "(np.load('out.npz')['out']).\n")
    add_graph_arguments(p)
    p.add_argument("--inputs", metavar="FILE.npz", help="input arrays (by parameter name, or in0, in1, ...)")
    p.add_argument("--seed", type=_count(0), default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--save", metavar="OUT.npz", help="also write the outputs to this .npz, keyed by output name")
    p.add_argument("--values", type=_count(0), default=6, metavar="K", help="how many leading values to print (default 6)")
    p.set_defaults(func=cmd_reference)
    return p


def describe_array(name: str, a: np.ndarray, k: int = 6) -> str:
    """``name: f32[4,8]  min -1.2  max 3.4  mean 0.01  [v0, v1, ...]``."""
    from .ir.dtypes import xla_name
    try:
        dtype = xla_name(a.dtype)
    except AStitchError:
        dtype = str(a.dtype)
    head = f"{name}: {shape_str(a.shape, dtype)}"
    flat = a.reshape(-1)
    if flat.size == 0:
        return head + "  (empty)"
    if a.dtype.kind == "b":
        return head + f"  true {int(flat.sum())} of {flat.size}  {np.array2string(flat[:k])}"
    x = flat.astype(np.float64)
    finite = np.isfinite(x)
    stats = ""
    if finite.any():
        f = x[finite]
        stats = f"  min {f.min():.6g}  max {f.max():.6g}  mean {f.mean():.6g}"
    bad = [f"{int(c)} {what}" for c, what in ((np.isnan(x).sum(), "nan"), (np.isinf(x).sum(), "inf")) if c]
    if bad:
        stats += "  (" + ", ".join(bad) + ")"
    vals = np.array2string(flat[:k], precision=6, separator=", ", max_line_width=10_000)
    more = ", ..." if flat.size > k else ""
    return head + stats + f"\n    values: {vals[:-1]}{more}]"


def cmd_reference(args) -> int:
    from .ir.reference import reference
    g = load_graph(args)
    inputs = graph_inputs(g, args)
    outs = reference(g, inputs)
    source = f"inputs from {args.inputs}" if args.inputs else f"random inputs, seed {args.seed}"
    print(f"{g.signature()}")
    print(f"# numpy reference on {source}")
    for node, value in zip(g.outputs, outs):
        print(describe_array(node.name, value, max(args.values, 0)))
    if args.save:
        try:
            arrays: dict = {node.name: value for node, value in zip(g.outputs, outs)}
            np.savez(args.save, **arrays)
        except OSError as e:
            raise AStitchError(f"cannot write {args.save}: {e.strerror or e}") from None
        print(f"# saved {len(outs)} output(s) to {args.save}")
    return 0


# ---------------------------------------------------------------------------
# astitch plan
# ---------------------------------------------------------------------------

def add_strategy_gpu_arguments(parser: argparse.ArgumentParser, strategy: bool = True) -> None:
    """``--strategy S`` and ``--gpu G``, with the choices the compiler and the presets know."""
    from .compiler import STRATEGIES
    from .hardware.gpus import GPUS
    from .planning.strategies.xla_rules import DEFAULT_RULES, RULES
    if strategy:
        parser.add_argument("--strategy", default="astitch", choices=STRATEGIES,
                            help="fusion strategy (default astitch)")
    parser.add_argument("--gpu", default="V100", type=_gpu_name, metavar="{" + ",".join(GPUS) + "}",
                        help="GPU preset (default V100, the paper's GPU)")
    if strategy:
        parser.add_argument("--xla-rules", choices=list(RULES), default=DEFAULT_RULES,
                            help=f"which XLA version's GPU fusion rules the xla strategy follows (default "
                                 f"{DEFAULT_RULES}; tf-2.6: the paper's era, exp and sqrt expensive); the xla "
                                 f"option fusion_rules, strategies/xla_rules.py")


def strategy_options(args, strategy: str) -> dict:
    """The compile options the command line gives ``strategy``: ``--xla-rules`` for xla, when changed."""
    from .planning.strategies.xla_rules import DEFAULT_RULES
    rules = getattr(args, "xla_rules", DEFAULT_RULES)
    return {"fusion_rules": rules} if strategy == "xla" and rules != DEFAULT_RULES else {}


def _count(low: int):
    """argparse type: an integer >= ``low`` (a negative seed or count is a usage error, not a traceback)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"{v} must be >= {low}")
        return v
    parse.__name__ = "int"
    return parse


def _gpu_name(text: str) -> str:
    from .hardware.gpus import gpu
    try:
        return gpu(text).name
    except AStitchError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_plan_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "plan", formatter_class=_Formatter,
        help="compile a graph and print the plan (text, JSON or DOT)",
        description="Compile a graph with one strategy for one GPU and print the Plan: every\n"
                    "kernel with its launch shape, stages, thread mappings, barriers and the\n"
                    "stitch scheme of each op (independent / local / regional / global).\n"
                    "--json prints the plan as JSON (asim.Plan.from_json reads it back);\n"
                    "--dot prints Graphviz DOT (kernels as clusters, nodes coloured by scheme).\n\n"
                    + GRAPH_EPILOG,
        epilog="examples:\n"
               "  astitch plan --workload paper_fig7 --strategy astitch --gpu V100\n"
               "  astitch plan --workload softmax --shape rows=750000 cols=32 --strategy xla\n"
               "  astitch plan --workload layernorm --json > layernorm.plan.json\n"
               "  astitch plan --workload paper_fig7 --dot | dot -Tsvg > fig7.svg\n"
               "  astitch plan --workload paper_fig7 --gpu V100 --ptxas     (real registers and spills)\n")
    add_graph_arguments(p)
    add_strategy_gpu_arguments(p)
    p.add_argument("--ptxas", action="store_true",
                   help="compile every kernel to machine code with NVIDIA's ptxas (no GPU needed; the test extra "
                        "installs it) and apply its real register and shared-memory numbers "
                        "(gpu_backend.apply_compiler: relaxes a register cap the code spills at)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the plan as JSON")
    fmt.add_argument("--dot", action="store_true", help="print the plan as Graphviz DOT")
    p.set_defaults(func=cmd_plan)
    return p


def cmd_plan(args) -> int:
    from .compiler import compile as compile_graph
    plan = compile_graph(load_graph(args), args.strategy, args.gpu, **strategy_options(args, args.strategy))
    if args.ptxas:
        from gpu_backend import apply_compiler     # the backend, only when asked (it imports numba)
        plan = apply_compiler(plan, progress=True)
    print(plan.to_json() if args.json else plan.to_dot() if args.dot else plan)
    return 0


# ---------------------------------------------------------------------------
# astitch simulate
# ---------------------------------------------------------------------------

#: --trace runs per thread: only for graphs up to this many elements in all their inputs
TRACE_MAX_ELEMENTS = 1 << 16


def add_simulate_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "simulate", formatter_class=_Formatter,
        help="run plans on the SIMT model: traffic, flops, predicted time",
        description="Compile a graph and run the plan on the SIMT model, which executes it\n"
                    "block by block, counts every global/shared-memory access and flop, and\n"
                    "turns the counts into a predicted time with the cost model (launches,\n"
                    "traffic over achievable bandwidth, barriers, waves, recomputation).\n"
                    "Prints per kernel: launch shape, waves, global bytes read / written,\n"
                    "shared bytes, flops, block barriers inside reductions (red. bar) and warp\n"
                    "shuffles (shfl), predicted us and its breakdown; then the speedup\n"
                    "over xla. --compare prints one table with every strategy.\n\n"
                    + GRAPH_EPILOG,
        epilog="examples:\n"
               "  astitch simulate --workload paper_fig7 --gpu V100\n"
               "  astitch simulate --workload softmax --compare          # <64,30000>\n"
               "  astitch simulate --workload softmax --shape rows=75000 cols=32 --compare\n"
               "  astitch simulate --workload paper_fig7 --timeline      # SM x time Gantt\n"
               "  astitch simulate --workload softmax --shape rows=4 cols=8 --trace\n")
    add_graph_arguments(p)
    add_strategy_gpu_arguments(p)
    p.add_argument("--compare", action="store_true", help="simulate every strategy and compare them")
    p.add_argument("--trace", action="store_true",
                   help=f"trace per thread (tiny shapes: <= {TRACE_MAX_ELEMENTS} input elements)")
    p.add_argument("--events", type=_count(0), default=20, metavar="N", help="trace events to print (default 20)")
    p.add_argument("--timeline", action="store_true", help="print the SM x time Gantt chart of each run")
    p.add_argument("--sms", type=_count(1), default=16, metavar="K", help="SMs shown by --timeline (default 16)")
    p.add_argument("--inputs", metavar="FILE.npz", help="input arrays (by parameter name, or in0, in1, ...)")
    p.add_argument("--seed", type=_count(0), default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--no-l2", action="store_true",
                   help="price every sector at DRAM bandwidth, as if the GPU had no L2 cache (compare)")
    p.set_defaults(func=cmd_simulate)
    return p


def _simulate(graph, strategy, gpu_name, inputs, trace=False, options=None, l2=True):
    from .compiler import compile as compile_graph
    try:
        from .simt import simulate
    except ImportError as e:
        raise AStitchError(f"the SIMT simulator is not available ({e})") from None
    plan = compile_graph(graph, strategy, gpu_name, **(options or {}))
    return plan, simulate(plan, inputs, trace=trace, l2=l2)


def _max_error(graph, outs, ref) -> float:
    err = 0.0
    for o, r in zip(outs, ref, strict=True):          # a run with outputs missing is no "0 error"
        a, b = np.asarray(o, dtype=np.float64), np.asarray(r, dtype=np.float64)
        both = np.isfinite(a) & np.isfinite(b)
        if (np.isfinite(a) != np.isfinite(b)).any():
            return float("inf")
        if both.any():
            err = max(err, float(np.max(np.abs(a[both] - b[both]) / (1 + np.abs(b[both])))))
    return err


def _kernel_table(stats) -> list:
    from .simt.cost import format_breakdown
    rows = [("kernel", "grid x block", "waves", "global rd", "global wr", "shared", "flops", "red. bar", "shfl",
             "us"),]
    for i, k in enumerate(stats.kernels):
        rows.append((f"{i} {k.name}", f"{k.grid} x {k.block}", str(k.waves), _nbytes(k.global_bytes_read),
                     _nbytes(k.global_bytes_written), _nbytes(k.shared_bytes_moved), f"{k.flops:,}",
                     f"{k.total('tree_barriers') + k.total('shuffle_barriers'):,}", f"{k.total('shuffles'):,}",
                     f"{k.predicted_us:.2f}"))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = ["  " + "  ".join(v.ljust(w) if c == 0 else v.rjust(w) for c, (v, w) in enumerate(zip(r, widths)))
             for r in rows]
    for i, k in enumerate(stats.kernels):
        lines.append(f"  [{i}] {format_breakdown(k)}")
    return lines


def _format_event(ev) -> str:
    """``k0 s0 elements  block 0 thread 3 iter 0  global read   x[0,3] @12``."""
    try:
        where = f"@{ev.address}" if ev.address >= 0 else ""
        elem = ",".join(str(i) for i in ev.element)
        return (f"k{ev.kernel} s{ev.stage} {ev.phase:<8}  block {ev.block} thread {ev.thread} iter {ev.iteration}"
                f"  {ev.space:<8} {ev.kind:<6} {ev.node}[{elem}] {where}").rstrip()
    except AttributeError:
        return str(ev)


def _print_trace(res, n: int) -> None:
    trace = getattr(res, "trace", None)
    if trace is None:
        print("# no trace recorded")
        return
    events = list(getattr(trace, "events", trace) or [])
    print(f"# trace: first {min(n, len(events))} of {len(events)} events")
    for ev in events[:max(n, 0)]:
        print(f"  {_format_event(ev)}")
    races = getattr(trace, "races", None) or getattr(res, "races", None) or []
    print(f"# races: {len(races)}" + ("" if races else " (none)"))
    for r in races:
        print(f"  {r}")


def _print_timeline(plan, res, sms: int) -> None:
    tl = getattr(res, "timeline", None)
    if tl is None:
        from .simt.schedule import build_timeline
        tl = build_timeline(plan, res.stats.kernels)
    width = max(40, min(120, shutil.get_terminal_size((100, 24)).columns - 8))
    print(tl.render_ascii(width=width, max_sms=sms))


def cmd_simulate(args) -> int:
    from .compiler import STRATEGIES
    from .ir.reference import reference
    g = load_graph(args)
    if args.trace and sum(int(np.prod(p.shape)) for p in g.inputs) > TRACE_MAX_ELEMENTS:
        raise AStitchError(f"--trace records every thread's accesses: use a tiny shape (<= {TRACE_MAX_ELEMENTS} "
                           "input elements), e.g. --shape rows=4 cols=8")
    inputs = graph_inputs(g, args)
    wanted = list(STRATEGIES) if args.compare else list(dict.fromkeys([args.strategy, "xla"]))
    runs = {s: _simulate(g, s, args.gpu, inputs, trace=args.trace and (args.compare or s == args.strategy),
                         options=strategy_options(args, s), l2=not args.no_l2)
            for s in wanted}
    ref = reference(g, inputs)
    source = f"inputs from {args.inputs}" if args.inputs else f"random inputs, seed {args.seed}"
    print(g.signature())
    print(f"# simulated on {args.gpu}, {source}" + (", L2 off (--no-l2)" if args.no_l2 else ""))
    xla_us = runs["xla"][1].stats.predicted_us
    shown = list(STRATEGIES) if args.compare else [args.strategy]
    if args.compare:
        head = ("strategy", "kernels", "global traffic", "shared", "flops", "predicted us", "vs xla", "max err")
        rows = [head]
        for s in shown:
            plan, res = runs[s]
            st = res.stats
            rows.append((s, str(st.kernel_launches), _nbytes(st.global_bytes), _nbytes(st.shared_bytes),
                         f"{st.flops:,}", f"{st.predicted_us:.2f}", f"{xla_us / st.predicted_us:.2f}x",
                         f"{_max_error(g, res.outputs, ref):.1e}"))
        widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
        for r in rows:
            print("  ".join(v.ljust(w) if c == 0 else v.rjust(w) for c, (v, w) in enumerate(zip(r, widths))))
    for s in shown:
        plan, res = runs[s]
        st = res.stats
        print(f"\n== {s}: {st.kernel_launches} kernel(s), global {_nbytes(st.global_bytes)} "
              f"(read {_nbytes(st.global_bytes_read)}, written {_nbytes(st.global_bytes_written)}), "
              f"shared {_nbytes(st.shared_bytes)}, {st.flops:,} flops; of the sectors' bytes "
              f"{_nbytes(st.dram_bytes)} DRAM, {_nbytes(st.l2_read_bytes)} L2 hits")
        print(f"   predicted {st.predicted_us:.2f} us, {xla_us / st.predicted_us:.2f}x over xla "
              f"({xla_us:.2f} us); max error vs reference {_max_error(g, res.outputs, ref):.1e}")
        print("\n".join(_kernel_table(st)))
        if args.trace:
            _print_trace(res, args.events)
        if args.timeline:
            _print_timeline(plan, res, args.sms)
    return 0


# ---------------------------------------------------------------------------
# astitch explore
# ---------------------------------------------------------------------------

#: Streamlit settings for the explorer: no telemetry, no deploy button, the explorer's blue
EXPLORE_FLAGS = ["--browser.gatherUsageStats", "false", "--client.toolbarMode", "viewer",
                 "--theme.primaryColor", "#4e79a7", "--theme.base", "light"]


def explorer_app() -> str:
    """Path of ``app/streamlit_app.py`` in the source checkout this package runs from."""
    from pathlib import Path
    app = Path(__file__).resolve().parent.parent / "app" / "streamlit_app.py"
    if not app.is_file():
        raise AStitchError("the explorer lives in app/ of the source checkout, which this installation does not "
                           "have: clone the repository and run pip install -e '.[app]' in it")
    return str(app)


def add_explore_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "explore", formatter_class=_Formatter,
        help="open the explorer (Streamlit) in your browser",
        description="Start the astitch-sim explorer, a Streamlit page with eight views of the\n"
                    "plans (Compare, Graph, Kernel, Thread mapping, Data movement, Timeline,\n"
                    "Code, What-if). It opens on the paper's Figure 7 graph; --workload/--shape\n"
                    "and the other options pick what it opens on.",
        epilog="examples:\n"
               "  astitch explore\n"
               "  astitch explore --workload softmax --shape rows=64 cols=30000 --view 'Thread mapping'\n"
               "  astitch explore --port 8600 --no-browser\n")
    p.add_argument("-w", "--workload", metavar="NAME", help="catalog workload to open (default paper_fig7)")
    p.add_argument("-s", "--shape", metavar="k=v", nargs="+", action="extend", default=[],
                   help="its shape, e.g. --shape rows=64 cols=30000")
    p.add_argument("--strategy", help="strategy to show (default astitch)")
    p.add_argument("--gpu", type=_gpu_name, help="GPU preset (default V100)")
    p.add_argument("--view", help="view to open, e.g. Compare, Graph, 'Thread mapping'")
    p.add_argument("--port", type=_count(1), default=8501, help="port to serve on (default 8501)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser (print the address)")
    p.add_argument("--dry-run", action="store_true", help="print the streamlit command and the address, do not run")
    p.set_defaults(func=cmd_explore)
    return p


def explore_query(args) -> str:
    from urllib.parse import urlencode
    q = {}
    if args.workload:
        from .frontends.workloads import check_shape
        shape = check_shape(args.workload, parse_shape(args.shape))
        q["workload"] = args.workload
        q["shape"] = ",".join(f"{k}:{v}" for k, v in shape.items())
    elif args.shape:
        raise AStitchError("--shape needs --workload (the explorer opens on paper_fig7 otherwise)")
    for key in ("strategy", "gpu", "view"):
        if getattr(args, key):
            q[key] = getattr(args, key)
    return urlencode(q)


def cmd_explore(args) -> int:
    import importlib.util
    import subprocess
    app = explorer_app()
    query = explore_query(args)
    url = f"http://localhost:{args.port}/" + (f"?{query}" if query else "")
    cmd = [sys.executable, "-m", "streamlit", "run", app, "--server.port", str(args.port),
           "--server.headless", "true"] + EXPLORE_FLAGS
    if args.dry_run:
        print(" ".join(cmd))
        print(url)
        return 0
    if importlib.util.find_spec("streamlit") is None:
        raise AStitchError("the explorer needs Streamlit: pip install -e '.[app]'")
    print(f"astitch explore: serving {url}  (Ctrl-C stops it)", flush=True)
    proc = subprocess.Popen(cmd)
    if not args.no_browser:
        import threading
        import webbrowser
        threading.Timer(2.5, lambda: webbrowser.open(url)).start()
    return _serve_until_stopped(proc)


class _Stopped(Exception):
    """SIGTERM or SIGHUP reached ``astitch explore``."""


def _serve_until_stopped(proc) -> int:
    """Wait for the Streamlit server; stop it when this process is stopped (Ctrl-C, SIGTERM, SIGHUP).

    Without the handlers a ``kill`` of ``astitch explore`` (a terminal closed, a supervisor stopping it)
    left the server running on its port."""
    import signal
    import subprocess

    def stop(signum, frame):
        raise _Stopped(signum)

    wanted = [sig for sig in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if sig]
    before = {sig: signal.signal(sig, stop) for sig in wanted}
    try:
        return proc.wait()
    except (KeyboardInterrupt, _Stopped):
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 0
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------------------
# the top-level parser
# ---------------------------------------------------------------------------

#: subcommand registrars, in help order; other modules append ``add_plan_parser`` etc.
SUBCOMMANDS: list[Callable] = [add_workloads_parser, add_show_parser, add_reference_parser, add_plan_parser,
                               add_simulate_parser, add_explore_parser]

DESCRIPTION = """\
astitch-sim: the AStitch compiler (ASPLOS'22) as a teaching simulator.

Memory-intensive ops (elementwise, broadcast, reduce) between the GEMMs of a
model cost off-chip traffic and kernel launches. AStitch stitches them into one
kernel, passing data through registers, shared memory or global memory with a
grid barrier. This command shows the graphs it works on, runs them, plans them
with six strategies (unfused, xla, tvm, fusionstitching, inductor, astitch) and simulates the plans.
"""

EPILOG = """\
examples:
  astitch workloads                                  # the catalog, with default shapes
  astitch show --workload paper_fig7                 # the paper's Figure 7 graph
  astitch show --workload layernorm --dot            # Graphviz DOT of a graph
  astitch reference --workload softmax --shape rows=4 cols=8
  astitch show --hlo model.hlo                       # a graph from XLA HLO text
  astitch plan --workload paper_fig7 --strategy xla  # the kernels a strategy plans
  astitch simulate --workload softmax --compare      # every strategy on the SIMT model
  astitch explore                                    # the explorer in your browser (Figure 7)

'astitch COMMAND --help' explains each command.
"""


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    parser = argparse.ArgumentParser(prog=PROG, formatter_class=_TopFormatter,
                                     description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for register in SUBCOMMANDS:
        register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``astitch`` command line; returns the exit status (0 ok, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except AStitchError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:          # `astitch show ... | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
