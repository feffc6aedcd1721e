"""The Plan IR: every decision a strategy makes, written down (the contract).

A :class:`Plan` is a list of :class:`Kernel` launches.  A ``generated`` kernel
is a sequence of :class:`Stage` s separated by barriers; each stage is one *op
group* of the AStitch paper: a dominant op, the ops joined to it through Local
(register) stitching, and a :class:`~astitch_sim.plan.mapping.ThreadMapping` saying
which block and thread computes which element.  Every node the kernel touches
has a :class:`Value` saying where its result lives (register, shared, global)
and so which stitch scheme connects it to its consumers:

=============  ==========================================================
independent    no consumer inside the kernel (an output, or the last op)
local          consumers read it from registers (same thread, same element)
regional       consumers in the same block read it from shared memory
               after a block barrier
global         consumers anywhere read it from global memory after a
               grid barrier (all blocks resident: the grid fits one wave)
=============  ==========================================================

How a stage runs (the simulator and the Numba backend both do exactly this):

1. every thread visits the domain elements its mapping assigns it;
2. at each element it evaluates ``stage.ops`` by *index propagation*: an
   operand is read at the index the op's row in the op table implies
   (broadcast drops dims, transpose permutes, ...).  An operand computed in
   this stage is used from registers; an operand computed in an earlier
   stage is read from where its Value lives; a kernel input from global
   memory.  An op that is needed at several indices per value (a broadcast of
   a Local op, as TVM does) is *recomputed* at each;
3. reduce nodes in ``ops`` accumulate per thread, then combine across the
   threads of a task (and across blocks for a split task, as ``combine`` says:
   ``atomic`` into a global result buffer the runtime first fills with the
   reduce's init value, or ``grid_barrier``: partials to global scratch, a grid
   barrier, then every block sums them).  If the kernel reads the split result
   again, ``sync_after_combine`` puts a grid barrier after the combine, and the
   result is read from global memory;
4. ``epilogue`` ops run once per reduction task on the reduce results, by the
   first thread of the task in each block that holds part of the task (so a
   split task's epilogue runs once per split, redundantly, and every block
   has it locally);
5. values placed in shared/global memory are stored; outputs are written;
6. ``barrier_after`` (block or grid) separates the stage from the next.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Optional

from ..errors import AStitchError
from ..ir.graph import Graph
from ..hardware.gpus import GPU, gpu as get_gpu
from .kernel_end import KernelEnd
from .machine import MachineResources
from .mapping import ThreadMapping
from .sealed import Sealable, plain
from .vocabulary import Barrier, ReduceScheme, Scheme, Space

#: the JSON format written by :meth:`Plan.to_json` (2: the planner's bookkeeping is recorded, see Stage)
PLAN_FORMAT = "astitch-sim plan 2"


@dataclass
class Value(Sealable):
    """Where one node's result lives inside a kernel, and how it reaches its consumers."""
    WORDS = {"space": Space, "scheme": Scheme}

    node: str
    space: Space                # register | shared | global
    scheme: Scheme              # independent | local | regional | global
    stage: int = -1             # stage computing it; -1: read from global memory (a kernel input)
    buffer: str = ""            # shared/global buffer it is stored in (buffers are reused)
    offset: int = 0             # shared: byte offset of this value's slot in the block's shared memory
    nbytes: int = 0             # shared: bytes per block; global scratch: bytes in all
    output: bool = False        # also written to global memory (a graph output or read by a later kernel)
    why: str = ""               # the reason for its space and scheme, in words (the explorer shows it)
    read_by: tuple = ()         # stages of the kernel that read it (a stage computing its own copy does not)
    loaded_in: int = -1         # a kernel input kept in registers: the stage that loads it from global memory
    #                             (later stages read that thread's copy); -1: every reader loads it itself

    def __post_init__(self):
        self.read_by = tuple(self.read_by)

    @property
    def read_later(self) -> tuple:
        """Stages after the computing (or, for a kept input, the loading) one that read the value."""
        first = self.stage if self.stage >= 0 else self.loaded_in
        return tuple(j for j in self.read_by if j > first) if first >= 0 else ()


