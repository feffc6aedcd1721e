"""Checks for 01_why_memory_bound."""
from __future__ import annotations

from functools import lru_cache

import astitch_sim as asim

from checks.core import Derived, Wrong, close, direction, exercise, number

V100 = asim.gpu("V100")


def _min_bytes(g) -> int:
    return sum(p.nbytes for p in g.inputs) + sum(o.nbytes for o in g.outputs)


@lru_cache(maxsize=None)
def _layernorm(rows: int = 16384):
    """flops and traffic of the xla layernorm plan at the notebook's shape: the traffic ratio depends on the
    row count a little (vector reads of the broadcast statistics: 2.38 at 2048 rows, 2.19 at 16384)."""
    g = asim.workload("layernorm", rows=rows, cols=768)
    r = asim.simulate(asim.compile(g, "xla", "V100"), asim.random_inputs(g))
    return r.stats.flops, r.stats.global_bytes, _min_bytes(g), sum(p.nbytes for p in g.inputs)


@exercise(wrong=[1 / 17.44, 15.7, 900.0, 67_000 / 3350])
def q1_ridge(ridge):
    got = number(ridge, "ridge")
    datasheet = V100.fp32_gflops / V100.dram_bandwidth_gbs
    measured = V100.fp32_gflops / V100.measured_bandwidth_gbs
    if close(got, datasheet) or close(got, measured):
        return
    if close(got, 1 / datasheet, 0.05) or close(got, 1 / measured, 0.05):
        raise Wrong("that is byte per flop: the ridge point is flop per byte (flops over bytes)")
    if close(got, V100.fp32_gflops / 1000, 0.01) or close(got, V100.fp32_gflops, 0.01) or \
            close(got, V100.dram_bandwidth_gbs, 0.01):
        raise Wrong("that is one of the two numbers, not their ratio")
    h100 = asim.gpu("H100")
    if close(got, h100.fp32_gflops / h100.dram_bandwidth_gbs, 0.01):
        raise Wrong("that is the H100's ridge point: use the V100 preset, asim.gpu('V100')")
    raise Wrong(f"ridge point {direction(got, datasheet)}: divide GFLOP/s by GB/s (the 1e9 factors cancel)")


@exercise(wrong=[Derived(lambda env: env["results"]["xla"].stats.flops / env["results"]["xla"].stats.global_bytes,
                         "flops over the plan's traffic"),
                 Derived(lambda env: env["min_bytes"] / env["results"]["xla"].stats.flops, "inverted"),
                 Derived(lambda env: env["results"]["xla"].stats.flops / sum(p.nbytes for p in env["g"].inputs),
                         "inputs only"),
                 20.0])
def q2_intensity(intensity):
    got = number(intensity, "intensity")
    flops, traffic, minimum, inputs = _layernorm()
    truth = flops / minimum
    if close(got, truth, 0.03):
        return
    if close(got, flops / traffic, 0.03):
        raise Wrong("you divided by the bytes the xla plan actually moves; the question asks for the "
                    "minimum traffic (every input read once, every output written once)")
    if close(got, minimum / flops, 0.03):
        raise Wrong("that is byte per flop; arithmetic intensity is flop per byte")
    if close(got, flops / inputs, 0.03):
        raise Wrong("the minimum traffic counts the output written too, not only the inputs read")
    if got > V100.fp32_gflops / V100.dram_bandwidth_gbs:
        raise Wrong("that would put the layernorm right of the V100's ridge point (compute-bound); "
                    "check the units: flops (not Mflops) over bytes (not MiB)")
    raise Wrong(f"intensity {direction(got, truth)}: flops of the xla plan over min_bytes")


@exercise(wrong=[110.0, 11, 5.0, 25.0])
def q3_launch_us(launch_us):
    got = number(launch_us, "launch_us")
    plan = asim.compile(asim.workload("layernorm", rows=64, cols=768), "unfused", "V100")
    truth = len(plan.kernels) * V100.kernel_launch_us
    if close(got, truth, 0.001):
        return
    if close(got, len(plan.kernels) * 10.0, 0.001):
        raise Wrong("10 us is the paper's per-kernel cost in TensorFlow; use the simulator's preset "
                    "(v100.kernel_launch_us)")
    if close(got, len(plan.kernels), 0.001):
        raise Wrong("that is the number of kernels; the question asks for microseconds")
    if close(got, V100.kernel_launch_us, 0.001):
        raise Wrong("that is one launch; the unfused plan launches one kernel per op")
    xla = asim.compile(asim.workload("layernorm", rows=64, cols=768), "xla", "V100")
    if close(got, len(xla.kernels) * V100.kernel_launch_us, 0.001):
        raise Wrong("that is the xla plan's launch overhead; the question is about the unfused plan")
    raise Wrong(f"launch overhead {direction(got, truth)}: kernels of the unfused plan x cost per launch")


@exercise(wrong=[1.0, Derived(lambda env: env["results"]["unfused"].stats.global_bytes / env["min_bytes"],
                              "unfused"),
                 Derived(lambda env: env["results"]["xla"].stats.global_bytes_read / env["min_bytes"], "reads only"),
                 Derived(lambda env: env["min_bytes"] / env["results"]["xla"].stats.global_bytes, "inverted")])
def q4_traffic_ratio(traffic_ratio):
    got = number(traffic_ratio, "traffic_ratio")
    flops, traffic, minimum, inputs = _layernorm()
    truth = traffic / minimum
    if close(got, truth, 0.03):
        return
    if close(got, 1.0, 0.02):
        raise Wrong("a ratio of 1 would mean XLA moves only the minimum: look at how often x is read in "
                    "print(plans['xla'])")
    if close(got, 1 / truth, 0.03):
        raise Wrong("inverted: the plan's bytes over the minimum, so the answer is above 1")
    g = asim.workload("layernorm", rows=16384, cols=768)
    r = asim.simulate(asim.compile(g, "unfused", "V100"), asim.random_inputs(g))
    if close(got, r.stats.global_bytes / minimum, 0.03):
        raise Wrong("that is the unfused plan's ratio; the question asks about the xla plan")
    raise Wrong(f"ratio {direction(got, truth)}: count reads and writes (stats.global_bytes)")
