"""Ray and Dask workers patched with the driver's settings, on real clusters.

Each cluster is started by the driver on the loopback only (Ray: ``ray.init`` with
``_node_ip_address="127.0.0.1"``, no dashboard; Dask: a ``LocalCluster`` on
127.0.0.1 without a dashboard) and stopped in a ``finally``. The driver removes
every LAZYPATCH* variable from its environment after activating and before the
cluster starts, so the workers inherit none of them: the settings reach them
only through lazypatch's integration, as on the workers of a cluster someone
else started.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import last_json, many_machines_demo

pytest.importorskip("ray")   # requirements/dev.txt installs both; a bare checkout may not have them
pytest.importorskip("distributed")

WORKER_PACKAGES = {
    **many_machines_demo("""
        # A target every worker imported before lazypatch could activate there.
        @lazypatch.when_imported("FRAMEWORK", name="demo.framework")
        def framework(module, patch):
            patch.setattr(module, "LAZYPATCH_DEMO", "patched late")
    """),
    "user_hook.py": """
        import os, sys

        def setup():
            # The user's own setup hook runs after lazypatch activated.
            lazypatch_module = sys.modules.get("lazypatch")
            active = bool(lazypatch_module and lazypatch_module.activation_info()["active"])
            os.environ["USER_HOOK_SAW"] = "active" if active else "inactive"
    """,
    "probe.py": """
        import os

        def probe(*_):
            import demo_target, lazypatch, FRAMEWORK
            info = lazypatch.activation_info()
            return {"pid": os.getpid(), "activated_by": info["activated_by"],
                    "value": demo_target.VALUE, "other": demo_target.OTHER,
                    "framework": getattr(FRAMEWORK, "LAZYPATCH_DEMO", "original"),
                    "imported_before": info["imported_before"], "settings": info["settings"],
                    "user_hook": os.environ.get("USER_HOOK_SAW", "did not run"),
                    "lazypatch_variables": sorted(name for name in os.environ
                                                  if name.startswith("LAZYPATCH_")
                                                  and name != "LAZYPATCH_WORKER")}
    """,
}

# The driver activates with these settings, then forgets them before its cluster
# starts. (Guarded: Dask's spawned workers run this file again as __mp_main__.)
DRIVER_PREAMBLE = """
import json, os, sys
if __name__ == "__main__":
    import lazypatch.auto
    driver_settings = lazypatch.activation_info()["settings"]
    report_directory = os.path.dirname(lazypatch.activation_info()["report_path"])
    for name in [name for name in os.environ
                 if name.startswith(("LAZYPATCH", "PYTHONLAZYPATCH"))]:
        del os.environ[name]
"""

RAY_DRIVER = DRIVER_PREAMBLE + """
import ray
from lazypatch.integrations.ray import runtime_env
from probe import probe

def wait_for_reports(pids):
    # Ray ends its workers with SIGKILL at shutdown: a worker's report is the one its
    # lazypatch-report thread last wrote. Wait (bounded) until each shows the patch.
    import glob, time
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        written = set()
        for path in glob.glob(os.path.join(report_directory, "*.json")):
            with open(path) as handle:
                document = json.load(handle)
            if any(record["name"] == "demo.value" and record["status"] == "applied"
                   for record in document["patches"]):
                written.add(document["pid"])
        if pids <= written:
            return
        time.sleep(0.2)

@ray.remote
def task(index):
    return probe()

@ray.remote
class Actor:
    def probe(self):
        return probe()

if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, configure_logging=False,
             runtime_env=runtime_env({"worker_process_setup_hook": "user_hook.setup",
                                      "env_vars": {"OMP_NUM_THREADS": "1"}}))
    try:
        results = ray.get([task.remote(index) for index in range(2)], timeout=120)
        actor = Actor.remote()
        results.append(ray.get(actor.probe.remote(), timeout=120))
        wait_for_reports({seen["pid"] for seen in results})
    finally:
        ray.shutdown()
    print(json.dumps({"driver": driver_settings, "workers": results}))
"""

DASK_DRIVER = DRIVER_PREAMBLE + """
from distributed import Client, LocalCluster
from lazypatch.integrations.dask import LazypatchWorkerPlugin
from probe import probe

