"""The public checks of the astitch-sim tutorials: what students get beside the notebooks.

``checks.public`` checks the *form* of each exercise's answer (answered at all, a number, a whole number, a
list of node names, a Plan...) and nothing about its value: it holds no answer, so reading it gives none away.
``checks.core`` holds the pieces every check uses (``Wrong``, the helpers, the registry).  The checks that
know the answers are instructor material (``tutorials/instructor/grading/``), run by the autograder only.
"""
