"""A tiny llama-style language model (RoPE, causal attention, KV cache; vocab 64, width 32, two
heads, two blocks, a cache of 32 positions) exported as JetStream splits generation
(scripts/jax-exported-data writes it to generate/):

- prefill(params, tokens: int32[1, P], true_length: int32[]) -> (entry, logits: f32[1, V]),
  for prompt buckets P = 8 and 16; `entry` is one sequence's cache {"k", "v"}: f32[L, H, T, Dh]
  (head-major: attention reads each head's positions in place, no transpose a step);
- insert(cache, entry, slot: int32[]) -> cache, exported with donate_argnums=0;
- decode(params, cache, tokens: int32[S], positions: int32[S]) -> (cache, logits: f32[S, V]),
  exported with donate_argnums=1, for S = 4 decode slots; `cache` is {"k", "v"}: f32[L, S, H, T, Dh];
- extend(params, entry, tokens: int32[1, C], start: int32[], true_length: int32[]) -> (entry,
  logits: f32[1, V]), exported with donate_argnums=1, for chunks C = 4 and 8: it continues a
  sequence's entry from position `start` (chunked prefill, a cached prefix).

Also its weights (weights.safetensors, by dotted path), the config `serve` reads beside them
(generation.json: the cache length, stop token and token limit), and JAX's own greedy generations
(greedy.json): 64 prompts of 1 to 16 tokens, each generated alone (slot 0) for up to 12 tokens
or until the stop token 0, with the margin between the best and second-best logit at each step;
and `long_cases`: 8 pairs of prompts of 17 to 24 tokens (past the largest bucket), the second of
each sharing the first's first 90% (a cached prefix), both prefilled whole by JAX (a prefill of
the cache's length, not exported). Prompts where a step's margin is under 1e-3 are drawn again,
so that an XLA build's last-bit differences cannot flip a token.

With a cache length as its second argument (`generate_model.py generate_long 4096`) it writes
only the exports and weights of the same model with that cache, and a generation.json with no
max_sequence: a sequence there runs thousands of steps before its cache ends it, which the
tests that a client's going frees its slot need. With `bench` as its second argument
(`generate_model.py generate_bench bench`) it writes the same layers wider and deeper (width 128,
four blocks, an MLP of 1024, vocabulary 256), with 8 slots, a 1024-position cache, prefill buckets 64 and 1024 and
extend chunks 32 and 64: the model `cargo bench --bench generate` measures chunked prefill, the
prefix cache and continuous batching on, where a decode step is a realistic share of a
prefill."""
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
EXTENDS = (4, 8)
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


def attend_cached(q, k, v, mask):
    """q: [N, H, DH]; k, v: [H, T, DH], head-major as the cache holds them; mask: [N, T]."""
    s = jnp.einsum("nhd,htd->hnt", q, k) / np.sqrt(DH)
    s = jnp.where(mask[None], s, -1e9)
    return jnp.einsum("hnt,htd->nhd", jax.nn.softmax(s, -1), v).reshape(q.shape[0], D)


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
        head_major = lambda y: jnp.where(keep, y, 0).transpose(1, 0, 2)
        ks.append(jnp.zeros((HEADS, T, DH), jnp.float32).at[:, :p].set(head_major(k)))
        vs.append(jnp.zeros((HEADS, T, DH), jnp.float32).at[:, :p].set(head_major(v)))
    last = jax.lax.dynamic_index_in_dim(x, true_length - 1, 0, keepdims=True)
    return {"k": jnp.stack(ks), "v": jnp.stack(vs)}, logits_of(last, params)


def extend(params, entry, tokens, start, true_length):
    """Continues `entry` (positions below `start` written) with tokens[0, :true_length] at
    positions start, ...: each attends to the entry's positions below its own and to the chunk's
    tokens before it, as a whole prefill would. The chunk's padding is written as zeros, as
    prefill writes past its true length; the caller keeps start + C within the cache."""
    c = tokens.shape[1]
    positions = start + jnp.arange(c)
    x = params["wte"][tokens[0]]
    real = (jnp.arange(c) < true_length)[:, None, None]
    mask = jnp.arange(T)[None, :] <= positions[:, None]
    # Written in place into the donated entry, layer by layer (no copy of the whole).
    ks, vs = entry["k"], entry["v"]
    for layer, b in enumerate(params["blocks"]):
        q, k, v = block_qkv(x, b, positions)
        head_major = lambda y: jnp.where(real, y, 0).transpose(1, 0, 2)[None]
        ks = jax.lax.dynamic_update_slice(ks, head_major(k), (layer, 0, start, 0))
        vs = jax.lax.dynamic_update_slice(vs, head_major(v), (layer, 0, start, 0))
        x = x + attend_cached(q, ks[layer], vs[layer], mask) @ b["wo"]
        x = x + mlp(x, b)
    last = jax.lax.dynamic_index_in_dim(x, true_length - 1, 0, keepdims=True)
    return {"k": ks, "v": vs}, logits_of(last, params)


def insert(cache, entry, slot):
    return {n: jax.lax.dynamic_update_index_in_dim(cache[n], entry[n], slot, 1) for n in cache}


