"""os.fork() while another thread holds lazypatch's lock: the child still imports
watched modules and exits (the lock is taken before the fork and released after)."""

from __future__ import annotations


def test_fork_while_another_thread_holds_the_engine_lock(interpreter):
    interpreter.write({"watched_after_fork.py": "VALUE = 'original'\n"})
    result = interpreter.run("""
import os, sys, threading, time
import lazypatch
from lazypatch.state import STATE

@lazypatch.when_imported("watched_after_fork", name="fork.patch")
def patched(module, patch):
    patch.setattr(module, "VALUE", "patched")

holding = threading.Event()
def hold():
    with STATE.lock:
        holding.set()
        time.sleep(0.5)          # bookkeeping in progress when the main thread forks
threading.Thread(target=hold).start()
holding.wait()
pid = os.fork()
if pid == 0:
    import watched_after_fork
    print("child", watched_after_fork.VALUE, flush=True)
    os._exit(0)
deadline = time.time() + 30
while time.time() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    print("child deadlocked", flush=True)
    sys.exit(1)
print("parent done", flush=True)
""", check=False, timeout=90)
    assert "child patched" in result.stdout, result.stdout + result.stderr
    assert "parent done" in result.stdout
