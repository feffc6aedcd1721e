"""What one kernel's machine code costs per element: a static SASS profile and the issue-rate bound.

A memory-bound kernel reaches the copy bandwidth only if its SMs can *issue* its instructions
faster than DRAM delivers its bytes.  That is checkable without a GPU: compile the kernel
(:func:`gpu_backend.machine.machine_code.sass_listing`: NVVM -> PTX -> ``ptxas`` -> ``nvdisasm``), count its SASS,
and compare two lower bounds on its time:

* **issue time** = thread-instructions / 32 (per warp) / (SMs x 4 schedulers x clock),
  each scheduler issuing at most one warp-instruction per clock (Volta to Hopper);
* **DRAM time** = the kernel's minimum bytes (every input read once, every output
  written once) / the preset's copy bandwidth (``GPU.measured_bandwidth_gbs``: H100 3.0 TB/s).

``bound = DRAM time / issue time`` (capped at 1) is the largest fraction of copy bandwidth the
kernel can reach even at perfect issue; below 1 it is issue-bound whatever the memory does.
Thread-instructions come from the static count of the kernel's main body: for straight-line
code (no backward branch) every instruction runs at most once per thread, so the count is an
upper bound on what a thread executes (predicated-off instructions still issue; a first-lane
epilogue most warps skip is counted for every warp).  A loop the compiler kept (a backward
branch) has its body counted once per trip, and the row says ``loop`` -- an estimate, not a bound.
The trips come from the global accesses: the generated source says how many one thread executes
(:mod:`.source_counts`), the SASS how many sit outside the kept loops and how many inside one trip,
so ``trips = (accesses - outside) / inside`` (:meth:`SassProfile.loop_trips`), counted for the share of
the grid's threads that work in the loops (a stitched kernel's small stage leaves most of them idle).
``ptxas`` unrolls the generated loops, so a trip is several of the source's iterations (a column
reduction's 256 elements per thread: 16 trips of 16 loads).  Without that count (a loop holding no global access), the body is
counted once per element of the thread, as if nothing were unrolled.

Excluded from the main body: ``$__internal_*`` subroutines (out-of-line slow paths of
division and square root, taken only for denormal or special operands), the out-of-line
``WARPSYNC.COLLECTIVE`` retry paths ptxas adds to warp shuffles it cannot prove converged
(taken only by a diverged warp; their branch back is not a loop), and the end-of-code
self-branch and NOP padding.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

#: opcode head -> class; a head not listed is "other" (counted in the total)
OPCODE_CLASS = {
    **{h: "global_load" for h in ("LDG",)}, **{h: "global_store" for h in ("STG",)},
    **{h: "shared" for h in ("LDS", "STS", "ATOMS", "LDSM")},
    **{h: "local" for h in ("LDL", "STL")},
    **{h: "barrier" for h in ("BAR",)}, **{h: "shuffle" for h in ("SHFL",)},
    **{h: "atomic" for h in ("ATOMG", "RED", "REDG", "ATOM")},
    **{h: "int_addr" for h in ("IMAD", "IADD3", "LEA", "SHF", "LOP3", "ISETP", "SEL", "IABS", "IMNMX", "PRMT",
                                "MOV", "S2R", "S2UR", "CS2R", "ULDC", "LDC", "UMOV", "ULEA", "UIADD3", "USHF",
                                "ULOP3", "UIMAD", "ISCADD", "IMUL", "VIADD", "UISETP", "USEL", "PLOP3", "P2R",
                                "R2P", "R2UR", "MOV32I", "VIMNMX", "FLO", "POPC", "BREV", "IADD", "UPRMT",
                                "UMOV32I", "IMNMX", "UFLO", "UPOPC", "ULOP", "UIADD3.64", "VIADDMNMX", "I2I",
                                "LDCU")},
    **{h: "float" for h in ("FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSEL", "FSET", "HADD2", "HFMA2", "HMUL2",
                             "HMNMX2", "HSETP2", "MUFU", "FCHK", "DADD", "DMUL", "DFMA", "DSETP", "FRND", "FMNMX3",
                             "F2F", "F2I", "I2F", "I2FP", "F2FP", "FSWZADD")},
    **{h: "control" for h in ("BRA", "BSSY", "BSYNC", "EXIT", "WARPSYNC", "BREAK", "RET", "BPT", "YIELD", "JMP",
                               "CALL", "NANOSLEEP", "BMOV", "ERRBAR", "CCTL", "MEMBAR", "DEPBAR", "NOP", "VOTE",
                               "VOTEU", "MATCH", "REDUX", "ELECT", "ACQBULK", "FENCE")},
}
#: access width in bits by opcode suffix (no suffix: 32 bits)
WIDTH = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "64": 64, "128": 128}
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);")
_LABEL = re.compile(r"^\s*([.$][\w$.]+):")


@dataclass
class SassProfile:
    """Static counts of one kernel's main body (see the module docstring for what is excluded)."""
    total: int = 0                                  # instructions in the main body
    classes: dict = field(default_factory=dict)     # OPCODE_CLASS class -> count
    loads: dict = field(default_factory=dict)       # global load width (bits) -> count
    stores: dict = field(default_factory=dict)      # global store width (bits) -> count
    loop_body: int = 0                              # instructions inside loops the compiler kept (0: straight-line)
    loop_accesses: int = 0                          # global loads and stores among them

    @property
    def int_addr(self) -> int:
        return self.classes.get("int_addr", 0)

    @property
    def accesses(self) -> int:
        """Global load and store instructions in the main body."""
        return sum(self.loads.values()) + sum(self.stores.values())

    def loop_trips(self, elements_per_thread: float, accesses=None) -> float:
        """Trips a thread of the grid makes through the kept loops, on average: the accesses a working
        thread executes (``accesses``, the generated source's count: :func:`.source_counts.global_accesses`)
        beyond the straight-line code's, over the accesses in one trip of the loops, times the share of
        threads that work in the loops; one per element where that count is missing or the loops hold no
        access (the module docstring says why)."""
        counted = self.counted_trips(accesses)
        return counted if counted is not None else max(1.0, elements_per_thread)

    def counted_trips(self, accesses) -> float | None:
        """:meth:`loop_trips` from the source's ``accesses``; ``None`` where they do not tell."""
        outside = self.accesses - self.loop_accesses
        if accesses is None or not self.loop_accesses or accesses.per_thread <= outside:
            return None
        return (accesses.per_thread - outside) / self.loop_accesses * accesses.loop_share

    def per_thread(self, elements_per_thread: float, accesses=None) -> float:
        """Thread-instructions per thread: straight-line code once, a kept loop's body once per trip
        (:meth:`loop_trips`)."""
        if not self.loop_body:
            return float(self.total)
        return self.total - self.loop_body + self.loop_body * self.loop_trips(elements_per_thread, accesses)

    def widths(self, which: str) -> str:
        """``"4x32 2x128"``: the global loads (``"load"``) or stores by width."""
        d = self.loads if which == "load" else self.stores
        return " ".join(f"{n}x{w}" for w, n in sorted(d.items())) or "-"


