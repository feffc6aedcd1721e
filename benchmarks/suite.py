"""The benchmark suite: which workloads, at which shapes, for ``gpu_bench`` and ``calibrate``.

Each :class:`Case` names a catalog workload (:mod:`astitch_sim.frontends.workloads`) and
three shapes:

``shape``  the real shape, measured on a GPU (the paper's or today's models);
``quick``  a smaller shape for ``--quick`` (a check that everything runs on the
           GPU in a minute; its numbers are not the results);
``sim``    a tiny shape for ``--simulator`` (Numba's CUDA simulator runs every
           thread in Python: a few thousand elements at most).

``irregular`` marks the shapes the AStitch paper calls irregular (many short
rows, few long ones): the target there is to match or beat ``jax.jit`` and
``torch.compile``.  A case whose minimum traffic (inputs read once + outputs
written once) is at least :data:`LARGE_BYTES` is *large*: the target there is
>= 80% of the measured device-to-device copy bandwidth.

Nothing here allocates: building a graph at any shape is cheap.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Optional

import astitch_sim as asim
from astitch_sim.ir.dtypes import numpy_dtype

#: minimum bytes (inputs + outputs) from which a case counts as "large" (4x an H100's 50 MiB L2)
LARGE_BYTES = 200 * 2**20


@dataclass(frozen=True)
class Case:
    key: str                       # unique id, used in results.json and on the command line (--only)
    workload: str                  # catalog name
    shape: dict                    # full shape (GPU run)
    quick: dict                    # --quick shape
    sim: dict                      # --simulator shape
    title: str = ""                # what it is, for the tables
    irregular: bool = False        # one of the paper's irregular shapes
    notes: str = ""

    def shape_for(self, mode: str) -> dict:
        """``mode``: full | quick | sim."""
        return {"full": self.shape, "quick": self.quick, "sim": self.sim}[mode]

    def graph(self, mode: str = "full"):
        return asim.workload(self.workload, **self.shape_for(mode))


def graph_bytes(graph) -> tuple[int, int]:
    """(input bytes, output bytes): the least traffic any implementation has (each read/written once)."""
    def nbytes(n):
        return int(prod(n.shape)) * numpy_dtype(n.dtype).itemsize
    return sum(nbytes(p) for p in graph.inputs), sum(nbytes(o) for o in graph.outputs)


def graph_elements(graph) -> int:
    """Elements of the biggest tensor in the graph (what simulation time grows with)."""
    return max(int(prod(n.shape)) for n in graph)


def shape_label(shape: dict) -> str:
    vals = list(shape.values())
    return "x".join(str(v) for v in vals) if len(vals) > 1 else str(vals[0])


SUITE: list[Case] = [
    Case("layernorm_16384x768", "layernorm", dict(rows=16384, cols=768), dict(rows=2048, cols=768),
         dict(rows=8, cols=64), "LayerNorm, BERT-base 32x512 tokens x 768"),
    Case("layernorm_8192x4096", "layernorm", dict(rows=8192, cols=4096), dict(rows=1024, cols=4096),
         dict(rows=4, cols=256), "LayerNorm, LLaMA-7B-like 8192 tokens x 4096"),
    Case("rmsnorm_4096x4096", "rmsnorm", dict(rows=4096, cols=4096), dict(rows=512, cols=4096),
         dict(rows=4, cols=128), "RMSNorm, LLaMA-7B 4096 tokens x 4096"),
    Case("softmax_750000x32", "softmax", dict(rows=750000, cols=32), dict(rows=75000, cols=32),
         dict(rows=96, cols=32), "softmax <750000,32> (the paper's DIEN shape)", irregular=True),
    Case("softmax_64x30000", "softmax", dict(rows=64, cols=30000), dict(rows=16, cols=30000),
         dict(rows=2, cols=1500), "softmax <64,30000> (the paper's Transformer shape)", irregular=True),
    Case("attention_softmax_196608x512", "softmax", dict(rows=196608, cols=512), dict(rows=12288, cols=512),
         dict(rows=8, cols=128), "BERT attention softmax [32,12,512,512] as 196608 rows x 512",
         notes="the scale and mask of attention_softmax are left out: plain softmax at the same shape"),
    Case("bias_gelu_16384x3072", "bias_gelu", dict(rows=16384, cols=3072), dict(rows=2048, cols=3072),
         dict(rows=8, cols=96), "bias + exact GELU, BERT-base FFN"),
    Case("layernorm_backward_16384x768", "layernorm_backward", dict(rows=16384, cols=768),
         dict(rows=2048, cols=768), dict(rows=16, cols=64), "LayerNorm backward (dx, dgamma, dbeta)"),
    Case("batchnorm_train_65536x64", "batchnorm_train", dict(rows=65536, cols=64), dict(rows=8192, cols=64),
         dict(rows=128, cols=16), "BatchNorm training forward, column reductions"),
    Case("adam_step_110M", "adam_step", dict(size=110_000_000), dict(size=8_000_000), dict(size=3000),
         "Adam step over BERT-base's 110M parameters",
         notes="7 f32 tensors of 110M: 3.1 GB of device memory, 3.1 GB minimum traffic per step"),
    Case("global_norm_1024x1024", "global_norm", dict(rows=1024, cols=1024), dict(rows=1024, cols=1024),
         dict(rows=32, cols=64), "clip by global norm, 1M-element gradient"),
    Case("cross_entropy_8192x32000", "cross_entropy", dict(rows=8192, cols=32000), dict(rows=512, cols=32000),
         dict(rows=4, cols=512), "softmax cross-entropy, LLaMA LM head 8192 x 32000",
         notes="one-hot labels as a dense f32 [8192,32000] input (2 GB of inputs)"),
    Case("paper_fig7", "paper_fig7", dict(n=128, c=256), dict(n=128, c=256), dict(n=16, c=32),
         "the paper's Figure 7 graph"),
]

BY_KEY = {c.key: c for c in SUITE}


def select(only: Optional[list] = None) -> list[Case]:
    """The suite, or the cases whose key or workload name is in ``only``."""
    if not only:
        return list(SUITE)
    wanted = set(only)
    unknown = wanted - {c.key for c in SUITE} - {c.workload for c in SUITE}
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; cases: {', '.join(BY_KEY)}")
    return [c for c in SUITE if c.key in wanted or c.workload in wanted]


def part(spec: str, only: Optional[list] = None) -> list[Case]:
    """``"K/N"``: the K-th (1-based) of N contiguous, nearly equal slices of :func:`select` (only)."""
    try:
        k, n = (int(v) for v in spec.split("/"))
        assert 1 <= k <= n
    except (ValueError, AssertionError):
        raise SystemExit(f"--part wants K/N with 1 <= K <= N, got {spec!r}") from None
    cases = select(only)
    lo, hi = (k - 1) * len(cases) // n, k * len(cases) // n
    return cases[lo:hi]


__all__ = ["Case", "SUITE", "BY_KEY", "select", "part", "graph_bytes", "graph_elements", "shape_label", "LARGE_BYTES"]
