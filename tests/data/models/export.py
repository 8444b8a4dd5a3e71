"""Model-like programs for the `models` benchmark: each is exported with jax.export (its StableHLO
bytecode, weights as arguments), with its arguments' shapes and JAX's outputs on the arguments
`inputs(case)` makes. The benchmark makes the same arguments in Rust from the same formula, so no
weights are checked in. Run by scripts/jax-model-data; `jax_time.py` imports the same cases."""
import json
import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def layer_norm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def attention(x, wqkv, wo, heads):
    s, d = x.shape
    q, k, v = jnp.split(x @ wqkv, 3, axis=-1)
    split = lambda t: t.reshape(s, heads, d // heads).transpose(1, 0, 2)
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(d // heads)
    mask = jnp.tril(jnp.ones((s, s), bool))
    scores = jnp.where(mask, scores, -1e9)
    out = jax.nn.softmax(scores, axis=-1) @ v
    return out.transpose(1, 0, 2).reshape(s, d) @ wo


def block(x, p, heads=4):
    g1, b1, wqkv, wo, g2, b2, w1, c1, w2, c2 = p
    x = x + attention(layer_norm(x, g1, b1), wqkv, wo, heads)
    h = jax.nn.gelu(layer_norm(x, g2, b2) @ w1 + c1)
    return x + h @ w2 + c2


def block_params(d, ff):
    return [(d,), (d,), (d, 3 * d), (d, d), (d,), (d,), (d, ff), (ff,), (ff, d), (d,)]


SEQ, D, FF, VOCAB, LAYERS = 32, 64, 256, 128, 2


def gpt_block(x, *p):
    return block(x, p)


def tiny_gpt(tokens, wte, wpe, *rest):
    x = wte[tokens] + wpe
    per = len(block_params(D, FF))
    for i in range(LAYERS):
        x = block(x, rest[i * per:(i + 1) * per])
    g, b = rest[LAYERS * per:]
    return layer_norm(x, g, b) @ wte.T


def convnet(x, k1, c1, k2, c2, w, b):
    dn = ("NHWC", "HWIO", "NHWC")
    h = jax.nn.relu(lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=dn) + c1)
    h = jax.nn.relu(lax.conv_general_dilated(h, k2, (2, 2), "SAME", dimension_numbers=dn) + c2)
    return h.mean((1, 2)) @ w + b


def scan_rnn(xs, h0, wx, wh, b):
    def step(h, x):
        h = jnp.tanh(x @ wx + h @ wh + b)
        return h, h
    h, hs = lax.scan(step, h0, xs)
    return h, hs.mean(0)


def mlp(x, w1, b1, w2, b2, w3, b3):
    h = jax.nn.relu(x @ w1 + b1)
    h = jax.nn.relu(h @ w2 + b2)
    return h @ w3 + b3


f32, i32 = "float32", "int32"
CASES = {
    "gpt_block": (gpt_block, [((SEQ, D), f32)] + [(s, f32) for s in block_params(D, FF)]),
    "tiny_gpt": (
        tiny_gpt,
        [((SEQ,), i32), ((VOCAB, D), f32), ((SEQ, D), f32)]
        + [(s, f32) for _ in range(LAYERS) for s in block_params(D, FF)]
        + [((D,), f32), ((D,), f32)],
    ),
    "convnet": (
        convnet,
        [((8, 16, 16, 3), f32), ((3, 3, 3, 16), f32), ((16,), f32), ((3, 3, 16, 32), f32),
         ((32,), f32), ((32, 10), f32), ((10,), f32)],
    ),
    "scan_rnn": (
        scan_rnn,
        [((32, 8, 32), f32), ((8, 64), f32), ((32, 64), f32), ((64, 64), f32), ((64,), f32)],
    ),
    "mlp_batch64": (
        mlp,
        [((64, 128), f32), ((128, 256), f32), ((256,), f32), ((256, 256), f32), ((256,), f32),
         ((256, 10), f32), ((10,), f32)],
    ),
}


def inputs(name):
    """Argument k of n elements: sin(0.7 i + 1.3 k) / 4 in f64, then f32; integers
    (7 i + k) mod VOCAB. The benchmark computes the same in Rust."""
    out = []
    for k, (shape, dtype) in enumerate(CASES[name][1]):
        n = int(np.prod(shape))
        i = np.arange(n, dtype=np.float64)
        if dtype == i32:
            v = ((7 * np.arange(n) + k) % VOCAB).astype(np.int32)
        else:
            v = (np.sin(0.7 * i + 1.3 * k) / 4).astype(np.float32)
        out.append(v.reshape(shape))
    return out


def main(out):
    manifest = {"jax": jax.__version__, "cases": []}
    for name, (fn, args) in CASES.items():
        specs = [jax.ShapeDtypeStruct(s, d) for s, d in args]
        exp = jax.export.export(jax.jit(fn))(*specs)
        open(os.path.join(out, f"{name}.mlirbc"), "wb").write(exp.mlir_module_serialized)
        results = jax.tree.leaves(jax.jit(fn)(*inputs(name)))
        outputs = []
        for j, r in enumerate(results):
            path = f"{name}.out{j}.npy"
            np.save(os.path.join(out, path), np.asarray(r))
            outputs.append(path)
        manifest["cases"].append({
            "name": name,
            "program": f"{name}.mlirbc",
            "args": [{"shape": list(s), "dtype": d} for s, d in args],
            "outputs": outputs,
        })
    json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