def _parse(sass: str, entry: str) -> tuple:
    """(instructions of ``entry``'s main body as (address, opcode, operands), label -> address)."""
    insts, labels, pending = [], {}, []
    inside, internal = False, False
    for line in sass.splitlines():
        words = line.split()
        if words and words[0] == ".section":
            inside = len(words) > 1 and words[1].split(",")[0] == f".text.{entry}"
            internal = False
            continue
        if not inside:
            continue
        m = _LABEL.match(line)
        if m:
            if m.group(1).startswith("$__internal"):
                internal = True
            pending.append(m.group(1))
            continue
        m = _LINE.search(line)
        if m is None:
            continue
        address = int(m.group(1), 16)
        for p in pending:
            labels[p] = address
        pending = []
        if not internal:
            insts.append((address, m.group(3), m.group(4)))
    return insts, labels


def profile(sass: str, entry: str) -> SassProfile:
    """Count ``entry``'s main-body SASS by class and global access width, and find its kept loops."""
    insts, labels = _parse(sass, entry)
    body = []
    for address, op, args in insts:
        if op == "NOP":
            continue
        target = re.search(r"\.L_x_\d+", args)
        if op.startswith("BRA") and target and labels.get(target.group(0)) == address:
            continue                               # the end-of-code trap: a branch to itself
        body.append((address, op, args))
    cold = collective_fallbacks(body, set(labels.values()))
    body = [b for b in body if b[0] not in cold]
    p = SassProfile(total=len(body))
    classes: Counter = Counter()
    loads: Counter = Counter()
    stores: Counter = Counter()
    for _, op, _ in body:
        head, *suffixes = op.split(".")
        cls = OPCODE_CLASS.get(head, "other")
        classes[cls] += 1
        if cls in ("global_load", "global_store"):
            bits = next((WIDTH[s] for s in suffixes if s in WIDTH), 32)
            (loads if cls == "global_load" else stores)[bits] += 1
    in_loop = set()
    for address, op, args in body:
        target = re.search(r"\.L_x_\d+", args)
        if op.startswith("BRA") and target and labels.get(target.group(0), 1 << 62) < address:
            start = labels[target.group(0)]
            in_loop.update(a for a, _, _ in body if start <= a <= address)
    p.classes, p.loads, p.stores, p.loop_body = dict(classes), dict(loads), dict(stores), len(in_loop)
    p.loop_accesses = sum(1 for a, op, _ in body
                          if a in in_loop and OPCODE_CLASS.get(op.split(".")[0]) in ("global_load", "global_store"))
    return p


