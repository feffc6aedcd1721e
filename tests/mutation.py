"""A mutation check for the tests themselves: break ``simulate`` on purpose and see which tests notice.

A test that compares ``simulate``'s outputs with anything must fail when those outputs are wrong.  This
pytest plugin replaces ``astitch_sim.simulate`` (everywhere it is bound) by a wrapper that runs the real
model and then spoils what it returns:

* ``--mutate-simulate=empty``: no outputs at all (a comparison whose ``zip`` is not strict passes on that);
* ``--mutate-simulate=off10``: every value 10% off (floats times 1.1, a zero becomes 0.1; integers +1;
  bools flipped), counters untouched.

It records which tests *read* the spoiled outputs (iterated, indexed or measured the list, or an array in
it).  Such a test must fail; one that passes is a **survivor**, listed at the end, and the run's exit status
is 1 if there is any survivor, 0 if every test that read the outputs failed (their failures are the
point, so they are not the status).  Tests that never read the outputs (counters, plans, timelines) are
not judged, nor those marked ``wrong_values`` (they assert that a broken plan gives wrong values, which
spoiled outputs are too), nor, for ``off10``, runs whose outputs have no element.

    python -m pytest -p tests.mutation --mutate-simulate=off10 tests/simt/test_simt_executor.py -q
    python -m pytest -p tests.mutation --mutate-simulate=empty tests/planning/test_whatif.py -q

``tests/test_mutation.py`` runs it on a few suites, so the check itself is part of the test suite.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

_read = {"flag": False}
_judged: dict = {}          # nodeid -> "failed" | "survived"


class _Watched(list):
    """The outputs list: any look at it or its elements marks the running test as a reader."""

    def _seen(self):
        _read["flag"] = True

    def __iter__(self):
        self._seen()
        return super().__iter__()

    def __getitem__(self, i):
        self._seen()
        return super().__getitem__(i)

    def __len__(self):
        self._seen()
        return super().__len__()


def _off10(a):
    a = np.asarray(a)
    if a.dtype == bool:
        return ~a
    if a.dtype.kind in "iu":
        return a + np.ones((), a.dtype)
    if a.dtype.kind in "fc":
        return np.where(a == 0, a.dtype.type(0.1), a * a.dtype.type(1.1)).astype(a.dtype)
    return a


MUTANTS = {"empty": lambda outs: [], "off10": lambda outs: [_off10(o) for o in outs]}


def pytest_addoption(parser):
    parser.addoption("--mutate-simulate", choices=sorted(MUTANTS), default=None,
                     help="spoil simulate's outputs and report the tests that read them and still pass")


def pytest_configure(config):
    mode = config.getoption("--mutate-simulate")
    if mode is None:
        return
    import astitch_sim
    from astitch_sim.simt import executor
    real = executor.simulate
    spoil = MUTANTS[mode]

    def simulate(*args, **kwargs):
        res = real(*args, **kwargs)
        if mode == "off10" and not any(np.size(o) for o in res.outputs):
            return res                              # nothing to spoil (empty outputs): not a reader's test
        res.outputs = _Watched(spoil(res.outputs))
        return res

    simulate.__doc__ = real.__doc__
    for mod in list(sys.modules.values()):           # every module that bound the name already
        if mod is not None and getattr(mod, "simulate", None) is real and (mod.__name__ or "").startswith(
                ("astitch_sim", "gpu_backend", "benchmarks", "app")):
            mod.simulate = simulate
    assert astitch_sim.simulate is simulate
    config._mutation_mode = mode


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _read["flag"] = False
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if getattr(item.config, "_mutation_mode", None) is None or rep.when != "call":
        return
    if _read["flag"] and item.get_closest_marker("wrong_values") is None:
        _judged[item.nodeid] = "survived" if rep.passed else "failed"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    mode = getattr(config, "_mutation_mode", None)
    if mode is None:
        return
    survivors = [n for n, v in _judged.items() if v == "survived"]
    tr = terminalreporter
    tr.section(f"mutation check: simulate {mode}")
    tr.write_line(f"{len(_judged)} tests read the spoiled outputs; {len(_judged) - len(survivors)} failed, "
                  f"{len(survivors)} survived")
    for n in survivors:
        tr.write_line(f"  SURVIVED {n}")


def pytest_sessionfinish(session, exitstatus):
    if getattr(session.config, "_mutation_mode", None) is None:
        return
    survivors = [n for n, v in _judged.items() if v == "survived"]
    session.exitstatus = 1 if survivors or not _judged else 0