if __name__ == "__main__":
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None, worker_dashboard_address=None)
    try:
        with Client(cluster) as client:
            client.register_plugin(LazypatchWorkerPlugin())
            results = list(client.run(probe).values())
            results += client.gather(client.map(probe, range(4), pure=False))
    finally:
        cluster.close()
    print(json.dumps({"driver": driver_settings, "workers": results}))
"""


def run_driver(interpreter, framework: str, driver: str):
    interpreter.write({name: source.replace("FRAMEWORK", framework)
                       for name, source in WORKER_PACKAGES.items()})
    interpreter.write({"driver.py": driver})
    reports = interpreter.root / "reports"
    result = interpreter.run_command(
        [sys.executable, "driver.py"],
        env={"LAZYPATCH_MODULES": "demo_patches", "LAZYPATCH_DISABLE": "demo.other",
             "LAZYPATCH_REPORT": str(reports / "{worker}-{pid}.json"),
             "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"},
        timeout=150)
    outcome = last_json(result.stdout)
    return outcome, reports


def check_workers(outcome, reports, framework: str, source: str) -> None:
    workers = outcome["workers"]
    for seen in workers:
        assert seen["lazypatch_variables"] == []   # nothing of the driver's environment
        assert seen["activated_by"] == source
        assert (seen["value"], seen["other"]) == ("patched", "original")
        assert seen["settings"]["driver_fingerprint"] == outcome["driver"]["fingerprint"]
        assert seen["settings"]["differences"] == {}
        # Imported before the hook ran: patched late, and said so.
        assert seen["framework"] == "patched late" and framework in seen["imported_before"]
    worker_pids = {seen["pid"] for seen in workers}
    documents = {}
    for path in reports.glob("*.json"):
        document = json.loads(path.read_text())
        documents[document["pid"]] = (path, document)
    assert worker_pids <= set(documents)
    for pid in worker_pids:
        path, document = documents[pid]
        assert document["role"] == "worker" and path.name == f"{document['worker']}-{pid}.json"
        assert framework in document["imported_before"]
        statuses = {record["name"]: record["status"] for record in document["patches"]}
        assert statuses["demo.value"] == "applied" and statuses["demo.other"] == "disabled"
        assert statuses["demo.framework"] == "applied"


@pytest.mark.xdist_group("ray")
def test_ray_tasks_and_actors_run_the_drivers_patches(interpreter):
    outcome, reports = run_driver(interpreter, "ray", RAY_DRIVER)
    assert len(outcome["workers"]) == 3
    assert all(seen["user_hook"] == "active" for seen in outcome["workers"])
    assert all(json.loads(path.read_text())["worker"].startswith("ray-")
               for path in reports.glob("ray-*.json"))
    check_workers(outcome, reports, "ray", "ray worker")


@pytest.mark.xdist_group("dask")
def test_dask_workers_run_the_clients_patches_through_the_worker_plugin(interpreter):
    outcome, reports = run_driver(interpreter, "distributed", DASK_DRIVER)
    assert len({seen["pid"] for seen in outcome["workers"]}) == 2
    check_workers(outcome, reports, "distributed", "dask worker plugin")
    assert {path.name.split("-")[0] for path in reports.glob("dask-*.json")} == {"dask"}
    assert os.path.isdir(reports)


DASK_CLIENT = """
import json, sys
from distributed import Client
from probe import probe

with Client(scheduler_file=sys.argv[1], timeout=60) as client:
    client.wait_for_workers(1, timeout=60)
    results = list(client.run(probe).values())
    client.shutdown()   # the scheduler and its workers stop (their reports are written)
