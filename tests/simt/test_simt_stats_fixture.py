"""The SIMT model's results do not move: every counter, the predicted time, the timeline and the
outputs (exact where exact: dtypes, shapes, integers, non-finite positions; float values within
``simt_fingerprint.RTOL``, so the fixture holds on CPUs without AVX2) of ``simulate`` on the catalog (test sizes, and bigger shapes and every
model fixture in the slow set) equal
what ``tests/make_simt_stats.py`` recorded from the model before its speed work (issue 14).

A deliberate change to what the model counts regenerates the fixture and says why in its commit."""
import json
from pathlib import Path

import pytest

from simt_fingerprint import cases, fingerprint, output_diffs, run_case
from anchor import TESTS_FILE

FIXTURE = json.loads((Path(TESTS_FILE).parent / "fixtures" / "simt_stats.json").read_text())


def _params():
    out = []
    for cid, name, shape, strategy, slow in cases(big=True):
        marks = [pytest.mark.slow] if slow else []
        out.append(pytest.param(name, shape, strategy, id=cid, marks=marks))
    return out


def test_fixture_covers_every_case():
    assert sorted(FIXTURE) == sorted(c[0] for c in cases(big=True))


def _diff(want, got, path=""):
    """First few places two JSON trees differ (a readable failure, not a 500-line dict dump)."""
    if path.endswith(".outputs") and isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(want)} outputs recorded, {len(got)} now"]
        return [d for i, (a, b) in enumerate(zip(want, got, strict=True)) for d in output_diffs(a, b, f"{path}[{i}]")]
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}: keys {sorted(set(want) ^ set(got))}"] if set(want) != set(got) else []
        for k in want:
            if k in got:
                out += _diff(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: length {len(want)} != {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got, strict=True)) for d in _diff(a, b, f"{path}[{i}]")]
    return [] if want == got else [f"{path}: recorded {want!r}, now {got!r}"]


@pytest.mark.parametrize("name,shape,strategy", _params())
def test_simulate_reproduces_recorded_stats(name, shape, strategy):
    from simt_fingerprint import case_id
    want = FIXTURE[case_id(name, shape, strategy)]
    got = json.loads(json.dumps(fingerprint(run_case(name, shape, strategy)), sort_keys=True))
    diffs = _diff(want, got)
    assert not diffs, "\n".join(diffs[:20])
