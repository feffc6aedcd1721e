"""The pieces every check uses: the exception, the registry, number and name helpers.

Public: students get this module (it holds no answer).  The checks that know the answers are the
instructor's (``tutorials/instructor/grading/nbNN.py``, shipped in the autograder only); they register
themselves here with :func:`exercise`."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

#: module name (nb01...) -> {exercise name: Exercise}
REGISTRY: dict = {}


class Wrong(AssertionError):
    """A wrong answer; the message is the hint shown to the student."""


@dataclass
class Derived:
    """A wrong answer computed from the notebook's variables (``env``) when CI tests the check."""
    make: Callable
    label: str = ""

    def __call__(self, env: dict):
        return self.make(env)

    def __repr__(self) -> str:
        return f"Derived({self.label or self.make.__name__})"


@dataclass
class Exercise:
    module: str
    name: str
    check: Callable
    wrong: list = field(default_factory=list)     # each: {param: value | Derived}

    def wrong_arguments(self, env: dict) -> list:
        """The wrong examples as keyword arguments, completed from ``env`` (the right answers)."""
        import inspect
        params = list(inspect.signature(self.check).parameters)
        out = []
        for w in self.wrong:
            if not isinstance(w, dict):
                if len(params) != 1:
                    raise TypeError(f"{self.module}.{self.name}: a bare wrong example needs a one-argument check")
                w = {params[0]: w}
            args = {p: env.get(p) for p in params}
            args.update({k: (v(env) if isinstance(v, Derived) else v) for k, v in w.items()})
            out.append(args)
        return out


def exercise(wrong: list):
    """Register a check with its plausible wrong answers (CI proves each is rejected)."""
    def wrap(fn):
        module = fn.__module__.rsplit(".", 1)[-1]
        REGISTRY.setdefault(module, {})[fn.__name__] = Exercise(module, fn.__name__, fn, list(wrong))
        return fn
    return wrap


def exercises(module: str) -> dict:
    """``{name: Exercise}`` of one notebook's hidden check module ``grading.nbNN`` (imports it)."""
    import importlib
    importlib.import_module(f"grading.{module}")
    return REGISTRY.get(module, {})


# -- answer helpers ----------------------------------------------------------------------

def answered(value, what: str) -> None:
    """Refuse the placeholder ``...`` and ``None``: the cell has not been answered yet."""
    if value is ... or value is None:
        raise Wrong(f"{what} is not answered yet: replace the ... with your answer and run the cell")


def number(value, what: str) -> float:
    """``value`` as a float, or Wrong if it is not a finite real number."""
    answered(value, what)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        try:
            import numpy as np
            if isinstance(value, np.ndarray) and value.size == 1:
                value = value.item()
            else:
                raise TypeError
        except (ImportError, TypeError):
            raise Wrong(f"{what} should be a number, got {type(value).__name__} {value!r}") from None
    value = float(value)
    if not math.isfinite(value):
        raise Wrong(f"{what} should be a finite number, got {value}")
    return value


def integer(value, what: str) -> int:
    v = number(value, what)
    if v != int(v):
        raise Wrong(f"{what} counts something: it should be a whole number, got {v}")
    return int(v)


def close(a: float, b: float, rel: float = 0.02) -> bool:
    return abs(a - b) <= rel * max(abs(b), 1e-30)


def direction(got: float, truth: float) -> str:
    """'too high' / 'too low', with a rough size, never the value itself."""
    ratio = got / truth if truth else float("inf")
    size = ("far " if ratio > 3 or ratio < 1 / 3 else "")
    return f"{size}too {'high' if got > truth else 'low'}"


def names(value, what: str) -> list:
    """A list of node names (strings), from a list, tuple or set of strings."""
    answered(value, what)
    if isinstance(value, str):
        raise Wrong(f"{what} should be a list of node names like ['a', 'b'], not one string")
    try:
        items = list(value)
    except TypeError:
        raise Wrong(f"{what} should be a list of node names, got {type(value).__name__}") from None
    bad = [x for x in items if not isinstance(x, str)]
    if bad:
        raise Wrong(f"{what} should hold node names (strings); {bad[0]!r} is a {type(bad[0]).__name__}")
    return items


def word(value, what: str, choices, where: str) -> str:
    """One of ``choices`` (case-insensitive).  The hint says ``where`` the valid names are, without
    listing them (a list of every choice would contain the answer)."""
    answered(value, what)
    if not isinstance(value, str):
        raise Wrong(f"{what} should be a string: one of {where}")
    w = value.strip()
    lower = {c.lower(): c for c in choices}
    if w.lower() not in lower:
        raise Wrong(f"{what}: {value!r} is not one of {where}")
    return lower[w.lower()]
