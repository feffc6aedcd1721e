"""The hidden checks of the astitch-sim tutorials: instructor material, never handed to students.

Each notebook ``NN_*`` has a module ``grading/nbNN.py`` with one function per exercise.  A function takes
the student's answer(s), works out the right answer *from the model itself* (``astitch_sim``: the same
compiler and simulator the notebook uses, so a check cannot drift from what the notebook shows), and raises
:class:`checks.core.Wrong` -- an ``AssertionError`` -- whose message says what is wrong without giving the
answer away.

Students' ``grader.check("q1")`` runs only the public test (``checks.public``: is the answer there, and of
the right form?).  The notebook's hidden test calls the function here; ``otter assign`` puts it in the
autograder only (the masters' ``autograder_files: [grading]``), so grading -- ``build.py grade``, Gradescope,
``otter grade`` -- runs it and reports its hint.  Each check lists *plausible wrong answers*
(``@exercise(wrong=[...])``); CI feeds every one of them to the check and requires a rejection whose message
does not contain the right answer (``tutorials/build.py``).
"""
