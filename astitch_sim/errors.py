"""The one error type the package raises on bad input.

Every user-facing failure (malformed HLO, unsupported ops, shapes that do not
agree, plans that break a hardware rule, a grid barrier that would deadlock)
raises :class:`AStitchError`.  It subclasses ``ValueError`` so callers that
already catch bad values keep working, and its message always says what is
wrong *and* what to do about it.
"""


class AStitchError(ValueError):
    """Bad input to astitch-sim: the message names the problem and the fix."""
