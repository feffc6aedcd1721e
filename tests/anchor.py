"""A file directly in tests/, for the test files in tests/<area>/ to find their way from.

``Path(TESTS_FILE).parent`` is tests/ (and its fixtures/), ``.parent.parent`` the repository: the test
modules that moved one folder down (issue 30) read ``TESTS_FILE`` where they read ``__file__`` before.
"""
TESTS_FILE = __file__
