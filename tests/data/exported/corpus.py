"""A corpus of model-like functions exported with jax.export (scripts/jax-exported-data): for
each, NAME.exported (`Exported.serialize()`; NAME.jax0112.exported the same written by jax 0.11.2's
serializer where it is given and can write it), NAME.args.npz (its inputs, named by the dotted
pytree path the weight loader matches) and NAME.want.npz (JAX's outputs of the deserialized
artifact, out0, out1, ...), and one line of corpus.json."""
import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import export, lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

f32, i32 = jnp.float32, jnp.int32
S = jax.ShapeDtypeStruct
VOCAB, D, HEADS, SEQ = 11, 16, 2, 6


def spec(*shape, dtype=f32, sharding=None):
    return S(shape, dtype, sharding=sharding)


# ---- building blocks ----------------------------------------------------------------------

def layer_norm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def rms_norm(x, g):
    return x * lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g


def attention(x, p, causal=True, rotary=False):
    t, d = x.shape[-2], x.shape[-1]
    split = lambda y: y.reshape(*y.shape[:-1], HEADS, d // HEADS).swapaxes(-2, -3)
    q, k, v = split(x @ p["wq"]), split(x @ p["wk"]), split(x @ p["wv"])
    if rotary:
        half = d // HEADS // 2
        freq = 1.0 / (10000 ** (jnp.arange(half) / half))
        ang = jnp.arange(t)[:, None] * freq[None, :]
        cos, sin = jnp.cos(ang), jnp.sin(ang)
        rot = lambda y: jnp.concatenate(
            [y[..., :half] * cos - y[..., half:] * sin, y[..., :half] * sin + y[..., half:] * cos], -1)
        q, k = rot(q), rot(k)
    s = q @ k.swapaxes(-1, -2) / np.sqrt(d // HEADS)
    if causal:
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
    o = jax.nn.softmax(s, -1) @ v
    return o.swapaxes(-2, -3).reshape(*x.shape) @ p["wo"]


def block_params(mlp=32):
    a = {k: spec(D, D) for k in ("wq", "wk", "wv", "wo")}
    return {"attn": a, "ln1": {"g": spec(D), "b": spec(D)}, "ln2": {"g": spec(D), "b": spec(D)},
            "mlp": {"w1": spec(D, mlp), "w2": spec(mlp, D)}}


def transformer_block(p, x):
    x = x + attention(layer_norm(x, p["ln1"]["g"], p["ln1"]["b"]), p["attn"])
    h = jax.nn.gelu(layer_norm(x, p["ln2"]["g"], p["ln2"]["b"]) @ p["mlp"]["w1"])
    return x + h @ p["mlp"]["w2"]


def llama_block(p, x):
    x = x + attention(rms_norm(x, p["n1"]), p["attn"], rotary=True)
    h = rms_norm(x, p["n2"])
    return x + (jax.nn.silu(h @ p["gate"]) * (h @ p["up"])) @ p["down"]


def llama_params():
    return {"attn": {k: spec(D, D) for k in ("wq", "wk", "wv", "wo")}, "n1": spec(D),
            "n2": spec(D), "gate": spec(D, 24), "up": spec(D, 24), "down": spec(24, D)}


def gpt_params():
    return {"wte": spec(VOCAB, D), "wpe": spec(SEQ, D), "blocks": [block_params(), block_params()],
            "lnf": {"g": spec(D), "b": spec(D)}}


def gpt_forward(p, tokens):
    x = p["wte"][tokens] + p["wpe"][: tokens.shape[-1]]
    for b in p["blocks"]:
        x = transformer_block(b, x)
    return layer_norm(x, p["lnf"]["g"], p["lnf"]["b"]) @ p["wte"].T


def gpt_loss(p, tokens, targets):
    logp = jax.nn.log_softmax(gpt_forward(p, tokens), -1)
    return -jnp.take_along_axis(logp, targets[..., None], -1).mean()


def gpt_train_step(p, tokens, targets):
    loss, g = jax.value_and_grad(gpt_loss)(p, tokens, targets)
    return jax.tree_util.tree_map(lambda w, d: w - 0.1 * d, p, g), loss


def conv_net(p, img):  # NHWC
    dn = ("NHWC", "HWIO", "NHWC")
    h = jax.nn.relu(lax.conv_general_dilated(img, p["c1"], (1, 1), "SAME", dimension_numbers=dn))
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = jax.nn.relu(lax.conv_general_dilated(h, p["c2"], (1, 1), "VALID", dimension_numbers=dn))
    return h.mean((1, 2)) @ p["fc"]


def conv1d(x, w):  # NWC
    return lax.conv_general_dilated(x, w, (2,), [(1, 1)], dimension_numbers=("NWC", "WIO", "NWC"))


def rnn_scan(p, xs):
    def step(h, x):
        h = jnp.tanh(x @ p["wx"] + h @ p["wh"])
        return h, h.sum()
    return lax.scan(step, jnp.zeros(p["wh"].shape[0]), xs)


def cumulative(x):
    return lax.associative_scan(jnp.add, x), jnp.cumprod(1 + x / 10, axis=0)


def newton_sqrt(x):
    def body(c):
        i, y = c
        return i + 1, 0.5 * (y + x / y)
    return lax.while_loop(lambda c: c[0] < 20, body, (0, x + 1.0))[1]


def sample_tokens(key, logits):
    return jax.random.categorical(key, logits, axis=-1)


def random_init(key):
    k1, k2 = jax.random.split(key)
    return jax.random.normal(k1, (4, 3)), jax.random.uniform(k2, (5,)), jax.random.bits(k2, (3,))


def dropout(key, x):
    keep = jax.random.bernoulli(key, 0.7, x.shape)
    return jnp.where(keep, x / 0.7, 0)


def split_keys(key):
    return jax.random.split(key, 3)


def spd(a):
    return a @ a.T + a.shape[0] * jnp.eye(a.shape[0])


def cholesky_solve(a, b):
    return jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(spd(a)), b)


def lu_solve(a, b):
    return jnp.linalg.solve(a + 4 * jnp.eye(a.shape[0]), b), jnp.linalg.det(a + 4 * jnp.eye(4))


def qr_reconstruct(a):
    q, r = jnp.linalg.qr(a)
    return q @ r, jnp.abs(jnp.diag(r))


def eigh_values(a):
    return jnp.linalg.eigh(spd(a))[0]


def singular_values(a):
    return jnp.linalg.svd(a, compute_uv=False)


def mse(p, x, y):
    return ((jnp.tanh(x @ p["w"] + p["b"]) - y) ** 2).mean()


def mse_grad(p, x, y):
    return jax.grad(mse)(p, x, y)


def embedding_grad(table, ids, upstream):
    # The gradient of a lookup needs the ids and the upstream values, not the table's values:
    # JAX drops the table from the module (module_kept_var_idx).
    return jax.grad(lambda t: (t[ids] * upstream).sum())(table)


def per_example_grads(p, x, y):
    return jax.vmap(lambda xi, yi: jax.grad(mse)(p, xi[None], yi[None]))(x, y)


def batched_matvec(m, v):
    return jax.vmap(jnp.dot)(m, v)


def softmax_stats(x):
    return jax.nn.softmax(x, -1), jax.nn.logsumexp(x, -1)


def top_k(x):
    v, i = lax.top_k(x, 3)
    return v, i, jnp.sort(x, -1), jnp.argmax(x, -1)


def masked_mean(x, mask):
    return jnp.where(mask, x, 0).sum(-1) / jnp.maximum(mask.sum(-1), 1), mask.any(-1)


def einsum_heads(q, k):
    return jnp.einsum("bhqd,bhkd->bhqk", q, k)


def branch(x, which):
    return lax.cond(which > 0, lambda y: jnp.sin(y), lambda y: jnp.cos(y) * 2, x)


def segment_sum(x, ids):
    return jax.ops.segment_sum(x, ids, num_segments=4), jnp.take_along_axis(x, ids[:, None] % 3, 1)


def mixed_precision(x, w):
    y = x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)
    return y.astype(f32), (x.astype(jnp.float16) * 2).astype(f32)


