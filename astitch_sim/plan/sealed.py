"""Built, then sealed: how the Plan's objects become immutable once a planner has made them.

A planner builds a Plan step by step: the kernel builder places a value in
registers, finds a later stage reads it from another block, moves it to global
memory and records why.  Writing that as a chain of brand-new frozen objects
would hide the reasoning, so building stays plain assignment.  Once the plan is
made (``compile`` returns it, ``Plan.from_json`` reads it) it is **sealed**:
every reader -- the SIMT model, the Numba backend, the explorer -- gets the same
facts, and none of them can change a decision behind the others' backs.

After :meth:`Sealable.seal`:

* assigning a field raises AStitchError, saying how to make a changed copy
  (``Plan.with_stage``, ``with_kernel``, ``with_value``, ``with_notes``, or
  ``dataclasses.replace``, which builds a new, unsealed object);
* the field's lists and dicts are :class:`ReadOnlyList` / :class:`ReadOnlyDict`:
  still a ``list`` and a ``dict`` (``==`` a plain one, JSON writes them), but
  ``append``, ``k.values[n] = ...`` and the like raise.

Fields typed by the vocabulary (``WORDS``: a Value's space and scheme, a
stage's barrier, a mapping's combine mode) are parsed on every assignment,
sealed or not, so a word outside the vocabulary never gets into a plan.
"""
from __future__ import annotations

from dataclasses import fields
from typing import ClassVar

from ..errors import AStitchError


def _refuse(what: str):
    raise AStitchError(f"a built plan is immutable: cannot {what}. Make a changed copy instead "
                       "(plan.with_stage / with_kernel / with_value / with_notes, or dataclasses.replace)")


class ReadOnlyList(list):
    """A list that refuses changes (it still equals a plain list and is written by JSON as one)."""

    def _no(self, *args, **kwargs):
        _refuse("change a list of a plan")

    append = extend = insert = remove = pop = clear = sort = reverse = _no
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _no

    def __reduce__(self):                   # copy/deepcopy/pickle rebuild it whole (never item by item)
        return type(self), (list(self),)


class ReadOnlyDict(dict):
    """A dict that refuses changes (it still equals a plain dict and is written by JSON as one)."""

    def _no(self, *args, **kwargs):
        _refuse("change a dict of a plan")

    __setitem__ = __delitem__ = __ior__ = _no
    update = pop = popitem = clear = setdefault = _no

    def __reduce__(self):
        return type(self), (dict(self),)


def read_only(value):
    """``value`` with its lists and dicts made read-only, all the way down (sealable objects sealed)."""
    if isinstance(value, Sealable):
        return value.seal()
    if isinstance(value, list):
        return value if isinstance(value, ReadOnlyList) else ReadOnlyList(read_only(v) for v in value)
    if isinstance(value, dict):
        return value if isinstance(value, ReadOnlyDict) else ReadOnlyDict((k, read_only(v)) for k, v in value.items())
    if isinstance(value, tuple):
        return tuple(read_only(v) for v in value)
    return value


def plain(value):
    """``value`` with read-only lists and dicts turned back into plain ones, all the way down (for to_dict:
    whoever receives a plan's dict may edit it)."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value


def once_sealed(fn):
    """A read-only property worked out once on a sealed object -- its fields can no longer change, so neither
    can what follows from them -- and afresh on every read while a planner still builds it.  (The SIMT model
    asks a stage's mapping for its extents, chunk and slots thousands of times a simulation.)"""
    key = "_once_" + fn.__name__

    def get(self):
        if not self._sealed:
            return fn(self)
        memo = self.__dict__
        if key not in memo:
            memo[key] = fn(self)            # (the instance dict itself: sealing refuses attribute assignment)
        return memo[key]
    get.__doc__ = fn.__doc__
    return property(get)


class Sealable:
    """Base of the Plan's dataclasses: vocabulary fields parsed on assignment; no assignment once sealed."""

    #: field name -> the vocabulary type (astitch_sim.plan.vocabulary) its value must be a word of
    WORDS: ClassVar[dict] = {}
    _sealed: ClassVar[bool] = False     # set on the instance by seal()

    def __setattr__(self, name, value):     # runs for every field a planner sets: kept lean
        if self._sealed:
            _refuse(f"set {type(self).__name__}.{name}")
        word = self.WORDS.get(name)
        if word is not None and value.__class__ is not word:
            value = word.parse(value, name)
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        _refuse(f"delete {type(self).__name__}.{name}")

    @property
    def sealed(self) -> bool:
        """Whether the object is built and read-only."""
        return self._sealed

    def seal(self):
        """Make this object and everything it holds read-only (idempotent); returns it."""
        if not self.sealed:
            for f in fields(self):
                object.__setattr__(self, f.name, read_only(getattr(self, f.name)))
            object.__setattr__(self, "_sealed", True)
        return self
