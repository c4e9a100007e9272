"""Beyond one machine: the run's settings in one PYTHON* variable that multi-node
launchers forward, report paths that tell hosts, nodes and ranks apart, and a
launcher's agent that no longer passes for rank 0.

A second node cannot be had here, so each launcher's forwarding is replayed from
its own launch code: DeepSpeed's multi-node runner (deepspeed/launcher/runner.py
and multinode_runner.py) keeps only the variables whose names start with one of
its EXPORT_ENVS and sends them to every node as ``export NAME="VALUE";`` on the
pdsh command line, which a shell on the node runs with the node's own (clean)
environment; its Open MPI runner passes ``-x NAME="VALUE"`` without a shell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
from conftest import last_json, many_machines_demo
from hypothesis import given, strategies
from hypothesis import settings as hypothesis_settings

from lazypatch.activate import configuration
from lazypatch.activate.bootstrap import BOOTSTRAP_DIRECTORY

# deepspeed/launcher/runner.py: EXPORT_ENVS = ['MLFLOW', 'PYTHON', 'MV2', 'UCX'] (plus
# the accelerator's, NCCL for CUDA); a variable is exported when its name starts
# with one of them.
DEEPSPEED_EXPORT_ENVS = ("MLFLOW", "PYTHON", "MV2", "UCX", "NCCL")

DEMO = {
    **many_machines_demo(),
    # What a rank sees: its activation, the patches, and which LAZYPATCH_* variables
    # its environment really holds.
    "probe.py": """
        import json, os, sys
        import demo_target
        lazypatch_module = sys.modules.get("lazypatch")
        info = lazypatch_module.activation_info() if lazypatch_module else {}
        print(json.dumps({"activated_by": info.get("activated_by", ""),
                          "settings": info.get("settings"),
                          "value": demo_target.VALUE, "other": demo_target.OTHER,
                          "lazypatch_variables": sorted(
                              name for name in os.environ if name.startswith("LAZYPATCH"))}))
    """,
    "dump_environment.py": """
        import json, os
        print(json.dumps(dict(os.environ)))
    """,
}


def lazypatch_run(*options: str):
    return [sys.executable, "-m", "lazypatch", "run", *options, "--"]


def driver_environment(interpreter, *options: str) -> Dict[str, str]:
    """The environment `lazypatch run` gives its command on the launching node."""
    interpreter.write(DEMO)
    result = interpreter.run_command(lazypatch_run(*options) +
                                     [sys.executable, "dump_environment.py"])
    return last_json(result.stdout)


def node_environment() -> Dict[str, str]:
    """What a login shell on another node starts with: none of the driver's variables."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
            "PYTHONDONTWRITEBYTECODE": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def deepspeed_pdsh_command(driver: Dict[str, str], root: Path, rank_exports: str) -> str:
    """The shell command DeepSpeed's PDSHRunner sends to a node, for ``probe.py``."""
    environment = dict(driver)
    # runner.py puts the launching directory first on PYTHONPATH before exporting.
    environment["PYTHONPATH"] = str(root) + ":" + environment.get("PYTHONPATH", "")
    exports = ""
    for name, value in environment.items():
        if any(name.startswith(prefix) for prefix in DEEPSPEED_EXPORT_ENVS):
            exports += 'export {}={}; '.format(name, f'"{value.strip()}"')   # add_export's form
    # deepspeed.launcher.launch then gives each rank its variables (CROSS_RANK: its node).
    return f"{exports} cd {root}; {rank_exports} {sys.executable} -u probe.py"


