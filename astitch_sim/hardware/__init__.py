"""GPUs: the presets and occupancy rules (gpus: V100, A100, H100, H200) and the measured timings kept in
benchmarks/results (measured).

May import: ``errors.py`` (of astitch_sim/) only.
"""
