"""Checks for the exercises of the astitch-sim tutorials.

Each notebook ``NN_*.ipynb`` has a module ``checks/nbNN.py`` with one function
per exercise.  A function takes the student's answer(s), works out the right
answer *from the model itself* (``astitch_sim``: the same compiler and
simulator the notebook uses, so a check cannot drift from what the notebook
shows), and raises :class:`~checks.core.Wrong` -- an ``AssertionError`` --
whose message says what is wrong without giving the answer away.

Students never call these directly: otter-grader's ``grader.check("q1")`` runs
the notebook's test file, and the test file calls the check (see
``tutorials/README.md``).  Each check also lists *plausible wrong answers*
(``@exercise(wrong=[...])``); CI feeds every one of them to the check and
requires a rejection whose message does not contain the right answer.
"""
