"""Options of the ``xla`` strategy: which XLA version's GPU fusion rules it follows.

The default is the last rule-based GPU fusion of OpenXLA (``xla_rules.DEFAULT_RULES``); the
paper-era rules are a what-if setting::

    asim.compile(g, strategy="xla", gpu="V100", fusion_rules="tf-2.6")

``strategies/xla_rules.py`` says what each rule set is and which XLA source states it.  The plan
records a changed setting in ``plan.options`` (``print(plan)`` shows it as ``what-if:``, the JSON
keeps it) and names the rules it followed in its notes.  Other strategies that borrow XLA's kernels
(fusionstitching's starting point, astitch's never-behind fallback) use the default rules.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...errors import AStitchError
from .option_set import OptionSet
from .xla_rules import DEFAULT_RULES, RULES


@dataclass(frozen=True)
class XlaOptions(OptionSet):
    """Which XLA the ``xla`` strategy is."""

    STRATEGY: ClassVar[str] = "xla"
    KIND: ClassVar[str] = "what-if options"

    fusion_rules: str = DEFAULT_RULES

    #: the rule sets ``fusion_rules`` takes, the default first, each with its one-line title (for menus)
    CHOICES: ClassVar[dict] = {DEFAULT_RULES: RULES[DEFAULT_RULES].title,
                               **{n: r.title for n, r in RULES.items() if n != DEFAULT_RULES}}

    HELP: ClassVar[dict] = {
        "fusion_rules": "which XLA version's GPU fusion rules decide what is expensive: "
                        + "; ".join(f"'{r.name}': {r.title}" for r in RULES.values())
                        + ". An expensive op read by a broadcast ends its kernel; a cheap one is recomputed "
                          "per element of the broadcast",
    }

    def __post_init__(self):
        if self.fusion_rules not in RULES:
            raise AStitchError(f"xla option fusion_rules must be one of {', '.join(map(repr, RULES))} (XLA versions, "
                               f"strategies/xla_rules.py), got {self.fusion_rules!r}")

    @property
    def rules(self):
        return RULES[self.fusion_rules]