@dataclass
class Stage(Sealable):
    """One op group: a dominant, its Local ops, one thread mapping."""
    WORDS = {"barrier_after": Barrier, "reduce_scheme": ReduceScheme}

    dominant: str
    ops: list                   # evaluated per domain element, in topological order (reduces included)
    mapping: ThreadMapping
    epilogue: list = field(default_factory=list)   # evaluated once per reduction task, after the reduces
    barrier_after: Barrier = Barrier.NONE          # none | block | grid
    recompute: dict = field(default_factory=dict)  # node -> evaluations per value (>1: TVM-style recomputation)
    sync_after_combine: bool = False               # split reduce read inside the kernel: grid barrier after combine
    # -- bookkeeping the planner records so that no reader works it out again (kernel_builder.assemble_kernel) --
    reduces: tuple = ()             # reduce nodes of ``ops``, in order
    task_shape: tuple = ()          # shape of the reduction results (what the epilogue runs over); () without reduces
    roots: tuple = ()               # ops evaluated directly at domain elements (everything else is reached from them)
    live_out: tuple = ()            # values this stage computes that a later stage reads (live into later stages)
    scratch_slots: int = 0          # 8-byte reduction-scratch slots per thread (one per reduced value; argmax: two)
    grid_syncs: int = 0             # grid barriers inside the stage (split combine, sync_after_combine)
    barrier_why: str = ""           # why ``barrier_after`` is what it is, in words
    reduce_scheme: ReduceScheme = ReduceScheme.NONE   # how a task's threads combine partials (reduce_scheme.py)
    reduce_why: str = ""            # why that scheme, in words

    def __post_init__(self):
        for f in ("reduces", "task_shape", "roots", "live_out"):
            setattr(self, f, tuple(getattr(self, f)))


@dataclass
class Kernel(Sealable):
    name: str
    kind: str                               # generated | library
    grid: int
    block: int
    stages: list = field(default_factory=list)
    values: dict = field(default_factory=dict)     # node name -> Value
    inputs: list = field(default_factory=list)     # nodes read from global memory
    outputs: list = field(default_factory=list)    # nodes written to global memory
    shared_bytes: int = 0
    registers_per_thread: int = 32
    library_op: Optional[str] = None               # library kernels: the (first) library node they compute
    notes: list = field(default_factory=list)      # the strategy's reasons, in words
    views: dict = field(default_factory=dict)      # library kernels: operand -> the buffer read as it (a reshape)
    scratch_offset: int = 0                        # byte offset of the reduction scratch in shared memory
    scratch_bytes: int = 0                         # bytes of reduction scratch (shared with every stage)
    machine: Optional[MachineResources] = None     # what ptxas reported (gpu_backend.apply_compiler); None: estimate
    index_bits: int = 64                           # width of the index arithmetic (astitch_sim/plan/index_bits.py)
    ends: list = field(default_factory=list)       # why the kernel ends: KernelEnd per boundary op (plan/kernel_end.py)

    @property
    def global_barriers(self) -> int:
        """Grid-wide barriers in the kernel: between stages, and inside split reductions."""
        between = sum(1 for s in self.stages if s.barrier_after is Barrier.GRID)
        inside = sum(s.grid_syncs for s in self.stages)
        return between + inside

    @property
    def stage_of(self) -> dict:
        """node -> the (first) stage computing it, for every node this kernel computes."""
        return {n: v.stage for n, v in self.values.items() if v.stage >= 0}

    @property
    def live_later(self) -> set:
        """Values some later stage reads (the union of the stages' ``live_out``)."""
        return {n for s in self.stages for n in s.live_out}

    @property
    def block_barriers(self) -> int:
        return sum(1 for s in self.stages if s.barrier_after is Barrier.BLOCK)

    @property
    def cooperative(self) -> bool:
        """A grid barrier needs a cooperative launch (all blocks resident)."""
        return self.global_barriers > 0

    @property
    def schemes(self) -> dict:
        """node -> stitch scheme, for every node this kernel computes."""
        return {v.node: v.scheme for v in self.values.values() if v.stage >= 0}

    @property
    def computed(self) -> list:
        """Nodes this kernel computes, stage by stage (a library kernel: its library nodes)."""
        if self.kind == "library":
            return list(self.outputs)
        return [n for s in self.stages for n in list(s.ops) + list(s.epilogue)]


def _replaced(obj, changes: dict):
    """``dataclasses.replace(obj, **changes)``, with an AStitchError naming the fields if one is unknown."""
    known = [f.name for f in fields(obj)]
    unknown = [c for c in changes if c not in known]
    if unknown:
        raise AStitchError(f"{type(obj).__name__} has no field {', '.join(map(repr, unknown))}; "
                           f"its fields: {', '.join(known)}")
    return replace(obj, **changes)


