"""What every strategy's options class shares: the names it knows, reading ``compile``'s keywords, and
what differs from the defaults (what ``plan.options`` records).

A strategy's options are a frozen dataclass that inherits :class:`OptionSet` and says how its
errors name it (``STRATEGY``) and what its options are for (``KIND``)::

    @dataclass(frozen=True)
    class MyOptions(OptionSet):
        STRATEGY: ClassVar[str] = "mine"
        KIND: ClassVar[str] = "search options"
        beam_width: int = 3
"""
from __future__ import annotations

from dataclasses import asdict, fields
from typing import ClassVar

from ...errors import AStitchError


class OptionSet:
    STRATEGY: ClassVar[str] = ""
    KIND: ClassVar[str] = "options"

    @classmethod
    def known(cls) -> list:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_kwargs(cls, options: dict):
        """Options from ``compile``'s keywords; an unknown name is an AStitchError naming the known ones."""
        unknown = [k for k in options if k not in cls.known()]
        if unknown:
            raise AStitchError(f"unknown {cls.STRATEGY} option(s) {', '.join(map(repr, unknown))}; the {cls.KIND} "
                               f"are: {', '.join(cls.known())}")
        return cls(**options)

    def changed(self) -> dict:
        """The options that differ from the defaults (tuples as lists, as JSON keeps them)."""
        default = type(self)()
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in asdict(self).items() if getattr(default, k) != v}
