"""Times JAX's jit of export.py's benchmark MLP over the 4-device mesh, on request, for the
`spmd` benchmark (which starts it and interleaves its own blocks with JAX's). Per line:
  `p50 N` -> {"us": [N call times, microseconds]}, arguments already sharded on the devices,
each call until its output is ready."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export  # noqa: E402  (sets the 4-device flag before jax starts)
import jax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

specs = [P("d")] + [P()] * 3
shardings = [NamedSharding(export.line, s) for s in specs]
fn = jax.jit(export.bench_mlp, in_shardings=shardings,
             out_shardings=NamedSharding(export.line, P("d")))
args = [jax.device_put(a, s) for a, s in zip(export.bench_inputs(export.BENCH_BATCH), shardings)]
for _ in range(20):
    jax.block_until_ready(fn(*args))
print(json.dumps({"jax": jax.__version__, "devices": len(jax.devices())}), flush=True)
for line in sys.stdin:
    n = int(line.split()[1])
    out = []
    for _ in range(n):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        out.append((time.perf_counter() - t) * 1e6)
    print(json.dumps({"us": out}), flush=True)