print(json.dumps(results))
"""


@pytest.mark.xdist_group("dask")
def test_dask_worker_command_with_the_preload_activates_with_the_forwarded_settings(interpreter):
    """`dask worker --preload lazypatch.integrations.dask`, started by hand on a "node"
    whose environment has only the PYTHONLAZYPATCH value, no LAZYPATCH_* variable."""
    import subprocess

    from lazypatch.activate import configuration
    interpreter.write({name: source.replace("FRAMEWORK", "distributed")
                       for name, source in WORKER_PACKAGES.items()})
    interpreter.write({"client.py": DASK_CLIENT})
    reports = interpreter.root / "reports"
    settings = {"LAZYPATCH_MODULES": "demo_patches", "LAZYPATCH_DISABLE": "demo.other",
                "LAZYPATCH_REPORT": str(reports / "{worker}-{pid}.json")}
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    scheduler_file = str(interpreter.root / "scheduler.json")
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("LAZYPATCH", "PYTHONLAZYPATCH"))}
    environment.update({"PYTHONPATH": str(interpreter.root), "OMP_NUM_THREADS": "1",
                        "PYTHONDONTWRITEBYTECODE": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    worker_environment = dict(environment, **{
        configuration.PORTABLE_VARIABLE: configuration.encode_settings(settings)})
    started = []
    try:
        started.append(subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", scheduler_file], cwd=interpreter.root, env=environment,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        started.append(subprocess.Popen(
            [dask, "worker", "--scheduler-file", scheduler_file, "--host", "127.0.0.1",
             "--nworkers", "1", "--nthreads", "1", "--no-dashboard", "--name", "node-a",
             "--preload", "lazypatch.integrations.dask"], cwd=interpreter.root,
            env=worker_environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        client = subprocess.run([sys.executable, "client.py", scheduler_file],
                                cwd=interpreter.root, env=environment, capture_output=True,
                                text=True, timeout=120)
        assert client.returncode == 0, client.stderr
        for process in started:
            process.wait(timeout=60)
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
    (seen,) = last_json(client.stdout)
    assert seen["activated_by"] == "dask preload" and seen["lazypatch_variables"] == []
    assert (seen["value"], seen["other"]) == ("patched", "original")
    assert seen["settings"]["driver_fingerprint"] == configuration.settings_fingerprint(settings)
    assert seen["settings"]["differences"] == {}
    document = json.loads((reports / f"dask-node-a-{seen['pid']}.json").read_text())
    assert document["role"] == "worker" and "distributed" in document["imported_before"]


# A Ray driver that knows nothing of lazypatch, run under `lazypatch run`: before its
# cluster starts it drops everything lazypatch put in its environment (the bootstrap
# on PYTHONPATH too) but Ray's own hook, as if the workers belonged to a cluster
# started elsewhere. The user's own RAY_RUNTIME_ENV_HOOK still runs.
PLAIN_RAY_DRIVER = """
import json, os, sys
import ray
from probe import probe

def user_env_hook(runtime_env):
    runtime_env = dict(runtime_env or {})
    runtime_env["env_vars"] = dict(runtime_env.get("env_vars") or {}, USER_ENV_HOOK="ran")
    return runtime_env

@ray.remote
def task():
    return dict(probe(), user_env_hook=os.environ.get("USER_ENV_HOOK", "did not run"))

if __name__ == "__main__":
    import lazypatch
    driver_settings = lazypatch.activation_info()["settings"]
    for name in [name for name in os.environ if name.startswith(("LAZYPATCH_", "PYTHONLAZYPATCH"))
                 and name != "LAZYPATCH_RAY_USER_HOOK"]:
        del os.environ[name]
    os.environ["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__))
    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, configure_logging=False)
    try:
        results = ray.get([task.remote()], timeout=120)
    finally:
        ray.shutdown()
    print(json.dumps({"driver": driver_settings, "workers": results}))
"""


@pytest.mark.xdist_group("ray")
def test_lazypatch_run_around_an_unchanged_ray_driver_reaches_its_workers(interpreter):
    interpreter.write({name: source.replace("FRAMEWORK", "ray")
                       for name, source in WORKER_PACKAGES.items()})
    interpreter.write({"driver.py": PLAIN_RAY_DRIVER})
    result = interpreter.run_command(
        [sys.executable, "-m", "lazypatch", "run", "--modules", "demo_patches",
         "--disable", "demo.other", "--", sys.executable, "driver.py"],
        env={"RAY_RUNTIME_ENV_HOOK": "driver.user_env_hook", "RAY_USAGE_STATS_ENABLED": "0",
             "OMP_NUM_THREADS": "1"}, timeout=150)
    outcome = last_json(result.stdout)
    (seen,) = outcome["workers"]
    assert seen["user_env_hook"] == "ran"
    assert seen["lazypatch_variables"] == ["LAZYPATCH_RAY_USER_HOOK"]   # nothing else came
    assert seen["activated_by"] == "ray worker"
    assert (seen["value"], seen["other"]) == ("patched", "original")
    assert seen["settings"]["driver_fingerprint"] == outcome["driver"]["fingerprint"]
    assert seen["framework"] == "patched late" and "ray" in seen["imported_before"]


SHIPPED_DRIVER = DRIVER_PREAMBLE + """
import ray
from lazypatch.integrations.ray import runtime_env

