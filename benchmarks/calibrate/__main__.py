"""``python -m benchmarks.calibrate``: the command line (see the package docstring)."""
import sys

from benchmarks.calibrate.run import main

sys.exit(main())
