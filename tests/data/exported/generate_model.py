"""A tiny llama-style language model (RoPE, causal attention, KV cache; vocab 64, width 32, two
heads, two blocks, a cache of 32 positions) exported as JetStream splits generation
(scripts/jax-exported-data writes it to generate/):

- prefill(params, tokens: int32[1, P], true_length: int32[]) -> (entry, logits: f32[1, V]),
  for prompt buckets P = 8 and 16; `entry` is one sequence's cache {"k", "v"}: f32[L, T, H, Dh];
- insert(cache, entry, slot: int32[]) -> cache, exported with donate_argnums=0;
- decode(params, cache, tokens: int32[S], positions: int32[S]) -> (cache, logits: f32[S, V]),
  exported with donate_argnums=1, for S = 4 decode slots; `cache` is {"k", "v"}: f32[L, S, T, H, Dh].

Also its weights (weights.safetensors, by dotted path), the config `serve` reads beside them
(generation.json: the cache length, stop token and token limit), and JAX's own greedy generations
(greedy.json): 64 prompts of 1 to 16 tokens, each generated alone (slot 0) for up to 12 tokens
or until the stop token 0, with the margin between the best and second-best logit at each step.
Prompts where a step's margin is under 1e-3 are drawn again, so that an XLA build's last-bit
differences cannot flip a token.

With a cache length as its second argument (`generate_model.py generate_long 4096`) it writes
only the exports and weights of the same model with that cache, and a generation.json with no
max_sequence: a sequence there runs thousands of steps before its cache ends it, which the
tests that a client's going frees its slot need."""
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

from export import write_safetensors

VOCAB, D, HEADS, BLOCKS, MLP, T, SLOTS = 64, 32, 2, 2, 64, 32, 4
DH = D // HEADS
BUCKETS = (8, 16)
PROMPTS, MAX_NEW, STOP = 64, 12, 0


def rms_norm(x, g):
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g


def rope(x, positions):
    """x: [..., N, H, DH] rotated by its positions [..., N]."""
    half = DH // 2
    freq = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = positions[..., None].astype(jnp.float32) * freq  # [..., N, half]
    cos, sin = jnp.cos(angle)[..., None, :], jnp.sin(angle)[..., None, :]
    a, b = x[..., :half], x[..., half:]
    return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], -1)


def block_qkv(x, b, positions):
    h = rms_norm(x, b["ln1"])
    split = lambda y: y.reshape(*y.shape[:-1], HEADS, DH)
    q, k, v = split(h @ b["wq"]), split(h @ b["wk"]), split(h @ b["wv"])
    return rope(q, positions), rope(k, positions), v


def attend(q, k, v, mask):
    """q: [N, H, DH]; k, v: [T, H, DH]; mask: [N, T]."""
    s = jnp.einsum("nhd,thd->hnt", q, k) / np.sqrt(DH)
    s = jnp.where(mask[None], s, -1e9)
    return jnp.einsum("hnt,thd->nhd", jax.nn.softmax(s, -1), v).reshape(q.shape[0], D)


def mlp(x, b):
    h = rms_norm(x, b["ln2"])
    return jax.nn.silu(h @ b["w1"]) @ b["w2"]


def logits_of(x, params):
    return rms_norm(x, params["lnf"]) @ params["wte"].T


def prefill(params, tokens, true_length):
    p = tokens.shape[1]
    positions = jnp.arange(p)
    x = params["wte"][tokens[0]]
    ks, vs = [], []
    mask = (positions[None, :] <= positions[:, None]) & (positions[None, :] < true_length)
    for b in params["blocks"]:
        q, k, v = block_qkv(x, b, positions)
        x = x + attend(q, k, v, mask) @ b["wo"]
        x = x + mlp(x, b)
        keep = (positions < true_length)[:, None, None]
        ks.append(jnp.zeros((T, HEADS, DH), jnp.float32).at[:p].set(jnp.where(keep, k, 0)))
        vs.append(jnp.zeros((T, HEADS, DH), jnp.float32).at[:p].set(jnp.where(keep, v, 0)))
    last = jax.lax.dynamic_index_in_dim(x, true_length - 1, 0, keepdims=True)
    return {"k": jnp.stack(ks), "v": jnp.stack(vs)}, logits_of(last, params)


def insert(cache, entry, slot):
    return {n: jax.lax.dynamic_update_index_in_dim(cache[n], entry[n], slot, 1) for n in cache}


def decode(params, cache, tokens, positions):
    x = params["wte"][tokens]  # [S, D]
    ks, vs = [], []
    for layer, b in enumerate(params["blocks"]):
        q, k, v = block_qkv(x[:, None], b, positions[:, None])  # [S, 1, H, DH]

        def one(kc, vc, k1, v1, q1, pos):
            kc = jax.lax.dynamic_update_index_in_dim(kc, k1[0], pos, 0)
            vc = jax.lax.dynamic_update_index_in_dim(vc, v1[0], pos, 0)
            mask = (jnp.arange(T) <= pos)[None, :]
            return kc, vc, attend(q1, kc, vc, mask)

        kc, vc, out = jax.vmap(one)(cache["k"][layer], cache["v"][layer], k, v, q, positions)
        ks.append(kc)
        vs.append(vc)
        x = x + out[:, 0] @ b["wo"]
        x = x + mlp(x, b)
    return {"k": jnp.stack(ks), "v": jnp.stack(vs)}, logits_of(x, params)


