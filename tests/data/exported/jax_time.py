"""Times JAX's own call of serialized exports for the `exported` benchmark, on request (the
benchmark interleaves its samples with these). Weights (inputs under [0][0]) are held on the
device; the other inputs come from NumPy each call and the outputs go back to NumPy, as the
benchmark's own calls do. `python jax_time.py`, then per line:
  `load FILE`            -> {"s": seconds to deserialize, compile and make the first call}
  `p50 FILE ARGS N`      -> {"us": [N call times, microseconds]}"""
import json
import sys
import time

import jax
import numpy as np
from jax import export

prepared = {}


def dotted(path):
    return ".".join(s.strip("'") for s in path.replace("]", "[").split("[") if s)


def prepare(file, args_file):
    key = (file, args_file)
    if key not in prepared:
        exp = export.deserialize(bytearray(open(file, "rb").read()))
        fn = jax.jit(exp.call)
        npz = np.load(args_file)
        leaves = jax.tree_util.tree_flatten_with_path(
            jax.tree_util.tree_unflatten(exp.in_tree, list(range(exp.in_tree.num_leaves))))[0]
        paths = [jax.tree_util.keystr(p) for p, _ in leaves]
        flat = [jax.device_put(npz[dotted(p)]) if p.startswith("[0][0]") else npz[dotted(p)]
                for p in paths]
        args = jax.tree_util.tree_unflatten(exp.in_tree, flat)[0]
        call = lambda: jax.tree_util.tree_map(np.asarray, fn(*args))
        for _ in range(10):
            call()
        prepared[key] = call
    return prepared[key]


def load_time(file, args_file):
    t = time.perf_counter()
    exp = export.deserialize(bytearray(open(file, "rb").read()))
    npz = np.load(args_file)
    leaves = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(exp.in_tree, list(range(exp.in_tree.num_leaves))))[0]
    flat = [npz[dotted(jax.tree_util.keystr(p))] for p, _ in leaves]
    # A fresh jit of a fresh deserialization: JAX compiles again (its cache is per function).
    jax.tree_util.tree_map(np.asarray, jax.jit(exp.call)(
        *jax.tree_util.tree_unflatten(exp.in_tree, flat)[0]))
    return time.perf_counter() - t


def main():
    print(json.dumps({"hello": True, "jax": jax.__version__}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "load":
            print(json.dumps({"s": load_time(words[1], words[2])}), flush=True)
        elif words[0] == "p50":
            call = prepare(words[1], words[2])
            out = []
            for _ in range(int(words[3])):
                t = time.perf_counter()
                call()
                out.append((time.perf_counter() - t) * 1e6)
            print(json.dumps({"us": out}), flush=True)


if __name__ == "__main__":
    main()
