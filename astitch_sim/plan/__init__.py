"""The Plan: the contract between the planners and its readers.

``Plan``/``Kernel``/``Stage``/``Value`` (plan), its typed vocabulary (vocabulary), thread mappings (mapping),
the reduction-scheme, vector-width and index-width records and their arithmetic (reduce_scheme, vector_width,
index_bits), library-kernel facts (boundary), what ptxas made of a kernel (machine), validation (validate),
sealing (sealed), JSON (serialize), ``print(plan)`` (plan_print, search_record) and the prefixes of the
planners' notes (notes).  Readers import these to *follow* a plan: what a reader needs to know is here.

May import (of astitch_sim/): ``ir/``, ``passes/`` (the validator re-checks the analysis), ``hardware/`` and
``errors.py`` -- never a planner, never a reader.
"""
