"""Every kernel of a plan compiled all the way to machine code, with NVIDIA's real compiler (no GPU needed).

The pipeline is the one Numba runs before a launch on a GPU, stopped before the driver:

1. the generated Numba source -> NVVM -> PTX for the target's compute capability
   (``numba.cuda.compile_ptx``; the device is never asked, we name the target);
2. PTX -> machine code with ``ptxas -arch=sm_XX -v -maxrregcount=<plan's registers>``
   (Numba's ``max_registers``), which reports registers, spills, stack and shared memory;
   a kernel with a grid barrier calls CUDA's device runtime, so it is assembled as
   relocatable code (``-c``) and linked to ``libcudadevrt.a`` with nvJitLink, as Numba
   does; the linked kernel's numbers are the final ones;
3. the machine code -> SASS with ``nvdisasm``, counted by instruction class
   (:func:`instruction_mix`; sm_80 and newer: CUDA 13's nvdisasm no longer reads sm_70).

:func:`compile_kernels` returns one :class:`KernelMachineCode` per kernel;
:func:`~gpu_backend.machine.apply.apply_compiler` uses it to check and fix a plan's
register assumption.  Results are cached on disk (:mod:`gpu_backend.machine.toolchain`).
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Optional

from astitch_sim.errors import AStitchError
from astitch_sim.plan.machine import MachineResources

from . import toolchain
from ..launch.plans import compile_plan

#: SASS opcode classes counted in the instruction mix: (class, opcode regex); first match wins
MIX_CLASSES = (
    ("global_load", r"LDG"), ("global_store", r"STG"),
    ("shared_load", r"LDS"), ("shared_store", r"STS"),
    ("local_load", r"LDL"), ("local_store", r"STL"),
    ("generic_load", r"LD"), ("generic_store", r"ST"),
    ("global_atomic", r"ATOMG|REDG?"), ("shared_atomic", r"ATOMS"), ("generic_atomic", r"ATOM"),
    ("barrier", r"BAR"), ("shuffle", r"SHFL"),
)
#: access width in bits by opcode suffix (no suffix: 32 bits)
WIDTH_SUFFIX = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "64": 64, "128": 128}
WIDE_CLASSES = ("global_load", "global_store", "shared_load", "shared_store", "local_load", "local_store")
GRID_SYNC = "cudaCGSynchronize"
#: bump when :func:`instruction_mix` counts something new (cached mixes are keyed by it)
MIX_FORMAT = 3
#: the fields of a cached ``MachineResources`` record (its cache key includes them)
RESOURCE_FIELDS = ",".join(f.name for f in fields(MachineResources))


@dataclass
class KernelMachineCode:
    """One kernel compiled for one architecture: ptxas's numbers and (if a disassembler exists) its SASS mix."""
    index: int                                   # kernel index in the plan
    name: str
    resources: MachineResources
    mix: Optional[dict] = None                   # class -> count; '<class>.<bits>' for widths; None: not disassembled
    mix_missing: str = ""                        # why mix is None
    ptxas_log: str = field(default="", repr=False)


def arch_of(gpu) -> str:
    major, minor = gpu.compute_capability
    return f"sm_{major}{minor}"


def compute_capability(arch: str) -> tuple:
    """``"sm_90"`` -> ``(9, 0)``: what the tools' version rules compare (nvdisasm reads sm_75 and later)."""
    digits = arch.removeprefix("sm_")
    return int(digits[:-1]), int(digits[-1])


# -- step 1: PTX -----------------------------------------------------------------------------

def _target_device(cc):
    """Numba asks the current device for its compute capability (grid groups do); we answer."""
    from .typecheck import patch_device_query
    patch_device_query(cc)