def decode(params, cache, tokens, positions):
    x = params["wte"][tokens]  # [S, D]
    slots = jnp.arange(tokens.shape[0])
    # Each slot's new key and value scattered in place into the donated cache (no copy of it).
    ks, vs = cache["k"], cache["v"]
    mask = jnp.arange(T)[None, :] <= positions[:, None]  # [S, T]
    for layer, b in enumerate(params["blocks"]):
        q, k, v = block_qkv(x[:, None], b, positions[:, None])  # [S, 1, H, DH]
        ks = ks.at[layer, slots, :, positions].set(k[:, 0])
        vs = vs.at[layer, slots, :, positions].set(v[:, 0])
        s = jnp.einsum("shd,shtd->sht", q[:, 0], ks[layer]) / np.sqrt(DH)
        s = jnp.where(mask[:, None, :], s, -1e9)
        out = jnp.einsum("sht,shtd->shd", jax.nn.softmax(s, -1), vs[layer]).reshape(-1, D)
        x = x + out @ b["wo"]
        x = x + mlp(x, b)
    return {"k": ks, "v": vs}, logits_of(x, params)


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


def bench_model():
    """The bench's shapes: a decode step a realistic share of a prefill."""
    global VOCAB, D, HEADS, BLOCKS, MLP, T, SLOTS, DH, BUCKETS, EXTENDS
    VOCAB, D, HEADS, BLOCKS, MLP, T, SLOTS = 256, 128, 4, 4, 1024, 1024, 8
    DH, BUCKETS, EXTENDS = D // HEADS, (64, 1024), (32, 64)


def main(out, cache=None):
    global T
    if cache == "bench":
        bench_model()
    elif cache is not None:
        T = cache
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(11)
    params = init(rng)
    pspec = spec_of(params)
    i32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.int32)
    entry_spec = {n: jax.ShapeDtypeStruct((BLOCKS, HEADS, T, DH), jnp.float32) for n in "kv"}
    cache_spec = {n: jax.ShapeDtypeStruct((BLOCKS, SLOTS, HEADS, T, DH), jnp.float32) for n in "kv"}
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
    write_extends(out, pspec, entry_spec)
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    dotted = lambda p: ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in p)
    write_safetensors(os.path.join(out, "weights.safetensors"), {dotted(p): v for p, v in flat})
    if cache is not None:
        json.dump({"stop_tokens": [STOP], "max_tokens": MAX_NEW},
                  open(os.path.join(out, "generation.json"), "w"))
        print(f"generate: the exports with a cache of {T} positions in {out}", file=sys.stderr)
        return

    # JAX's greedy generations, each alone in slot 0 of the decode batch, each prompt prefilled
    # whole: in its bucket, or one of the cache's length past the largest.
    jit_insert = jax.jit(insert, donate_argnums=0)
    jit_decode = jax.jit(decode, donate_argnums=1)
    whole = jax.jit(prefill)

    def generate(prompt):
        bucket = next((b for b in BUCKETS if b >= len(prompt)), T)
        tokens = np.zeros((1, bucket), np.int32)
        tokens[0, :len(prompt)] = prompt
        entry, logits = prefills.get(bucket, whole)(params, tokens, np.int32(len(prompt)))
        cache = {n: jnp.zeros((BLOCKS, SLOTS, HEADS, T, DH), jnp.float32) for n in "kv"}
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
    # Past the largest bucket: pairs, the second sharing the first's first 90%.
    long_cases = []
    while len(long_cases) < 16:
        length = int(rng.integers(BUCKETS[-1] + 1, 25))
        first = [int(t) for t in rng.integers(1, VOCAB, length)]
        shared = (length * 9) // 10
        second = first[:shared] + [int(t) for t in rng.integers(1, VOCAB, length - shared)]
        pair = [(p, generate(p)) for p in (first, second)]
        if min(min(m) for _, (_, m) in pair) < 1e-3:
            continue
        long_cases += [{"prompt": p, "tokens": t, "min_margin": min(m)} for p, (t, m) in pair]
    # What `pjrt-actors serve` reads beside the exports (serve's generation.json).
    json.dump({"max_sequence": T, "stop_tokens": [STOP], "max_tokens": MAX_NEW},
              open(os.path.join(out, "generation.json"), "w"))
    json.dump({"jax": jax.__version__, "buckets": list(BUCKETS), "slots": SLOTS, "cache_len": T,
               "stop": STOP, "max_new": MAX_NEW, "extends": list(EXTENDS), "cases": cases,
               "long_cases": long_cases},
              open(os.path.join(out, "greedy.json"), "w"), indent=0)
    print(f"generate: {len(cases)} prompts, {len(long_cases)} long ones, "
          f"{sum(len(c['tokens']) for c in cases + long_cases)} tokens", file=sys.stderr)


def write_extends(out, pspec, entry_spec):
    """extend_C.exported for each chunk C, the entry donated."""
    i32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.int32)
    for c in EXTENDS:
        exp = export.export(jax.jit(extend, donate_argnums=1))(pspec, entry_spec, i32(1, c), i32(),
                                                                 i32())
        open(os.path.join(out, f"extend_{c}.exported"), "wb").write(exp.serialize())


if __name__ == "__main__":
    arg = sys.argv[2] if len(sys.argv) > 2 else None
    main(sys.argv[1] if len(sys.argv) > 1 else "generate",
         arg if arg in (None, "bench") else int(arg))
