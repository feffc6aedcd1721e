"""FusionStitching's "domain-specific cost model": a kernel's counters estimated from its plan alone.

The SIMT model (:mod:`astitch_sim.simt`) counts what a plan does by *running*
it: real values at every element.  A search that scores hundreds of candidate
kernels cannot afford that, so this module estimates the same counters
(:class:`~astitch_sim.simt.stats.StageStats`) from the kernel's structure in
microseconds -- bytes each stage reads and writes, flops (recomputation
included), shared-memory traffic, barriers, atomics -- and hands them to the
SIMT model's own formula (:func:`astitch_sim.simt.cost.predict_kernel`).  So
the search and ``simulate`` price a kernel with the same terms (launches,
Little's-law bandwidth, wave quantisation, barriers, recomputation); only the
counts are estimates.

The estimates, per stage over a domain of ``D`` elements:

* a kernel input (or a value another stage stored in global memory) read by the
  stage: its whole tensor once, as 32-byte sectors, when it is at least as big as
  the domain; when it is *broadcast* into the domain, one sector per warp
  instruction (``D / 32``), or its bytes again for every element when the
  broadcast keeps the fastest-varying dim (a bias along a row); its *bytes*, as
  the SIMT model counts them (distinct elements per block), are those of one
  read per block trip for such a row vector (fewer when a block packs rows);
  an input an AStitch kernel keeps in registers (hierarchical data reuse) is
  read by the stage that loads it, and by no later stage;
* every value written to global memory: its bytes once; to shared memory: its
  bytes, and its bytes again per reading element;
* flops: the op table's flops per evaluation, times the evaluations (a value a
  stage recomputes per broadcast element counts each time); a reduce one per
  input element plus its tree; split reductions combine with atomics (and a
  memset before the kernel), or through partials in global memory that each
  split block of a task reads back after a grid barrier (AStitch's);
* barriers: one per block per block barrier; a reduction tree ``log2(lanes) + 1``
  per block and task trip.

Which of those reads the L1 or the L2 serves is decided by the SIMT model's own
L2 model (:func:`astitch_sim.simt.l2.annotate`, through :func:`priced`) on the
estimated per-tensor traffic, as ``simulate`` decides it on the counted one.

What it leaves out: exact coalescing of transposed access (charged as if
coalesced) and the sampling-free details the executor knows.  The search only
compares candidates, and :mod:`.fusionstitching` keeps XLA's kernel unless a
candidate wins by a margin (``min_gain``), so these errors do not turn a
win into a loss; ``tests/planning/test_fusionstitching.py`` checks that the SIMT model
agrees on every catalog workload.
"""
from __future__ import annotations

from math import ceil, log2
from types import SimpleNamespace

from ...passes.analysis import is_expensive
from ...ir.dtypes import itemsize
from ...plan.machine import resident_resources
from ...simt import l2
from ...simt.cost import predict_kernel
from ...simt.stats import KernelStats, StageStats, TensorTraffic
from ...plan.reduce_scheme import WARP, butterfly, warps_across
from ...plan.vocabulary import ReduceScheme

SECTOR = 32


def _sectors(nbytes: float) -> int:
    return int(ceil(nbytes / SECTOR))


def _read_sectors(node, domain_size: int, domain_shape: tuple) -> int:
    """Sectors a stage over ``domain_size`` elements moves to read ``node`` from global memory."""
    if node.size >= domain_size or node.rank == 0 and domain_size <= 1:
        return _sectors(node.nbytes)
    if node.rank and domain_shape and node.shape[-1] == domain_shape[-1] and node.shape[-1] > 1:
        return _sectors(domain_size * itemsize(node.dtype))     # a row vector broadcast down: re-read per row
    return max(_sectors(node.nbytes), ceil(domain_size / 32))      # one sector per warp instruction


