"""``python -m lazypatch ...``: the same command line as ``lazypatch``."""

import sys

from .cli import main

sys.exit(main())
