"""``python -m agraph``: see :mod:`agraph.cli`."""
import sys

from .cli import main

sys.exit(main())
