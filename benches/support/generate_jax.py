"""JAX's own generation loop beside `cargo bench --bench generate`: the same prefill, insert and
decode exports (tests/data/exported/generate), deserialized, each call jitted with the cache in
donate_argnums, driven by a Python loop that schedules as our engine does (one prefill a turn
into a free slot, every free slot's when none runs, sent before the decode step for the busy
slots and read after it; greedy). Prints `hello`, then one
JSON answer per request line: `{"prompts": [[...]], "max_tokens": [...], "concurrent": N}` ->
`{"seconds", "tokens", "first_token_s"}` (requests taken N at a time; all of a group arrive at
its start)."""
import collections
import json
import os
import struct
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import export


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dtype = {"F32": np.float32, "I32": np.int32}[t["dtype"]]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype).reshape(t["shape"])
    return out


def main(folder):
    load = lambda name: export.deserialize(open(os.path.join(folder, name), "rb").read())
    flat = read_safetensors(os.path.join(folder, "weights.safetensors"))
    decode_exp = load("decode.exported")
    # Decode's arguments ((params, cache, tokens, positions), {}) as their dotted paths; the
    # weights file names the params without the leading `0.0.`.
    leaves = jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(decode_exp.in_tree, list(range(len(decode_exp.in_avals)))))[0]
    dotted = lambda p: ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in p)
    names = [dotted(p) for p, _ in leaves]
    args_tree = jax.tree_util.tree_unflatten(decode_exp.in_tree, names)
    params = jax.tree_util.tree_map(lambda n: jnp.asarray(flat[n.split(".", 2)[2]]),
                                    args_tree[0][0])
    prefills = {}
    for f in sorted(os.listdir(folder)):
        if f.startswith("prefill") and f.endswith(".exported"):
            e = load(f)
            prefills[e.in_avals[-2].shape[1]] = jax.jit(e.call)
    insert = jax.jit(load("insert.exported").call, donate_argnums=0)
    decode = jax.jit(decode_exp.call, donate_argnums=1)
    cache_avals = args_tree[0][1]
    slots = decode_exp.in_avals[-2].shape[0]
    cache_shapes = {k: decode_exp.in_avals[names.index(v)].shape for k, v in cache_avals.items()}
    buckets = sorted(prefills)

    def zero_cache():
        return {k: jnp.zeros(s, jnp.float32) for k, s in cache_shapes.items()}

    def run(prompts, max_tokens):
        """Continuous batching over `slots`, all requests arriving now; greedy."""
        cache = zero_cache()
        waiting = collections.deque(zip(prompts, max_tokens))
        active = [None] * slots  # [last token, position, made, max]
        start = time.perf_counter()
        tokens, first = 0, []
        while waiting or any(active):
            # As our engine: one prefill sent (every free slot's when none runs), then the
            # decode step for the running slots, then the prefill read and inserted.
            idle = not any(active)
            started = []
            while waiting and (idle or not started):
                free = next((k for k, a in enumerate(active)
                             if a is None and all(k != s[0] for s in started)), None)
                if free is None:
                    break
                prompt, limit = waiting.popleft()
                bucket = next(b for b in buckets if b >= len(prompt))
                t = np.zeros((1, bucket), np.int32)
                t[0, :len(prompt)] = prompt
                started.append((free, prompt, limit,
                                prefills[bucket](params, t, np.int32(len(prompt)))))
            if any(active):
                step_tokens = np.zeros(slots, np.int32)
                step_pos = np.zeros(slots, np.int32)
                for k, a in enumerate(active):
                    if a:
                        step_tokens[k], step_pos[k] = a[0], a[1]
                cache, logits = decode(params, cache, step_tokens, step_pos)
                logits = np.asarray(logits)
                for k, a in enumerate(active):
                    if a:
                        a[0] = int(np.argmax(logits[k]))
                        a[1] += 1
                        a[2] += 1
                        tokens += 1
                        if a[2] >= a[3]:
                            active[k] = None
            for free, prompt, limit, (entry, logits) in started:
                token = int(np.argmax(np.asarray(logits[0])))
                first.append(time.perf_counter() - start)
                tokens += 1
                if limit > 1:
                    cache = insert(cache, entry, np.int32(free))
                    active[free] = [token, len(prompt), 1, limit]
        return time.perf_counter() - start, tokens, first

    print(json.dumps({"hello": True, "jax": jax.__version__}), flush=True)
    for line in sys.stdin:
        r = json.loads(line)
        n = r["concurrent"]
        seconds, tokens, first = 0.0, 0, []
        for i in range(0, len(r["prompts"]), n):
            s, t, f = run(r["prompts"][i:i + n], r["max_tokens"][i:i + n])
            seconds += s
            tokens += t
            first += f
        print(json.dumps({"seconds": seconds, "tokens": tokens,
                          "first_token_s": sum(first) / len(first)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
