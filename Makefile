# The checks a contributor runs before pushing (README, "Testing"): `make check` = ruff, mypy on the public
# API (pyproject's [tool.mypy]) and the fast tier.
PYTHON ?= python
# two pytest-xdist workers per machine by default (-n auto: one per core); each test file runs on one worker
# (--dist loadfile), so the module-scoped fixtures (the ptxas matrix, the staged tutorials) are built once
XDIST ?= -n auto --dist loadfile

.PHONY: check lint typecheck test-fast test mutation

check: lint typecheck test-fast

lint:
	$(PYTHON) -m ruff check .

typecheck:
	$(PYTHON) -m mypy

test-fast:
	$(PYTHON) -m pytest -q -m "not slow" $(XDIST)

test:
	$(PYTHON) -m pytest -q $(XDIST)

# break simulate on purpose (no outputs; values 10% off): every test that reads its outputs must fail
mutation:
	$(PYTHON) -m pytest -q -p tests.mutation --mutate-simulate=empty tests/simt/test_simt_executor.py tests/cli/test_cli_simulate.py -m "not slow"
	$(PYTHON) -m pytest -q -p tests.mutation --mutate-simulate=off10 tests/simt/test_simt_executor.py tests/cli/test_cli_simulate.py -m "not slow"
