"""``python -m benchmarks.gpu_bench``: the command line (see the package docstring)."""
import sys

from benchmarks.gpu_bench.run import main

sys.exit(main())
