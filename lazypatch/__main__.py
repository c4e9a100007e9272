"""``python -m lazypatch ...``: the same command line as ``lazypatch``."""

import sys

from .cli.main import main

sys.exit(main())
