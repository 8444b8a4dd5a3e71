"""Times JAX's jitted calls of export.py's cases for the `models` benchmark, on request: the
benchmark starts one of these per dispatch mode and sends it lines, so its own samples and
JAX's interleave. `python jax_time.py sync|async`, then per line:
  `p50 NAME N`       -> {"us": [N call times, microseconds]}  (one thread)
  `rate NAME T SECS` -> {"per_s": calls per second from T Python threads}
A call is `f(*args)` on arguments already on the device, until its outputs are ready."""
import json
import os
import sys
import threading
import time

import jax

jax.config.update("jax_cpu_enable_async_dispatch", sys.argv[1] == "async")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export  # noqa: E402

prepared = {}


def case(name):
    if name not in prepared:
        fn = jax.jit(export.CASES[name][0])
        args = [jax.device_put(a) for a in export.inputs(name)]
        for _ in range(20):
            jax.block_until_ready(fn(*args))
        prepared[name] = (fn, args)
    return prepared[name]


def call_times(name, n):
    fn, args = case(name)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        out.append((time.perf_counter() - t) * 1e6)
    return out


def rate(name, threads, secs):
    fn, args = case(name)
    stop, counts = threading.Event(), [0] * threads

    def run(t):
        while not stop.is_set():
            jax.block_until_ready(fn(*args))
            counts[t] += 1

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    time.sleep(secs)
    stop.set()
    for w in workers:
        w.join()
    return sum(counts) / secs


print(json.dumps({"jax": jax.__version__, "devices": len(jax.devices())}), flush=True)
for line in sys.stdin:
    words = line.split()
    if words[0] == "p50":
        answer = {"us": call_times(words[1], int(words[2]))}
    elif words[0] == "rate":
        answer = {"per_s": rate(words[1], int(words[2]), float(words[3]))}
    else:
        answer = {"error": f"unknown request {line!r}"}
    print(json.dumps(answer), flush=True)
