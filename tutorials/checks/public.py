"""The public checks: what a student's ``grader.check("q1")`` runs.

Each exercise's answer variables and the *form* each must have (one table).  A form check refuses a
placeholder (``...``), a wrong type (a string for a number, one string for a list of names, a Plan for a
Graph) and says how to fix it; it never looks at the value, so this module holds no answer and a passing
public check says only "ready to be graded".  The autograder's hidden checks (instructor material) grade the
value.
"""
from __future__ import annotations

from .core import Wrong, answered, integer, names, number


def text(value, what: str) -> str:
    answered(value, what)
    if not isinstance(value, str):
        raise Wrong(f"{what} should be a string (a name), got {type(value).__name__}")
    return value


def mapping(value, what: str) -> dict:
    answered(value, what)
    if not isinstance(value, dict):
        raise Wrong(f"{what} should be a dict {{node name: scheme}}, got {type(value).__name__}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise Wrong(f"{what} should map node names (strings) to scheme names (strings)")
    return value


def function(value, what: str):
    answered(value, what)
    if not callable(value):
        raise Wrong(f"{what} should be a function (def {what}(...): ...)")
    return value


def graph(value, what: str):
    import astitch_sim as asim
    answered(value, what)
    if isinstance(value, asim.Plan):
        raise Wrong(f"{what} should be the Graph itself, not a compiled plan")
    if not isinstance(value, asim.Graph):
        raise Wrong(f"{what} should be a Graph (built with asim.Graph's builder methods), got {type(value).__name__}")
    return value


def plan(value, what: str):
    import astitch_sim as asim
    answered(value, what)
    if not isinstance(value, asim.Plan):
        raise Wrong(f"{what} should be a Plan (what asim.compile returns), got {type(value).__name__}")
    return value

#: question -> {answer variable: its form}; every question of every notebook (tests/tutorials/test_tutorials.py
#: checks the table against the notebooks)
FORMS = {
    "q1_ridge": {"ridge": number}, "q2_intensity": {"intensity": number}, "q3_launch_us": {"launch_us": number},
    "q4_traffic_ratio": {"traffic_ratio": number},
    "q1_my_graph": {"my_graph": graph}, "q2_xla_ends": {"xla_ends": names},
    "q3_power_evaluations": {"power_evaluations": integer}, "q4_flop_ratio": {"flop_ratio": number},
    "q1_mean_writer": {"mean_writer": integer}, "q2_x_loads": {"x_loads": integer},
    "q3_schemes": {"schemes": mapping}, "q4_global_values": {"global_values": names},
    "q1_tiny_blocks": {"tiny_per_wave": integer, "tiny_occupancy": number},
    "q2_wave_fill": {"xla_fill": number, "astitch_fill": number}, "q3_choose_splits": {"choose_splits": function},
    "q4_waves": {"dien_waves": integer},
    "q1_max_grid": {"max_grid": integer}, "q2_relaxed_registers": {"relaxed_registers": integer},
    "q3_fixed_plan": {"fixed_plan": plan}, "q4_races": {"race_node": text, "race_count": integer},
    "q1_syncthreads": {"syncthreads": integer}, "q2_xla_kernels": {"xla_kernels": integer},
    "q3_measurements": {"n_measurements": integer},
    "q1_best_cluster": {"best_cluster": text}, "q2_best_model": {"best_model": text},
    "q3_my_subgraph": {"my_subgraph": graph},
    "q1_dominants": {"find_dominants": function, "merge_dominants": function},
    "q2_schemes": {"is_block_local": function, "choose_scheme": function},
    "q3_packing": {"packed_owner": function}, "q4_shuffle": {"warp_row_sum": function},
}


def check(question: str, **answers) -> None:
    """Raise :class:`Wrong` if an answer of ``question`` is missing or of the wrong form."""
    forms = FORMS.get(question)
    if forms is None:
        raise Wrong(f"no public check for {question!r}: the questions are {sorted(FORMS)}")
    if set(answers) != set(forms):
        raise Wrong(f"{question} takes the answers {sorted(forms)}, got {sorted(answers)}")
    for name, form in forms.items():
        form(answers[name], name)