def int8_matmul(q, w, scale):
    acc = lax.dot(q.astype(i32), w.astype(i32), preferred_element_type=i32)
    return acc.astype(f32) * scale, acc


def fft_power(x):
    return jnp.abs(jnp.fft.rfft(x, axis=-1)) ** 2


def unused_arg(a, b, c):
    return a * 2 + c


def two_platforms(x):
    return jnp.tanh(x) @ x.T


mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))
M = lambda *s: NamedSharding(mesh, P(*s))
mesh4 = Mesh(np.array(jax.devices()[:4]), ("batch",))


def dp_mlp(p, x):
    return jax.nn.relu(x @ p["w1"]) @ p["w2"]


def tp_block(x, w1, w2):
    return jax.nn.gelu(x @ w1) @ w2


# name: (function, argument specs, export keyword arguments, jit keyword arguments)
def cases():
    dp = NamedSharding(mesh4, P("batch"))
    rep = NamedSharding(mesh4, P())
    return {
        "transformer_block": (transformer_block, (block_params(), spec(2, SEQ, D)), {}, {}),
        "llama_block": (llama_block, (llama_params(), spec(2, SEQ, D)), {}, {}),
        "gpt_forward": (gpt_forward, (gpt_params(), spec(2, SEQ, dtype=i32)), {}, {}),
        "gpt_train_step": (gpt_train_step, (gpt_params(), spec(2, SEQ, dtype=i32),
                                            spec(2, SEQ, dtype=i32)), {}, {}),
        "conv_net": (conv_net, ({"c1": spec(3, 3, 3, 8), "c2": spec(3, 3, 8, 8),
                                 "fc": spec(8, 5)}, spec(2, 12, 12, 3)), {}, {}),
        "conv1d": (conv1d, (spec(2, 16, 3), spec(3, 3, 4)), {}, {}),
        "rnn_scan": (rnn_scan, ({"wx": spec(4, 8), "wh": spec(8, 8)}, spec(7, 4)), {}, {}),
        "cumulative": (cumulative, (spec(9, 3),), {}, {}),
        "newton_sqrt": (newton_sqrt, (spec(5),), {}, {}),
        "sample_tokens": (sample_tokens, (jax.random.key(0), spec(4, VOCAB)), {}, {}),
        "random_init": (random_init, (jax.random.key(0),), {}, {}),
        "dropout": (dropout, (jax.random.PRNGKey(0), spec(3, 5)), {}, {}),
        "split_keys": (split_keys, (jax.random.key(0),), {}, {}),
        "cholesky_solve": (cholesky_solve, (spec(4, 4), spec(4, 2)), {}, {}),
        "lu_solve": (lu_solve, (spec(4, 4), spec(4, 3)), {}, {}),
        "qr": (qr_reconstruct, (spec(5, 3),), {}, {}),
        "eigh": (eigh_values, (spec(4, 4),), {}, {}),
        "svd": (singular_values, (spec(5, 3),), {}, {}),
        "mse_grad": (mse_grad, ({"w": spec(4, 3), "b": spec(3)}, spec(6, 4), spec(6, 3)), {}, {}),
        "embedding_grad": (embedding_grad, (spec(VOCAB, 4), spec(5, dtype=i32), spec(5, 4)), {}, {}),
        "per_example_grads": (per_example_grads, ({"w": spec(4, 3), "b": spec(3)}, spec(5, 4),
                                                  spec(5, 3)), {}, {}),
        "batched_matvec": (batched_matvec, (spec(3, 4, 5), spec(3, 5)), {}, {}),
        "softmax_stats": (softmax_stats, (spec(3, 7),), {}, {}),
        "top_k": (top_k, (spec(3, 6),), {}, {}),
        "masked_mean": (masked_mean, (spec(3, 5), spec(3, 5, dtype=bool)), {}, {}),
        "einsum_heads": (einsum_heads, (spec(2, 2, 3, 4), spec(2, 2, 5, 4)), {}, {}),
        "branch": (branch, (spec(4), spec(dtype=i32)), {}, {}),
        "segment_sum": (segment_sum, (spec(6, 3), spec(6, dtype=i32)), {}, {}),
        "mixed_precision": (mixed_precision, (spec(3, 8), spec(8, 2)), {}, {}),
        "int8_matmul": (int8_matmul, (spec(3, 8, dtype=jnp.int8), spec(8, 2, dtype=jnp.int8),
                                      spec(dtype=f32)), {}, {}),
        "fft_power": (fft_power, (spec(2, 16),), {}, {}),
        "unused_arg": (unused_arg, (spec(3), spec(5), spec(3)), {}, {}),
        "two_platforms": (two_platforms, (spec(3, 4),), {"platforms": ("cpu", "cuda")}, {}),
        "dp_mlp": (dp_mlp, ({"w1": spec(6, 8, sharding=rep), "w2": spec(8, 3, sharding=rep)},
                            spec(8, 6, sharding=dp)), {},
                   {"in_shardings": ({"w1": rep, "w2": rep}, dp), "out_shardings": dp}),
        "tp_block": (tp_block, (spec(4, 6, sharding=M("data", None)),
                                spec(6, 8, sharding=M(None, "model")),
                                spec(8, 6, sharding=M("model", None))), {},
                     {"in_shardings": (M("data", None), M(None, "model"), M("model", None)),
                      "out_shardings": M("data", None)}),
    }