# The patch package is importable here only through a path the driver adds and
# drops again: the workers can get it only from Ray's py_modules.
elsewhere = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elsewhere")
sys.path.insert(0, elsewhere)
import shipped_patches
sys.path.remove(elsewhere)

@ray.remote
def probe():
    import demo_target, lazypatch, shipped_patches
    return {"value": demo_target.VALUE, "file": shipped_patches.__file__,
            "modules": lazypatch.activation_info()["settings"]["differences"]}

if __name__ == "__main__":
    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, configure_logging=False,
             runtime_env=runtime_env({"env_vars": {"OMP_NUM_THREADS": "1"}},
                                     patch_modules=["shipped_patches"]))
    try:
        seen = ray.get(probe.remote(), timeout=120)
    finally:
        ray.shutdown()
    print(json.dumps({"seen": seen, "elsewhere": elsewhere}))
"""


@pytest.mark.xdist_group("ray")
def test_ray_ships_the_users_patch_package_to_workers_that_cannot_import_it(interpreter):
    interpreter.write({
        "demo_target/__init__.py": "VALUE = 'original'\n",
        "elsewhere/shipped_patches/__init__.py": """
            import lazypatch

            @lazypatch.when_imported("demo_target", name="shipped.value")
            def value(module, patch):
                patch.setattr(module, "VALUE", "patched by a shipped package")
        """,
        "driver.py": SHIPPED_DRIVER,
    })
    result = interpreter.run_command(
        [sys.executable, "driver.py"],
        env={"RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1",
             "LAZYPATCH_REPORT": str(interpreter.root / "reports" / "{worker}-{pid}.json")},
        timeout=150)
    outcome = last_json(result.stdout)
    seen = outcome["seen"]
    assert seen["value"] == "patched by a shipped package"
    assert not seen["file"].startswith(outcome["elsewhere"])   # Ray's copy, not the driver's
    assert seen["modules"] == {}   # the settings the worker got are the ones it runs


def test_patch_modules_refuses_what_ray_cannot_ship(interpreter):
    interpreter.write({"single_file_patches.py": "X = 1\n",
                       "ns_patches/inner.py": "X = 1\n"})
    result = interpreter.run_json("""
import json
from lazypatch.integrations.ray import runtime_env
errors = {}
for entry in ["single_file_patches", "ns_patches", "", ".relative", 3]:
    try:
        runtime_env(patch_modules=[entry])
        errors[repr(entry)] = "accepted"
    except (ValueError, TypeError) as error:
        errors[repr(entry)] = str(error)
print(json.dumps(errors))
""")
    assert "single file" in result["'single_file_patches'"]
    assert "namespace package" in result["'ns_patches'"]
    assert "my_patches/__init__.py" in result["'single_file_patches'"]
    assert "absolute module name" in result["''"] and "absolute module name" in result["'.relative'"]
    assert "module names or modules" in result["3"]


def test_patch_modules_join_the_settings_the_workers_receive(interpreter):
    interpreter.write({"pkg_patches/__init__.py": "", "pkg_patches/more.py": ""})
    result = interpreter.run_json("""
import json
from lazypatch.activate.configuration import decode_settings
from lazypatch.integrations.ray import runtime_env
import pkg_patches
env = runtime_env({"py_modules": ["already"]}, patch_modules=["pkg_patches.more", pkg_patches])
fingerprint, settings = decode_settings(env["env_vars"]["PYTHONLAZYPATCH"])
print(json.dumps({"modules": settings["LAZYPATCH_MODULES"],
                  "shipped": [getattr(m, "__name__", m) for m in env["py_modules"]]}))
""", env={"LAZYPATCH_MODULES": "existing_patches"})
    assert result["modules"] == "existing_patches,pkg_patches.more,pkg_patches"
    assert result["shipped"] == ["already", "pkg_patches"]