def cold_addresses(sass: str, entry: str) -> set:
    """Addresses of ``entry``'s shuffle retry paths (:func:`collective_fallbacks`) in a listing."""
    insts, labels = _parse(sass, entry)
    return collective_fallbacks(insts, set(labels.values()))


def collective_fallbacks(body: list, starts: set) -> set:
    """Addresses of the out-of-line retry paths ptxas adds to a ``shfl.sync`` it cannot prove converged:
    from the block holding a ``WARPSYNC.COLLECTIVE`` (its nearest label) to the branch back into the
    main body.  A converged warp (every warp of a generated kernel reaches its shuffles together) never
    runs them, and their branch back is not a loop."""
    cold = set()
    addresses = [a for a, _, _ in body]
    for i, (a, op, _) in enumerate(body):
        if not op.startswith("WARPSYNC") or "COLLECTIVE" not in op:
            continue
        j = i
        while j > 0 and addresses[j] not in starts:
            j -= 1
        k = i
        while k < len(body) - 1 and not body[k][1].startswith("BRA"):
            k += 1
        cold.update(addresses[j:k + 1])
    return cold


@dataclass(frozen=True)
class IssueBound:
    """The two lower bounds on a kernel's time and their ratio (module docstring: the formula)."""
    issue_us: float
    dram_us: float

    @property
    def fraction(self) -> float:
        """Largest fraction of copy bandwidth the issue rate allows (1.0: not issue-bound)."""
        return 1.0 if self.issue_us <= 0 else min(1.0, self.dram_us / self.issue_us)


def issue_bound(gpu, thread_instructions: float, threads: int, nbytes: int) -> IssueBound:
    """``threads`` threads each issuing ``thread_instructions`` against ``nbytes`` at the preset's copy rate."""
    warp_ips = gpu.sms * 4 * gpu.clock_ghz * 1e9
    issue_s = thread_instructions * threads / 32 / warp_ips
    dram_s = nbytes / (gpu.measured_bandwidth_gbs * 1e9)
    return IssueBound(issue_s * 1e6, dram_s * 1e6)