def make_input(a, k, path):
    """Deterministic inputs: valid token ids, a mix of mask values, small floats."""
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
        return jax.random.key(k)
    n = int(np.prod(a.shape))
    if a.dtype == jnp.bool_:
        return (np.arange(n) % 3 != 1).reshape(a.shape)
    if jnp.issubdtype(a.dtype, jnp.integer):  # token ids below VOCAB; int8 in [-2, 2]
        low, top = (-2, 5) if a.dtype == jnp.int8 else (0, VOCAB)
        return ((np.arange(n) * 7 + 3 * k) % top + low).astype(a.dtype).reshape(a.shape)
    if a.shape == ():
        return np.asarray(0.5 + k, a.dtype)
    return (np.sin(0.7 * np.arange(n) + 1.3 * k) / 2).astype(a.dtype).reshape(a.shape)


def host(v):
    v = jax.random.key_data(v) if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key) else v
    return np.asarray(v)


def dotted(path):
    return ".".join(s.strip("'") for s in path.replace("]", "[").split("[") if s)


def main(out, serializer_0112=None):
    os.makedirs(out, exist_ok=True)
    s12 = None
    if serializer_0112:  # jax 0.11.2's serializer (scripts/jax-exported-data explains)
        sys.path.insert(0, serializer_0112)
        import serialization_0112 as s12
    manifest = {"jax": jax.__version__, "cases": []}
    for name, (fn, args, exp_kw, jit_kw) in cases().items():
        exp = export.export(jax.jit(fn, **jit_kw), **exp_kw)(*args)
        blob = exp.serialize()
        open(os.path.join(out, f"{name}.exported"), "wb").write(blob)
        serializers = ["0.10.2"]
        # 0.11.2's serializer maps PRNG key dtypes by 0.11's own key objects, not 0.10's.
        has_key = any(jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
                      for a in (*exp.in_avals, *exp.out_avals))
        if s12 is not None and not has_key:
            open(os.path.join(out, f"{name}.jax0112.exported"), "wb").write(s12.serialize(exp))
            serializers.append("0.11.2")
        back = export.deserialize(blob)
        leaves = jax.tree_util.tree_flatten_with_path(
            jax.tree_util.tree_unflatten(back.in_tree, list(range(back.in_tree.num_leaves))))[0]
        paths = [jax.tree_util.keystr(p) for p, _ in leaves]
        flat = [make_input(a, k, p) for k, (a, p) in enumerate(zip(back.in_avals, paths))]
        if back.nr_devices > 1:
            flat = [jax.device_put(x, s) for x, s in zip(flat, back.in_shardings_jax(
                mesh if name == "tp_block" else mesh4))]
        call_args = jax.tree_util.tree_unflatten(back.in_tree, flat)[0]
        outs = jax.tree_util.tree_leaves(jax.jit(back.call)(*call_args))
        np.savez(os.path.join(out, f"{name}.args.npz"),
                 **{dotted(p): host(x) for p, x in zip(paths, flat)})
        np.savez(os.path.join(out, f"{name}.want.npz"),
                 **{f"out{k}": host(v) for k, v in enumerate(outs)})
        manifest["cases"].append({
            "name": name, "inputs": len(flat), "outputs": len(outs),
            "nr_devices": back.nr_devices, "platforms": list(back.platforms),
            "kept": list(back.module_kept_var_idx),
            "serializers": serializers})
    # Ordered effects: JAX refuses to export the one public primitive that has them (a host
    # callback), so no artifact with effect tokens can be made from the public API.
    try:
        export.export(jax.jit(lambda x: jax.debug.print("{}", x, ordered=True) or x))(spec(2))
        manifest["ordered_effects"] = "exported"
    except Exception as e:  # noqa: BLE001
        manifest["ordered_effects"] = f"refused by jax: {type(e).__name__}: {str(e)[:200]}"
    json.dump(manifest, open(os.path.join(out, "corpus.json"), "w"), indent=1)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    main(os.path.join(here, sys.argv[1] if len(sys.argv) > 1 else "corpus"),
         sys.argv[2] if len(sys.argv) > 2 else None)
