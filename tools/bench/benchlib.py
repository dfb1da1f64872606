"""What the benchmark drivers (bench.py, lazybench.py) share: messages,
waiting, dropping the page cache, and stopping the processes they started
(each kept in PROCS until stopped)."""

import os
import subprocess
import sys
import time

PROCS = []  # stopped at the end if still running


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def wait_until(pred, timeout, what, step=0.02):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(step)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def stop(p, timeout=30):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p in PROCS:
        PROCS.remove(p)