def kernel_ptx(plan, arch: str, indices=None) -> list:
    """``[(KernelSpec, ptx text)]`` for every kernel of ``plan`` (generated and library), or for the kernels
    whose plan index is in ``indices``; cached on disk."""
    from ..numba_compat import cudasim_enabled
    if cudasim_enabled():
        raise AStitchError("compiling to machine code needs the real numba.cuda: unset NUMBA_ENABLE_CUDASIM "
                           "(python -m gpu_backend.machine.machine_code runs in a fresh process)")
    import numba
    from numba import cuda
    from numba.cuda import types
    from numba.np import numpy_support

    cc = compute_capability(arch)
    compiled = compile_plan(plan)
    out = []
    for spec, fn in zip(compiled.generated.kernels, compiled.functions):
        if indices is not None and spec.index not in indices:
            continue
        key = toolchain.cache_key("ptx", compiled.generated.source, spec.func, arch, numba.__version__,
                                  _numba_cuda_version())
        hit = toolchain.cache_get(key)
        if hit is None:
            _target_device(cc)
            argtypes = tuple(types.Array(numpy_support.from_dtype(p.storage), 1, "C") for p in spec.params)
            ptx, _ = cuda.compile_ptx(fn.py_func, argtypes, cc=cc)
            hit = {"ptx": ptx}
            toolchain.cache_put(key, hit)
        out.append((spec, hit["ptx"]))
    return out


def _numba_cuda_version() -> str:
    try:
        from importlib.metadata import version
        return version("numba-cuda")
    except Exception:               # noqa: BLE001
        return "?"


def entry_name(ptx: str) -> str:
    m = re.search(r"\.entry\s+(\S+?)\s*\(", ptx)
    if not m:
        raise AStitchError("no .entry in the PTX Numba produced (not a kernel?)")
    return m.group(1)


def ptx_static_shared(ptx: str) -> int:
    """Bytes of ``.shared`` arrays the PTX module declares (Numba's ``cuda.shared.array``)."""
    return sum(int(n) for n in re.findall(r"^\s*(?:\.visible\s+|\.extern\s+)?\.shared\s+(?:\.align\s+\d+\s+)?\.b8\s+\S+?\[(\d+)\]", ptx, re.M))


# -- step 2: machine code ------------------------------------------------------------------------

_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_LINK_PROPS = re.compile(r"used (\d+) registers.*?(\d+) stack, (\d+) bytes smem")


def _ptxas(tc, ptx_file: Path, cubin: Path, arch: str, cap: int, relocatable: bool) -> str:
    cmd = [tc.ptxas, f"-arch={arch}", "-v", f"-maxrregcount={cap}", str(ptx_file), "-o", str(cubin)]
    if relocatable:
        cmd.insert(3, "-c")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AStitchError(f"ptxas failed for {arch} ({' '.join(cmd[1:4])}): {r.stderr.strip()[-2000:]}")
    return r.stderr + r.stdout


def _link_devrt(tc, cubin: bytes, arch: str, entry: str) -> tuple:
    """Link a relocatable kernel to CUDA's device runtime; returns (linked cubin, info log)."""
    from cuda.bindings import nvjitlink as J
    h = J.create(3, [f"-arch={arch}", "-verbose", f"-kernels-used={entry}"])
    try:
        J.add_data(h, J.InputType.CUBIN, cubin, len(cubin), "kernel.cubin")
        J.add_file(h, J.InputType.LIBRARY, tc.cudadevrt)
        J.complete(h)
        size = J.get_info_log_size(h)
        log = bytearray(size)
        J.get_info_log(h, log)
        size = J.get_linked_cubin_size(h)
        linked = bytearray(size)
        J.get_linked_cubin(h, linked)
        return bytes(linked), log.decode(errors="replace")
    finally:
        J.destroy(h)


