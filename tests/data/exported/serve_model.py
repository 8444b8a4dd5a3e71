"""The model the main job serves (scripts/jax-exported-data): a tiny GPT-style transformer
(vocab 64, 8 tokens, width 32, two blocks) exported with jax.export for batches of 16
sequences; its weights in a .safetensors file named as a user's checkpoint would name them
(`blocks.0.attn.wq`); the same export for `platforms=("cpu", "cuda")`; 256 one-sequence requests with JAX's next-token logits for each; and
every argument by its dotted path (transformer.args.npz) for the `exported` benchmark."""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

from export import write_safetensors

VOCAB, SEQ, D, HEADS, MLP, BLOCKS, BATCH, REQUESTS = 64, 8, 32, 2, 64, 2, 16, 256


def layer_norm(x, p):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * p["g"] + p["b"]


def attention(x, p):
    split = lambda y: y.reshape(*y.shape[:-1], HEADS, D // HEADS).swapaxes(-2, -3)
    q, k, v = split(x @ p["wq"]), split(x @ p["wk"]), split(x @ p["wv"])
    s = q @ k.swapaxes(-1, -2) / np.sqrt(D // HEADS)
    s = jnp.where(jnp.tril(jnp.ones((SEQ, SEQ), bool)), s, -1e9)
    return (jax.nn.softmax(s, -1) @ v).swapaxes(-2, -3).reshape(x.shape) @ p["wo"]


def next_token_logits(params, inputs):
    tokens = inputs["tokens"]
    x = params["wte"][tokens] + params["wpe"]
    for b in params["blocks"]:
        x = x + attention(layer_norm(x, b["ln1"]), b["attn"])
        x = x + jax.nn.gelu(layer_norm(x, b["ln2"]) @ b["mlp"]["w1"]) @ b["mlp"]["w2"]
    return layer_norm(x[:, -1], params["lnf"]) @ params["wte"].T


def init(rng):
    shapes = {"wte": (VOCAB, D), "wpe": (SEQ, D), "lnf": {"g": (D,), "b": (D,)},
              "blocks": [{"attn": {k: (D, D) for k in ("wq", "wk", "wv", "wo")},
                          "ln1": {"g": (D,), "b": (D,)}, "ln2": {"g": (D,), "b": (D,)},
                          "mlp": {"w1": (D, MLP), "w2": (MLP, D)}} for _ in range(BLOCKS)]}
    def leaf(path, shape):
        name = jax.tree_util.keystr(path)
        if name.endswith("['g']"):
            return np.ones(shape, np.float32) + rng.normal(0, 0.05, shape).astype(np.float32)
        return rng.normal(0, 0.2, shape).astype(np.float32)
    return jax.tree_util.tree_map_with_path(leaf, shapes, is_leaf=lambda s: isinstance(s, tuple))


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    params = init(rng)
    spec = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    tokens = jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32)
    exp = export.export(jax.jit(next_token_logits))(spec, {"tokens": tokens})
    open(os.path.join(out, "transformer.exported"), "wb").write(exp.serialize())
    # The same for CPU and CUDA (the GPU check serves it on a GPU with the CUDA index).
    both = export.export(jax.jit(next_token_logits), platforms=("cpu", "cuda"))(
        spec, {"tokens": tokens})
    open(os.path.join(out, "transformer.cpu_cuda.exported"), "wb").write(both.serialize())
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    dotted = lambda p: ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in p)
    write_safetensors(os.path.join(out, "transformer.safetensors"),
                      {dotted(p): v for p, v in flat})
    # JAX's answers through its own call of the deserialized artifact, 16 requests a batch.
    back = export.deserialize(exp.serialize())
    requests = rng.integers(0, VOCAB, (REQUESTS, SEQ)).astype(np.int32)
    logits = np.concatenate([
        np.asarray(back.call(params, {"tokens": requests[i:i + BATCH]}))
        for i in range(0, REQUESTS, BATCH)])
    np.savez(os.path.join(out, "requests.npz"), tokens=requests, logits=logits)
    # Every argument by its dotted path, for the `exported` benchmark's calls (ours and JAX's).
    args = {"0.0." + dotted(p): v for p, v in flat}
    args["0.1.tokens"] = requests[:BATCH]
    np.savez(os.path.join(out, "transformer.args.npz"), **args)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    main(os.path.join(here, sys.argv[1] if len(sys.argv) > 1 else "serve"))
