"""The directory ``lazypatch run`` puts first on ``PYTHONPATH``.

It holds only ``sitecustomize.py``, which Python's ``site`` module imports at
start-up in every interpreter that inherits that ``PYTHONPATH``: the command
itself, its ``subprocess`` children, ``multiprocessing`` spawn workers and
torchrun's ranks. ``BOOTSTRAP_DIRECTORY`` is the path to prepend.
"""

import os

BOOTSTRAP_DIRECTORY = os.path.dirname(os.path.abspath(__file__))