def _value_dict(v: Value) -> dict:
    """A Value as JSON; ``loaded_in`` only where an input is kept in registers (older readers never see it)."""
    d = {**asdict(v), "read_by": list(v.read_by)}
    if v.loaded_in < 0:
        del d["loaded_in"]
    return d


def _scheme_of(sd: dict) -> dict:
    """A stage's reduction scheme from its JSON; a plan written before schemes were recorded reduced with the
    paper's tree (its scratch was sized for it), so that is what :func:`reduce_scheme.choose` gives it."""
    if "reduce_scheme" in sd:
        return {"reduce_scheme": sd["reduce_scheme"], "reduce_why": sd.get("reduce_why", "")}
    from .reduce_scheme import choose
    probe = Stage(dominant=sd["dominant"], ops=[], mapping=ThreadMapping.from_dict(sd["mapping"]),
                  reduces=sd["reduces"])
    scheme, why = choose(probe, ReduceScheme.TREE)
    return {"reduce_scheme": scheme, "reduce_why": why}


@dataclass
class Plan(Sealable):
    """A strategy's decisions for one graph on one GPU: kernels in launch order, and the reasons.

    Built by a strategy's planner, then sealed (``astitch_sim.plan.sealed``): ``compile``
    and ``Plan.from_json`` return read-only plans.  To see what a different decision
    does, make a changed copy with :meth:`with_stage`, :meth:`with_kernel`,
    :meth:`with_value` or :meth:`with_notes` (then ``validate()`` says what breaks)."""
    graph: Graph
    strategy: str
    gpu: GPU
    kernels: list
    notes: list = field(default_factory=list)
    options: dict = field(default_factory=dict)    # what-if switches compiled with (non-default only; see compile)
    search: dict = field(default_factory=dict)     # search-based strategies: what was scored and why (search_record)

    # -- summaries -------------------------------------------------------------
    @property
    def generated(self) -> list:
        return [k for k in self.kernels if k.kind == "generated"]

    @property
    def library(self) -> list:
        return [k for k in self.kernels if k.kind == "library"]

    def kernel_of(self, node: str) -> list:
        """Kernels that compute ``node`` (several if a strategy recomputes it)."""
        return [k for k in self.kernels if node in k.computed]

    def transfers(self) -> list:
        """How the value on every graph edge reaches its consumer: ``(producer, consumer, kernel, space)``.

        One tuple per edge and per kernel that computes the consumer (a recomputed
        consumer appears once per copy).  ``space``: ``register`` when the consumer's
        stage computes the producer itself (Local, or recomputed there), else where
        the kernel keeps the producer's value (``register``, ``shared``, ``global``);
        ``global`` for a kernel input (a parameter, an array constant, another kernel's
        result).  A Regional reduce read by its stage's epilogue reached it through
        ``shared`` memory: its task's threads combined their partials there first; a reduce split over
        blocks (task splitting) reached it through ``global`` memory, where its partials meet (atomics
        or a grid barrier), as the SIMT model charges it.  Scalar constants, folded into the code, have
        no edge.
        """
        out = []
        for ki, k in enumerate(self.kernels):
            if k.kind == "library":
                out.extend((o.name, c, ki, "global") for c in k.computed for o in self.graph[c].operands
                           if not (o.op == "constant" and o.rank == 0))
                continue
            for si, s in enumerate(k.stages):
                own = set(s.ops) | set(s.epilogue)
                for c in list(s.ops) + list(s.epilogue):
                    for o in self.graph[c].operands:
                        if o.op == "constant" and o.rank == 0:
                            continue
                        v = k.values.get(o.name)
                        space = "register" if o.name in own else (v.space if v is not None else "global")
                        if o.name in s.ops and c in s.epilogue and v is not None and o.op == "reduce":
                            if v.scheme is Scheme.REGIONAL:
                                space = "shared"    # combined across the task's threads in shared memory first
                            elif s.mapping.splits > 1:
                                space = "global"    # a split task's partials meet in global memory first
                        if v is not None and v.stage < 0 and si <= v.loaded_in:
                            space = "global"        # a kept input: its loading stage reads global memory
                        out.append((o.name, c, ki, space))
        return list(dict.fromkeys(out))

    def scheme_counts(self) -> dict:
        out = {s: 0 for s in Scheme.words()}
        for k in self.kernels:
            for sc in k.schemes.values():
                out[sc] += 1
        return out

    # -- changed copies (a sealed plan is never edited in place) --------------------
    def with_notes(self, *notes: str) -> "Plan":
        """A copy with ``notes`` appended to the plan's notes."""
        return replace(self, notes=[*self.notes, *notes]).seal()

    def with_kernel(self, kernel, **changes) -> "Plan":
        """A copy whose kernel ``kernel`` (its index or name) has the fields in ``changes`` replaced.

        Not validated: a what-if edit may well break a rule (that is often the point); ``validate()`` says which."""
        i = self._kernel_index(kernel)
        new = _replaced(self.kernels[i], changes)
        return replace(self, kernels=[*self.kernels[:i], new, *self.kernels[i + 1:]]).seal()

    def with_stage(self, kernel, stage: int, **changes) -> "Plan":
        """A copy whose stage ``stage`` of kernel ``kernel`` has the fields in ``changes`` replaced
        (e.g. ``plan.with_stage(0, 0, barrier_after="none")`` drops a barrier; not validated)."""
        i = self._kernel_index(kernel)
        stages = self.kernels[i].stages
        if not isinstance(stage, int) or not 0 <= stage < len(stages):
            raise AStitchError(f"kernel {self.kernels[i].name} has stages 0..{len(stages) - 1}; got stage {stage!r}")
        new = _replaced(stages[stage], changes)
        return self.with_kernel(i, stages=[*stages[:stage], new, *stages[stage + 1:]])

    def with_value(self, kernel, node: str, **changes) -> "Plan":
        """A copy whose Value of ``node`` in kernel ``kernel`` has the fields in ``changes`` replaced (not validated)."""
        i = self._kernel_index(kernel)
        values = self.kernels[i].values
        if node not in values:
            raise AStitchError(f"kernel {self.kernels[i].name} has no Value for {node!r}; it has {', '.join(values)}")
        return self.with_kernel(i, values={**values, node: _replaced(values[node], changes)})

    def _kernel_index(self, kernel) -> int:
        names = [k.name for k in self.kernels]
        if isinstance(kernel, str) and kernel in names:
            return names.index(kernel)
        if isinstance(kernel, int) and not isinstance(kernel, bool) and -len(names) <= kernel < len(names):
            return kernel % len(names)
        raise AStitchError(f"no kernel {kernel!r} in this plan: give an index 0..{len(names) - 1} or a name "
                           f"({', '.join(names)})")

    # -- validation ------------------------------------------------------------
    def validate(self, barriers: bool = True) -> "Plan":
        """Raise AStitchError if the plan breaks a hardware rule or its own bookkeeping.

        ``barriers=False`` lets a plan with a missing barrier through (the SIMT
        model's trace mode reports the resulting races instead).

        A sealed plan cannot change, so once it passes it is not checked again (``compile`` checks it before
        returning it; each ``simulate`` then asked again: 21 ms of the GPT training step's 86 kernels under
        astitch, 58 ms of its 1095 unfused ones, about a seventh of their simulation) -- unless its graph,
        which stays the caller's object, has other nodes, inputs or outputs since.
        An unsealed plan (a planner still building it) is checked on every call."""
        from .validate import validate_plan
        key = (bool(barriers), _graph_shape(self.graph)) if self.sealed else None
        if key is not None and key in self.__dict__.get("_passed", ()):
            return self
        validate_plan(self, barriers=barriers)
        if key is not None:
            object.__setattr__(self, "_passed", self.__dict__.get("_passed", frozenset()) | {key})
        return self

    # -- JSON ------------------------------------------------------------------
    def to_dict(self) -> dict:
        from .serialize import graph_to_dict
        kernels = []
        for k in self.kernels:
            kd = {f: getattr(k, f) for f in ("name", "kind", "grid", "block", "inputs", "outputs", "shared_bytes",
                                             "registers_per_thread", "library_op", "notes", "scratch_offset",
                                             "scratch_bytes", "index_bits")}
            kd["values"] = {n: _value_dict(v) for n, v in k.values.items()}
            kd["views"] = dict(k.views)
            kd["ends"] = [e.to_dict() for e in k.ends]
            if k.machine is not None:
                kd["machine"] = k.machine.to_dict()
            kd["stages"] = [{"dominant": s.dominant, "ops": list(s.ops), "epilogue": list(s.epilogue),
                             "mapping": s.mapping.to_dict(), "barrier_after": s.barrier_after,
                             "barrier_why": s.barrier_why, "recompute": dict(s.recompute),
                             "sync_after_combine": s.sync_after_combine, "grid_syncs": s.grid_syncs,
                             "reduces": list(s.reduces), "task_shape": list(s.task_shape), "roots": list(s.roots),
                             "live_out": list(s.live_out), "scratch_slots": s.scratch_slots,
                             "reduce_scheme": s.reduce_scheme, "reduce_why": s.reduce_why} for s in k.stages]
            kernels.append(plain(kd))
        return {"format": PLAN_FORMAT, "strategy": self.strategy, "gpu": self.gpu.name,
                "graph": graph_to_dict(self.graph), "kernels": kernels, "notes": plain(self.notes),
                "options": plain(self.options), "search": plain(self.search)}

    def to_json(self, indent: Optional[int] = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        from .serialize import graph_from_dict
        if not isinstance(d, dict):
            raise AStitchError(f"a plan dict must be a dict written by plan.to_dict(), got {type(d).__name__}")
        try:
            if d.get("format") == "astitch-sim plan 1":
                raise AStitchError("this plan JSON (format 'astitch-sim plan 1') predates the recorded bookkeeping "
                                   "(stage reads, live values, scratch layout); compile the graph again and write "
                                   "it with plan.to_json()")
            if d.get("format") != PLAN_FORMAT:
                raise AStitchError(f"not an astitch-sim plan (format {d.get('format')!r}); "
                                   "write plans with plan.to_json()")
            graph = graph_from_dict(d["graph"])
            kernels = []
            for kd in d["kernels"]:
                stages = [Stage(dominant=s["dominant"], ops=list(s["ops"]), epilogue=list(s["epilogue"]),
                                mapping=ThreadMapping.from_dict(s["mapping"]), barrier_after=s["barrier_after"],
                                recompute=dict(s["recompute"]), sync_after_combine=bool(s["sync_after_combine"]),
                                grid_syncs=s["grid_syncs"], barrier_why=s["barrier_why"],
                                reduces=s["reduces"], task_shape=s["task_shape"], roots=s["roots"],
                                live_out=s["live_out"], scratch_slots=s["scratch_slots"],
                                **_scheme_of(s))
                      for s in kd["stages"]]
                values = {n: Value(**v) for n, v in kd["values"].items()}
                kernels.append(Kernel(name=kd["name"], kind=kd["kind"], grid=kd["grid"], block=kd["block"],
                                      stages=stages, values=values, inputs=list(kd["inputs"]),
                                      outputs=list(kd["outputs"]), shared_bytes=kd["shared_bytes"],
                                      registers_per_thread=kd["registers_per_thread"],
                                      library_op=kd["library_op"], notes=list(kd["notes"]),
                                      views=dict(kd["views"]), scratch_offset=kd["scratch_offset"],
                                      scratch_bytes=kd["scratch_bytes"],
                                      index_bits=kd.get("index_bits", 64),
                                      ends=[KernelEnd.from_dict(e) for e in kd.get("ends", [])],
                                      machine=MachineResources.from_dict(kd["machine"]) if kd.get("machine")
                                      else None))
            return cls(graph, d["strategy"], get_gpu(d["gpu"]), kernels, list(d.get("notes", [])),
                       dict(d.get("options", {})), dict(d.get("search", {}))).seal()
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            if isinstance(e, AStitchError):
                raise
            raise AStitchError(f"plan JSON is malformed ({type(e).__name__}: {e}); "
                               "write plans with plan.to_json()") from None

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        if not isinstance(text, (str, bytes, bytearray)):
            raise AStitchError(f"Plan.from_json needs the JSON text of plan.to_json(), got {type(text).__name__}")
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise AStitchError(f"plan JSON does not parse: {e}") from None
        if not isinstance(d, dict):
            raise AStitchError("plan JSON must be an object written by plan.to_json()")
        return cls.from_dict(d)

    # -- reading ---------------------------------------------------------------
    def __str__(self) -> str:
        from .plan_print import format_plan
        return format_plan(self)

    def __repr__(self) -> str:
        return (f"<Plan {self.strategy} for {self.graph.name} on {self.gpu.name}: "
                f"{len(self.generated)} generated + {len(self.library)} library kernels>")

    def to_dot(self) -> str:
        from .plan_print import plan_to_dot
        return plan_to_dot(self)


def _graph_shape(graph) -> tuple:
    """What of a graph a plan's check depends on that its caller could still change after compiling: which
    nodes it has, its inputs and its outputs (by name and identity)."""
    return (id(graph), tuple(graph.nodes), tuple(map(id, graph.nodes.values())), tuple(map(id, graph.inputs)),
            tuple(map(id, graph.outputs)))