def run_on_node(command: str, extra: Dict[str, str] = None) -> subprocess.CompletedProcess:
    environment = node_environment()
    environment.update(extra or {})
    result = subprocess.run(["/bin/sh", "-c", command], env=environment, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def test_settings_travel_in_one_python_variable_that_deepspeeds_runner_forwards(interpreter):
    reports = interpreter.root / "reports"
    driver = driver_environment(interpreter, "--modules", "demo_patches", "--disable", "demo.other",
                                "--report", str(reports / "r-{host}-{node}-{rank}.json"))
    assert configuration.PORTABLE_VARIABLE in driver
    assert configuration.PORTABLE_VARIABLE.startswith(DEEPSPEED_EXPORT_ENVS)
    node = run_on_node(deepspeed_pdsh_command(
        driver, interpreter.root, "export RANK=3 LOCAL_RANK=1 CROSS_RANK=1;"))
    seen = last_json(node.stdout)
    # None of LAZYPATCH_* arrived, and yet the rank runs the driver's settings.
    assert seen["lazypatch_variables"] == []
    assert seen["activated_by"] == "lazypatch run"
    assert (seen["value"], seen["other"]) == ("patched", "original")
    assert seen["settings"]["fingerprint"] == seen["settings"]["driver_fingerprint"] != ""
    assert seen["settings"]["differences"] == {}
    assert "differ" not in node.stderr
    document = json.loads((reports / f"r-{os.uname().nodename}-1-3.json").read_text())
    assert (document["rank"], document["node"], document["local_rank"], document["role"]) == \
        (3, 1, 1, "rank")
    statuses = {record["name"]: record["status"] for record in document["patches"]}
    assert statuses["demo.value"] == "applied" and statuses["demo.other"] == "disabled"


def test_open_mpi_style_quotes_in_the_value_are_accepted(interpreter):
    # DeepSpeed's OpenMPIRunner hands mpirun `-x NAME="VALUE"` as one argument, no
    # shell in between: the quotes reach the rank as part of the value.
    driver = driver_environment(interpreter, "--modules", "demo_patches", "--disable", "demo.value")
    value = driver[configuration.PORTABLE_VARIABLE]
    node = run_on_node(f"cd {interpreter.root}; {sys.executable} probe.py",
                       {"PYTHONPATH": BOOTSTRAP_DIRECTORY + os.pathsep + str(interpreter.root),
                        configuration.PORTABLE_VARIABLE: f'"{value}"', "OMPI_COMM_WORLD_RANK": "2"})
    seen = last_json(node.stdout)
    assert (seen["value"], seen["other"]) == ("original", "patched")
    assert seen["settings"]["differences"] == {} and node.stderr == ""


def test_a_rank_whose_own_settings_differ_is_told_and_reported(interpreter):
    reports = interpreter.root / "reports"
    driver = driver_environment(interpreter, "--modules", "demo_patches",
                                "--report", str(reports / "r-{rank}.json"))
    # This node's own profile sets a variable of its own: that rank runs other patches.
    node = run_on_node(deepspeed_pdsh_command(
        driver, interpreter.root, "export RANK=1 LAZYPATCH_DISABLE=demo.value;"))
    seen = last_json(node.stdout)
    assert seen["value"] == "original"
    assert seen["settings"]["fingerprint"] != seen["settings"]["driver_fingerprint"]
    assert "settings differ from those of the process that launched the run" in node.stderr
    assert "LAZYPATCH_DISABLE=''" in node.stderr and "'demo.value' here" in node.stderr
    document = json.loads((reports / "r-1.json").read_text())
    assert document["settings"]["differences"] == {
        "LAZYPATCH_DISABLE": {"driver": "", "here": "demo.value"}}


def test_a_damaged_portable_value_is_refused_with_a_warning(interpreter):
    interpreter.write(DEMO)
    driver = driver_environment(interpreter, "--modules", "demo_patches")
    damaged = driver[configuration.PORTABLE_VARIABLE].replace("demo_patches", "demo_patchez")
    result = interpreter.run_command(
        [sys.executable, "probe.py"],
        env={"PYTHONPATH": BOOTSTRAP_DIRECTORY, configuration.PORTABLE_VARIABLE: damaged,
             "LAZYPATCH_MODULES": "demo_patches"})
    seen = last_json(result.stdout)
    assert "was changed on its way" in result.stderr
    assert seen["value"] == "patched"   # its own LAZYPATCH_MODULES still count
    assert seen["settings"]["driver_fingerprint"] == ""


setting_values = strategies.text(min_size=1, max_size=30).filter(lambda text: text.strip())


@hypothesis_settings(max_examples=200, deadline=None)
@given(strategies.dictionaries(
    strategies.sampled_from(["LAZYPATCH", "LAZYPATCH_DISABLE", "LAZYPATCH_REPORT",
                             "LAZYPATCH_DEVICE", "LAZYPATCH_STRICT"]), setting_values))
def test_encoded_settings_are_shell_safe_and_decode_to_the_same(settings):
    encoded = configuration.encode_settings(settings)
    # Nothing a shell, inside double quotes or out of them, would touch.
    assert set(encoded) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "0123456789_.,/+-@%:=")
    assert configuration.decode_settings(encoded) == (
        configuration.settings_fingerprint(settings), settings)
    shell = subprocess.run(["/bin/sh", "-c", f'export X="{encoded}"; printf %s "$X"'],
                           capture_output=True, text=True, check=True, env={})
    assert shell.stdout == encoded


def test_report_paths_name_host_node_rank_local_rank_worker_and_pid(interpreter):
    interpreter.write(DEMO)
    template = str(interpreter.root / "out" / "{host}_{node}_{rank}_{local_rank}_{worker}_{pid}.json")
    result = interpreter.run_command(
        [sys.executable, "-c", "import lazypatch.auto, os; print(os.getpid())"],
        env={"LAZYPATCH_REPORT": template, "SLURM_PROCID": "7", "SLURM_LOCALID": "3",
             "SLURM_NODEID": "2"})
    pid = result.stdout.strip()
    path = interpreter.root / "out" / f"{os.uname().nodename}_2_7_3_main_{pid}.json"
    document = json.loads(path.read_text())
    assert (document["host"], document["node"], document["rank"], document["local_rank"],
            document["worker"], document["role"]) == (os.uname().nodename, 2, 7, 3, "main", "rank")


# torchrun's agent picks the workers' master port by binding and releasing a free
# port; the "torchrun" group keeps such launches on one xdist worker.
@pytest.mark.stack
@pytest.mark.xdist_group("torchrun")
def test_torchruns_agent_is_labelled_an_agent_not_rank_0(interpreter):
    interpreter.write(DEMO)
    interpreter.write({"train.py": "import demo_target\n"})
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    reports = interpreter.root / "reports"
    interpreter.run_command(
        lazypatch_run("--modules", "demo_patches", "--report", str(reports / "r-{rank}.json"))
        + [torchrun, "--standalone", "--nproc-per-node", "1", "train.py"],
        env={"OMP_NUM_THREADS": "1"}, timeout=150)
    agent = json.loads((reports / "r-agent.json").read_text())
    rank = json.loads((reports / "r-0.json").read_text())
    assert (agent["role"], agent["rank"], agent["rank_variable"]) == ("agent", None, None)
    assert (rank["role"], rank["rank"], rank["rank_variable"]) == ("rank", 0, "RANK")
    rendered = interpreter.run_command(
        [sys.executable, "-m", "lazypatch", "report", str(reports / "r-agent.json"),
         str(reports / "r-0.json")])
    assert f"agent pid {agent['pid']}" in rendered.stdout and "rank 0" in rendered.stdout
