"""``python -m ratelnn``: the command line of :mod:`ratelnn.cli`."""
import sys

from .cli import main

sys.exit(main())