def init(rng):
    shapes = {"wte": (VOCAB, D), "lnf": (D,),
              "blocks": [{"wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D),
                          "ln1": (D,), "ln2": (D,), "w1": (D, MLP), "w2": (MLP, D)}
                         for _ in range(BLOCKS)]}

    def leaf(path, shape):
        if len(shape) == 1:
            return np.ones(shape, np.float32) + rng.normal(0, 0.05, shape).astype(np.float32)
        return rng.normal(0, 0.3, shape).astype(np.float32)
    return jax.tree_util.tree_map_with_path(leaf, shapes, is_leaf=lambda s: isinstance(s, tuple))


def spec_of(tree):
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


def main(out, cache=None):
    global T
    if cache is not None:
        T = cache
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(11)
    params = init(rng)
    pspec = spec_of(params)
    i32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.int32)
    entry_spec = {n: jax.ShapeDtypeStruct((BLOCKS, T, HEADS, DH), jnp.float32) for n in "kv"}
    cache_spec = {n: jax.ShapeDtypeStruct((BLOCKS, SLOTS, T, HEADS, DH), jnp.float32) for n in "kv"}
    write = lambda name, exp: open(os.path.join(out, name), "wb").write(exp.serialize())
    prefills = {}
    for p in BUCKETS:
        exp = export.export(jax.jit(prefill))(pspec, i32(1, p), i32())
        write(f"prefill_{p}.exported", exp)
        prefills[p] = jax.jit(prefill)
    write("insert.exported",
          export.export(jax.jit(insert, donate_argnums=0))(cache_spec, entry_spec, i32()))
    write("decode.exported",
          export.export(jax.jit(decode, donate_argnums=1))(pspec, cache_spec, i32(SLOTS), i32(SLOTS)))
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    dotted = lambda p: ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in p)
    write_safetensors(os.path.join(out, "weights.safetensors"), {dotted(p): v for p, v in flat})
    if cache is not None:
        json.dump({"stop_tokens": [STOP], "max_tokens": MAX_NEW},
                  open(os.path.join(out, "generation.json"), "w"))
        print(f"generate: the exports with a cache of {T} positions in {out}", file=sys.stderr)
        return

    # JAX's greedy generations, each alone in slot 0 of the decode batch.
    jit_insert = jax.jit(insert, donate_argnums=0)
    jit_decode = jax.jit(decode, donate_argnums=1)

    def generate(prompt):
        bucket = next(b for b in BUCKETS if b >= len(prompt))
        tokens = np.zeros((1, bucket), np.int32)
        tokens[0, :len(prompt)] = prompt
        entry, logits = prefills[bucket](params, tokens, np.int32(len(prompt)))
        cache = {n: jnp.zeros((BLOCKS, SLOTS, T, HEADS, DH), jnp.float32) for n in "kv"}
        cache = jit_insert(cache, entry, np.int32(0))
        out, margins, pos = [], [], len(prompt)
        while True:
            l = np.asarray(logits[0], np.float64)
            top = np.sort(l)[-2:]
            margins.append(float(top[1] - top[0]))
            token = int(np.argmax(l))
            out.append(token)
            if token == STOP or len(out) == MAX_NEW or pos >= T:
                return out, margins
            step_tokens = np.zeros(SLOTS, np.int32)
            step_pos = np.zeros(SLOTS, np.int32)
            step_tokens[0], step_pos[0] = token, pos
            cache, all_logits = jit_decode(params, cache, step_tokens, step_pos)
            logits = all_logits[:1]
            pos += 1

    cases = []
    while len(cases) < PROMPTS:
        length = int(rng.integers(1, BUCKETS[-1] + 1))
        prompt = [int(t) for t in rng.integers(1, VOCAB, length)]
        tokens, margins = generate(prompt)
        if min(margins) < 1e-3:
            continue
        cases.append({"prompt": prompt, "tokens": tokens, "min_margin": min(margins)})
    # What `pjrt-actors serve` reads beside the exports (serve's generation.json).
    json.dump({"max_sequence": T, "stop_tokens": [STOP], "max_tokens": MAX_NEW},
              open(os.path.join(out, "generation.json"), "w"))
    json.dump({"jax": jax.__version__, "buckets": list(BUCKETS), "slots": SLOTS, "cache_len": T,
               "stop": STOP, "max_new": MAX_NEW, "cases": cases},
              open(os.path.join(out, "greedy.json"), "w"), indent=0)
    print(f"generate: {len(cases)} prompts, "
          f"{sum(len(c['tokens']) for c in cases)} tokens", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "generate",
         int(sys.argv[2]) if len(sys.argv) > 2 else None)
