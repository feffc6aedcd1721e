"""Front ends: where Graphs come from.

XLA HLO text (hlo), StableHLO/MHLO MLIR text (stablehlo*, mlir_text; ``from_text.from_hlo`` reads either), the
export back to StableHLO (to_stablehlo), PyTorch programs (torch_import/), the workload catalog (workloads),
seeded random specs (seeded), and the refusals and region probes the importers share (refusals, regions).

May import: ``ir/`` and ``errors.py`` (of astitch_sim/).  Nothing downstream knows where a Graph came from.
"""
