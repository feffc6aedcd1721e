"""The Plan's vocabulary: memory spaces, stitch schemes, barriers and combine modes, as typed words.

Each word is a string-valued enum member: ``Space.SHARED == "shared"``, it
prints as ``shared``, and JSON writes it as ``"shared"``, so plan files and
printouts read exactly as before.  What the type adds:

* **A closed set.**  A plan field holding a word accepts only its words:
  assigning ``barrier_after="maybe"`` raises an AStitchError that lists the
  words there are, when the plan is built or read from JSON, not later.
* **An order.**  Members order by declaration, which is the order that means
  something: a space nearer the thread first, a weaker barrier first.  So the
  barrier a stage needs before its readers is ``max`` of what each reader needs
  (``max(Barrier.BLOCK, Barrier.GRID) is Barrier.GRID``), with no rank dict
  written by hand.

======================  ==========================================================
``Space``               register < shared < global: where a value lives
``Scheme``              independent < local < regional < global: how a value
                        reaches its consumers (the paper's four stitch schemes)
``Barrier``             none < block < grid: what separates a stage from the next
``Combine``             none < atomic < grid_barrier: how the blocks of a split
                        reduction meet (``ThreadMapping.combine``)
``ReduceScheme``        none < shuffle < tree: how the threads of a reduction task
                        combine their partials (``Stage.reduce_scheme``,
                        ``astitch_sim/plan/reduce_scheme.py``)
======================  ==========================================================
"""
from __future__ import annotations

from enum import Enum

from ..errors import AStitchError


class Word(str, Enum):
    """A string-valued enum member ordered by declaration (the base of every word type below)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def parse(cls, text, field: str = "") -> "Word":
        """``text`` (a member, or its string) as a member; an AStitchError naming the field and the words otherwise."""
        if isinstance(text, cls):
            return text
        try:
            return cls(text)
        except (ValueError, TypeError):
            where = f" (in {field}={text!r})" if field else ""
            raise AStitchError(f"unknown {cls.noun()} {text!r}{where}; use one of {', '.join(cls.words())}") from None

    @classmethod
    def noun(cls) -> str:
        """What one word of the type is called in an error message ("space", "barrier", ...)."""
        raise NotImplementedError

    @classmethod
    def words(cls) -> tuple:
        """The words of the type, in order, as plain strings."""
        return tuple(m.value for m in cls)

    @property
    def rank(self) -> int:
        """The member's position in declaration order (0 for the first)."""
        return list(type(self)).index(self)

    def _rank_of(self, other):
        if isinstance(other, type(self)):
            return other.rank
        if isinstance(other, str) and other in type(self).words():
            return type(self)(other).rank
        return None

    def __lt__(self, other):
        r = self._rank_of(other)
        return NotImplemented if r is None else self.rank < r

    def __le__(self, other):
        r = self._rank_of(other)
        return NotImplemented if r is None else self.rank <= r

    def __gt__(self, other):
        r = self._rank_of(other)
        return NotImplemented if r is None else self.rank > r

    def __ge__(self, other):
        r = self._rank_of(other)
        return NotImplemented if r is None else self.rank >= r

    __hash__ = str.__hash__     # hash as the string, so "grid" and Barrier.GRID find the same dict entry


class Space(Word):
    """Where a value lives inside a kernel, nearest the thread first."""
    REGISTER = "register"
    SHARED = "shared"
    GLOBAL = "global"

    @classmethod
    def noun(cls) -> str:
        return "space"


class Scheme(Word):
    """How a value reaches its consumers: the paper's four stitch schemes, cheapest first."""
    INDEPENDENT = "independent"
    LOCAL = "local"
    REGIONAL = "regional"
    GLOBAL = "global"

    @classmethod
    def noun(cls) -> str:
        return "stitch scheme"


class Barrier(Word):
    """What separates a stage from the next, weakest first."""
    NONE = "none"
    BLOCK = "block"
    GRID = "grid"

    @classmethod
    def noun(cls) -> str:
        return "barrier"


class Combine(Word):
    """How the blocks of a reduction task split over several blocks meet."""
    NONE = "none"
    ATOMIC = "atomic"
    GRID_BARRIER = "grid_barrier"

    @classmethod
    def noun(cls) -> str:
        return "combine mode"


class ReduceScheme(Word):
    """How the threads of one reduction task combine their partials inside a block (``reduce_scheme.py``)."""
    NONE = "none"               # one thread per task (or no reduce): its partial is the total
    SHUFFLE = "shuffle"         # warp shuffles (shfl_xor) within a warp, one shared-memory step across warps
    TREE = "tree"               # the paper's shared-memory tree: a block barrier per fold

    @classmethod
    def noun(cls) -> str:
        return "reduction scheme"


#: the barrier a reader in another stage needs to see a value in each space
BARRIER_FOR_SPACE = {Space.REGISTER: Barrier.NONE, Space.SHARED: Barrier.BLOCK, Space.GLOBAL: Barrier.GRID}