def _link_props(log: str, entry: str) -> tuple:
    at = log.find(f"Function properties for '{entry}'")
    m = _LINK_PROPS.search(log, at) if at >= 0 else None
    if m is None:
        raise AStitchError(f"nvJitLink's log has no properties for {entry}: {log[-1000:]}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def assemble(ptx: str, arch: str, max_registers: int, cooperative: bool, disassemble: bool = True) -> dict:
    """ptxas (and nvJitLink for a grid barrier, nvdisasm for the mix) on one kernel's PTX; cached on disk.

    Returns ``{"resources": MachineResources dict, "mix": dict | None, "mix_missing": str, "log": str}``.
    """
    tc = toolchain.find()
    dis = bool(disassemble and tc.nvdisasm and compute_capability(arch) >= (7, 5))
    entry = entry_name(ptx)
    # keyed by the PTX with the kernel's (module-hashed) name taken out: the same kernel in two plans --
    # an unfused op kernel that xla and tvm also emit, a fixture compiled by several strategies -- is
    # assembled once; ptxas's numbers and the SASS do not depend on the symbol's name
    # ... and by the fields of the record it stores: a version of the project that adds one (or reads one
    # fewer) compiles again instead of failing on another version's entry
    key = toolchain.cache_key("sass", ptx.replace(entry, "__kernel__"), arch, max_registers, cooperative, dis, tc.ptxas_version,
                              tc.nvjitlink_version, tc.nvdisasm_version, MIX_FORMAT if dis else 0, RESOURCE_FIELDS)
    hit = toolchain.cache_get(key)
    if hit is not None:
        return hit
    with tempfile.TemporaryDirectory(prefix="astitch_ptxas_") as tmp:
        ptx_file, cubin_file = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        ptx_file.write_text(ptx)
        log = _ptxas(tc, ptx_file, cubin_file, arch, max_registers, relocatable=cooperative)
        frame = _PTXAS_FRAME.search(log)
        regs = _PTXAS_REGS.search(log)
        if frame is None or regs is None:
            raise AStitchError(f"cannot read ptxas -v output for {arch}: {log[-1000:]}")
        stack, spill_st, spill_ld = (int(x) for x in frame.groups())
        registers = int(regs.group(1))
        own_shared = ptx_static_shared(ptx)
        cubin = cubin_file.read_bytes()
        if cooperative:
            cubin, link_log = _link_devrt(tc, cubin, arch, entry)
            registers, stack, total_shared = _link_props(link_log, entry)
            log += link_log[link_log.find(f"Function properties for '{entry}'"):]
        else:
            smem = _PTXAS_SMEM.search(log)
            total_shared = int(smem.group(1)) if smem else 0
        res = MachineResources(arch=arch, tool=f"ptxas {tc.ptxas_version}", registers=registers,
                               spill_stores=spill_st, spill_loads=spill_ld, stack=stack,
                               shared_static=min(own_shared, total_shared) if cooperative else total_shared,
                               shared_runtime=max(0, total_shared - own_shared) if cooperative else 0,
                               max_registers=max_registers)
        mix, why = None, ""
        if dis:
            cubin_file.write_bytes(cubin)
            mix = instruction_mix(_nvdisasm(tc, cubin_file), entry)
        elif not tc.nvdisasm:
            why = f"no nvdisasm installed ({toolchain.INSTALL})"
        elif disassemble:
            why = f"nvdisasm {tc.nvdisasm_version} does not read {arch} (CUDA 13 dropped Volta)"
    out = {"resources": res.to_dict(), "mix": mix, "mix_missing": why, "log": log}
    toolchain.cache_put(key, out)
    return out


# -- step 3: the instruction mix ---------------------------------------------------------------

def _nvdisasm(tc, cubin_file: Path) -> str:
    r = subprocess.run([tc.nvdisasm, str(cubin_file)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AStitchError(f"nvdisasm failed: {r.stderr.strip()[-1000:]}")
    return r.stdout


_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);")


def instruction_mix(sass: str, entry: str) -> dict:
    """Count the SASS instructions of ``entry``'s ``.text`` section by class (:data:`MIX_CLASSES`).

    Static counts: each instruction in the code once, however often a loop runs it.
    Loads and stores are also counted by width (``"global_load.32"``); a call to
    ``cudaCGSynchronize`` is a ``grid_sync``; ``total`` counts every instruction;
    ``backward_branch`` counts branches to an earlier address (a loop the compiler
    did not unroll: with none, the code is straight-line and each instruction runs
    at most once per thread, so static counts bound every thread's dynamic counts).
    The out-of-line ``WARPSYNC.COLLECTIVE`` retry paths of warp shuffles are left out
    (:func:`gpu_backend.machine.sass_profile.collective_fallbacks`).
    """
    from .sass_profile import cold_addresses
    cold = cold_addresses(sass, entry)          # shuffle retry paths: a converged warp never runs them
    counts: Counter = Counter()
    counts["backward_branch"] = 0
    labels: dict = {}
    branches: list = []
    inside = False
    for line in sass.splitlines():
        words = line.split()
        if words and words[0] == ".section":
            inside = len(words) > 1 and words[1].split(",")[0] == f".text.{entry}"
            continue
        if not inside:
            continue
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            labels[label.group(1)] = None           # its address: the next instruction's
            continue
        m = _SASS_LINE.search(line)
        if m is None:
            continue
        address, opcode, operands = int(m.group(1), 16), m.group(2), m.group(3)
        for name, where in labels.items():
            if where is None:
                labels[name] = address
        if address in cold:
            continue
        counts["total"] += 1
        head, *suffixes = opcode.split(".")
        if head in ("BRA", "JMP", "BRX"):
            branches.append((address, operands))
        if head == "CALL" and GRID_SYNC in operands:
            counts["grid_sync"] += 1
            continue
        for cls, pattern in MIX_CLASSES:
            if re.fullmatch(pattern, head):
                counts[cls] += 1
                if cls in WIDE_CLASSES:
                    bits = next((WIDTH_SUFFIX[s] for s in suffixes if s in WIDTH_SUFFIX), 32)
                    counts[f"{cls}.{bits}"] += 1
                break
    for address, operands in branches:
        label = re.search(r"\.L_x_\d+", operands)
        number = re.search(r"\b0x([0-9a-f]+)", operands)
        target = labels.get(label.group(0)) if label else (int(number.group(1), 16) if number else None)
        if target is not None and target < address:      # (a branch to itself is the end-of-code trap)
            counts["backward_branch"] += 1
    return dict(counts)


def sass_listing(ptx: str, arch: str, max_registers: int, cooperative: bool) -> str:
    """The SASS text of one kernel's PTX as :func:`assemble` compiles it (same cap, same device-runtime
    link for a grid barrier), for :mod:`gpu_backend.machine.sass_profile`; cached on disk."""
    tc = toolchain.find()
    if not tc.nvdisasm:
        raise toolchain.ToolchainMissing(f"a SASS listing needs nvdisasm: {toolchain.INSTALL}")
    entry = entry_name(ptx)
    key = toolchain.cache_key("sass-listing", ptx, arch, max_registers, cooperative, tc.ptxas_version,
                              tc.nvjitlink_version, tc.nvdisasm_version)
    hit = toolchain.cache_get(key)
    if hit is not None:
        return hit["sass"]
    with tempfile.TemporaryDirectory(prefix="astitch_sass_") as tmp:
        ptx_file, cubin_file = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        ptx_file.write_text(ptx)
        _ptxas(tc, ptx_file, cubin_file, arch, max_registers, relocatable=cooperative)
        if cooperative:
            cubin, _ = _link_devrt(tc, cubin_file.read_bytes(), arch, entry)
            cubin_file.write_bytes(cubin)
        sass = _nvdisasm(tc, cubin_file)
    toolchain.cache_put(key, {"sass": sass})
    return sass


# -- a whole plan -------------------------------------------------------------------------------

def compile_kernels(plan, arch: Optional[str] = None, registers: Optional[dict] = None,
                    disassemble: bool = True, progress=None) -> list:
    """Compile every kernel of ``plan`` to machine code for ``arch`` (default: the plan's GPU).

    ``registers`` maps kernel index -> the ``-maxrregcount`` cap (default: the plan's
    ``registers_per_thread``, exactly what Numba's ``max_registers`` applies on a GPU).
    ``progress(i, n, kernel name)`` is called before each kernel.
    """
    arch = arch or arch_of(plan.gpu)
    ptxs = kernel_ptx(plan, arch)
    out = []
    for i, (spec, ptx) in enumerate(ptxs):
        k = plan.kernels[spec.index]
        if progress is not None:
            progress(i, len(ptxs), k.name)
        cap = (registers or {}).get(spec.index, k.registers_per_thread)
        r = assemble(ptx, arch, cap, spec.cooperative, disassemble)
        out.append(KernelMachineCode(spec.index, k.name, MachineResources.from_dict(r["resources"]),
                                     r["mix"], r["mix_missing"], r["log"]))
    return out
