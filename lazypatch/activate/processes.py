"""Who this process is, for report paths and reports: host, node, rank, local rank,
Ray or Dask worker, pid, and its role (a rank, a worker, a launcher's agent).

Read from the launchers' environment variables and ``sys.modules``, importing
nothing (no socket): reports are written at exit, when imports may fail.
"""

from __future__ import annotations

import os
import sys

from .configuration import WORKER_VARIABLE, current_rank, rank_variable

TYPE_CHECKING = False
if TYPE_CHECKING:  # see benchmarks/COSTS.md: typing is far too heavy for the activation path
    from typing import Dict, Mapping, Optional, Tuple

# Launchers' variables, most specific first. torchrun: GROUP_RANK and LOCAL_RANK;
# DeepSpeed's launch: CROSS_RANK (its node) and LOCAL_RANK; Slurm: SLURM_NODEID and
# SLURM_LOCALID; Open MPI: OMPI_COMM_WORLD_LOCAL_RANK; MPICH's Hydra: MPI_LOCALRANKID.
NODE_VARIABLES = ("GROUP_RANK", "CROSS_RANK", "SLURM_NODEID", "NODE_RANK")
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "MPI_LOCALRANKID")
# Modules that make a process without a rank a launcher's agent: torchrun's (and
# torch.distributed.launch's) elastic agent, DeepSpeed's runner and per-node launcher.
AGENT_MODULES = ("torch.distributed.run", "torch.distributed.launch",
                 "deepspeed.launcher.runner", "deepspeed.launcher.launch")


def _first_number(variables: "Tuple[str, ...]", environment: "Mapping[str, str]") -> "Optional[int]":
    for variable in variables:
        value = environment.get(variable, "").strip()
        if value.isascii() and value.isdigit():   # int() refuses "²", which isdigit() accepts
            return int(value)
    return None


def host_name() -> str:
    """This machine's name."""
    uname = getattr(os, "uname", None)
    if uname is not None:
        return uname().nodename or "localhost"
    return os.environ.get("COMPUTERNAME", "localhost")   # Windows has no os.uname


def process_role(environ: "Optional[Mapping[str, str]]" = None) -> str:
    """``rank`` (a launcher gave it a rank), ``worker`` (a Ray or Dask worker),
    ``agent`` (a launcher's own process: torchrun's agent, DeepSpeed's launcher)
    or ``process``."""
    environment = os.environ if environ is None else environ
    if rank_variable(environment):
        return "rank"
    if environment.get(WORKER_VARIABLE):
        return "worker"
    if any(name in sys.modules for name in AGENT_MODULES):
        return "agent"
    return "process"


def process_identity(environ: "Optional[Mapping[str, str]]" = None) -> "Dict[str, object]":
    """Who this process is: host, node, rank, local_rank, worker, pid and role.

    A launcher's agent has no rank (None): it must not pass for rank 0. Without a
    launcher, node, rank and local rank are 0; worker is the Ray or Dask worker's
    name, else ``main``.
    """
    environment = os.environ if environ is None else environ
    role = process_role(environment)
    node = _first_number(NODE_VARIABLES, environment)
    local_rank = _first_number(LOCAL_RANK_VARIABLES, environment)
    return {"host": host_name(), "node": 0 if node is None else node,
            "rank": None if role == "agent" else current_rank(environment),
            "local_rank": 0 if local_rank is None else local_rank,
            "worker": environment.get(WORKER_VARIABLE, "") or "main",
            "pid": os.getpid(), "role": role}