def _read_bytes(node, domain_size: int, mapping, sectors: int) -> int:
    """Bytes a stage reads of ``node``: the SIMT model counts the *distinct* elements each block reads (per
    block and task trip; L1 catches a broadcast within a block).  A row vector broadcast down the rows
    (``gamma`` in layer norm) is read once per block trip, at most the elements the trip covers: packing
    several rows into one block reads it fewer times (``mapping``: the stage's, None for an epilogue read)."""
    full = min(sectors * SECTOR, domain_size * itemsize(node.dtype))
    shape = tuple(mapping.domain) if mapping is not None else ()
    if node.size >= domain_size or not (node.rank and shape and node.shape[-1] == shape[-1] and node.shape[-1] > 1):
        return full
    units = max(1, mapping.grid * mapping.task_iterations)
    return min(full, units * min(node.size, ceil(domain_size / units)) * itemsize(node.dtype))


def _lanes(mapping) -> int:
    """Threads that fold one reduction task (the tree's width)."""
    if mapping.kind == "rows":
        return mapping.threads_per_row
    if mapping.kind == "columns":
        return mapping.rows_per_block
    return 1


def stage_counters(graph, kernel, index: int) -> StageStats:
    """Estimated counters of stage ``index`` of a generated ``kernel``."""
    s = kernel.stages[index]
    m = s.mapping
    st = StageStats(stage=index, dominant=s.dominant, elements=m.size)
    own = set(s.ops) | set(s.epilogue)
    seen_reads = set()
    for part, names in (("ops", s.ops), ("epilogue", s.epilogue)):
        for n in names:
            for o in graph[n].operands:
                if o.name in own or o.name in seen_reads or (o.op == "constant" and o.rank == 0):
                    continue
                seen_reads.add(o.name)
                v = kernel.values.get(o.name)
                space = v.space if v is not None else "global"
                if v is not None and v.loaded_in >= 0:      # an input kept in registers after one load
                    space = "global" if v.loaded_in == index else "register"
                at = m.size if part == "ops" else o.size
                if space == "global":
                    sec = _read_sectors(o, at, m.domain if part == "ops" else ())
                    if graph[n].opdef.kind == "indexed" and o.size > at:
                        sec = min(sec, at)      # a gather reads its elements where the indices say: a sector each
                    st.global_sectors_read += sec
                    st.global_bytes_read += _read_bytes(o, at, m if part == "ops" else None, sec)
                    st.global_requests += ceil(at / 32)
                    _touch(st, o.name, o.nbytes).read_sectors += sec
                elif space == "shared":
                    st.shared_bytes_read += at * itemsize(o.dtype)
                    st.shared_requests += ceil(at / 32)
    for n in list(s.ops) + list(s.epilogue):
        node = graph[n]
        v = kernel.values.get(n)
        if node.op == "reduce":
            src = node.operands[0]
            lanes = _lanes(m)
            tasks, splits = m.rows, m.splits
            st.flops += node.opdef.flops * src.size + tasks * splits * lanes
            pair = sum(itemsize(x.dtype) for x in node.operands[:len(node.operands) // 2])
            if s.reduce_scheme is ReduceScheme.SHUFFLE:       # butterflies; warp totals when a task spans warps
                warps, w = m.block // WARP, warps_across(s)
                trips = m.grid * m.task_iterations
                st.shuffles += trips * warps * len(butterfly(min(lanes, WARP)) + butterfly(w)) * \
                    (len(node.operands) // 2)
                if w:
                    st.shared_bytes_written += trips * warps * pair
                    st.shared_bytes_read += trips * warps * w * pair
                    st.shuffle_barriers = trips          # one barrier for all the stage's reduces
            elif lanes > 1:
                st.shared_bytes_written += pair * tasks * splits * (2 * lanes - 1)
                st.shared_bytes_read += pair * tasks * splits * 2 * (lanes - 1)
                st.tree_barriers += m.grid * m.task_iterations * (int(log2(lanes)) + 1)
            if splits > 1 and m.combine == "atomic":
                st.atomics += tasks * splits
            elif splits > 1:              # grid-barrier combine: partials stored, read back by every split block
                partials = tasks * splits * pair
                st.global_bytes_written += partials
                st.global_sectors_written += _sectors(partials)
                st.global_bytes_read += partials * splits
                st.global_sectors_read += _sectors(partials) * splits
                scratch = _touch(st, f"{n}.partials", partials)
                scratch.written_sectors += _sectors(partials)
                scratch.read_sectors += _sectors(partials) * splits
        elif node.kind not in ("source",):
            evaluations = node.size * (s.recompute.get(n, 1) if n in s.ops else m.splits)
            flops = node.opdef.flops * evaluations
            st.flops += flops
            if is_expensive(node):
                st.expensive_flops += flops
            copies = s.recompute.get(n, 1) if n in s.ops else m.splits
            if copies > 1:
                st.recomputed_flops += flops * (copies - 1) // copies
        if v is None:
            continue
        if v.output or (v.space == "global" and v.stage == index):
            st.global_sectors_written += _sectors(node.nbytes)
            st.global_bytes_written += node.nbytes
            _touch(st, n, node.nbytes).written_sectors += _sectors(node.nbytes)
        if v.space == "shared" and v.stage == index:
            st.shared_bytes_written += node.nbytes
    if s.barrier_after == "block":
        st.block_barriers += m.grid
    # grid barriers where the executor counts them (inside the stage, or after it): the L2 model asks whether
    # one separates two stages' reads of a tensor; their total is the kernel's ``global_barriers``
    st.grid_barriers = s.grid_syncs + (s.barrier_after == "grid")
    return st


def _touch(st: StageStats, name: str, nbytes: int) -> TensorTraffic:
    """The stage's traffic record of global buffer ``name`` (what the L2 model reads), made at its first touch."""
    if name not in st.tensors:
        st.tensors[name] = TensorTraffic(int(nbytes))
    return st.tensors[name]


def kernel_counters(graph, kernel) -> KernelStats:
    """Estimated :class:`KernelStats` of a generated kernel (no values computed; no cache decided: every read
    sector at DRAM until :func:`priced` hands them to the L2 model)."""
    ks = KernelStats(kernel.name, kernel.kind, kernel.grid, kernel.block, *resident_resources(kernel))
    ks.stages = [stage_counters(graph, kernel, i) for i in range(len(kernel.stages))]
    for s in kernel.stages:
        if s.mapping.splits > 1 and s.mapping.combine == "atomic":
            ks.memset_bytes += sum(graph[n].nbytes for n in s.ops if graph[n].op == "reduce")
    return ks


def priced(graph, gpu, kernels) -> list:
    """Estimated, priced :class:`KernelStats` of ``kernels`` run in this order on ``gpu`` (library kernels:
    None, priced 0 by the callers).

    The estimated reads go through the SIMT model's own L2 model (:func:`astitch_sim.simt.l2.annotate`) before
    the formula prices them, as ``simulate`` does: a broadcast operand read again within a stage comes from
    the L1 or the L2, a tensor an earlier stage or kernel of ``kernels`` touched from the L2 while it is
    resident.  Until the second GPU window (2026-11-29) the estimate charged every read sector at DRAM, and
    was 1.5x over the H200's times where the simulation was 8% off (bias+GELU: 151 us estimated, 102
    simulated, 97 measured: its bias re-read by every row).  Priced one kernel at a time (a search's
    candidate), no kernel before it has left anything in the L2."""
    stats = [kernel_counters(graph, k) if k.kind != "library" else None for k in kernels]
    on = SimpleNamespace(gpu=gpu)          # what annotate and the formula read of a plan: its GPU
    l2.annotate(on, [ks for ks in stats if ks is not None], kernels=[k for k in kernels if k.kind != "library"])
    for k, ks in zip(kernels, stats, strict=True):
        if ks is not None:
            predict_kernel(on, k, ks)
    return stats


def estimate_us(graph, gpu, kernel) -> float:
    """Predicted time of one generated kernel (us): estimated counters, the SIMT model's formula."""
    return priced(graph, gpu, [kernel])[0].predicted_us
