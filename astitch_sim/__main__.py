"""``python -m astitch_sim``: the same as the ``astitch`` command."""
import sys

from .cli import main

sys.exit(main())
