"""torch.export with the project's decompositions, and torch's refusals turned into AStitchErrors.

``torch.export.export`` traces a module's forward once, for the example arguments, into an ATen graph
(``ExportedProgram``): Python control flow on shapes is unrolled; control flow on *values* (``if
x.sum() > 0``) cannot be traced and torch.export refuses, saying why.  That reason is kept in the
AStitchError, with the fix the importer can suggest.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager

from ...errors import AStitchError


def require_torch():
    """The torch module, or an AStitchError saying how to install it (torch is an optional dependency)."""
    try:
        import torch
    except ImportError:
        raise AStitchError("asim.from_torch needs PyTorch, which is not installed: pip install 'astitch-sim[torch]' "
                           "(or pip install torch)") from None
    return torch


def as_module(torch, fn):
    """A module to export: ``fn`` itself, or a module whose forward is the function ``fn``."""
    if isinstance(fn, torch.nn.Module):
        return fn
    if not callable(fn):
        raise AStitchError(f"asim.from_torch takes a torch.nn.Module or a function, got {type(fn).__name__}")

    class Function(torch.nn.Module):
        forward = staticmethod(fn)      # fn itself: torch.export names inputs after its arguments and
                                        # records its source lines (a wrapper's would hide them)

    Function.__name__ = getattr(fn, "__name__", "function")
    return Function()


_HINTS = (
    (("data-dependent", "data dependent", "GuardOnDataDependentSymNode", "unbacked"),
     ("the model branches or loops on a tensor's value (or makes a shape from one): compute both branches and "
      "select with torch.where, or move the loop out of the model")),
    (("not supported", "Unsupported"), "rewrite the unsupported Python construct named above"),
)


@contextmanager
def _quiet_torch():
    """Silence torch's own deprecation notice about its pytree internals (``LeafSpec``), which torch.export
    triggers in torch 2.13 and nothing in the user's model can change."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
        yield


def export(module, args, kwargs):
    """``torch.export.export(module, args, kwargs)``; a refusal becomes an AStitchError carrying torch's reason."""
    torch = require_torch()
    if not isinstance(args, tuple):
        args = tuple(args)
    try:
        with _quiet_torch():
            return torch.export.export(module, args, kwargs or {})
    except Exception as e:  # noqa: BLE001 -- torch raises many types here (UserError, Unsupported, GuardOn...)
        reason = f"{type(e).__name__}: {str(e).strip()}"
        hint = next((h for keys, h in _HINTS if any(k in reason for k in keys)), "see torch's reason above")
        short = reason if len(reason) < 1500 else reason[:1500] + " ..."
        raise AStitchError(f"torch.export could not export {type(module).__name__}: {short}\nfix: {hint}") from None


def decompose(program):
    """``run_decompositions`` with :func:`~.decompositions.decomposition_table`."""
    from .decompositions import decomposition_table
    try:
        with _quiet_torch():
            return program.run_decompositions(decomposition_table())
    except Exception as e:  # noqa: BLE001 -- whatever a decomposition raises, say where it came from
        raise AStitchError(f"torch.export could not decompose the graph: {type(e).__name__}: {e}") from None
