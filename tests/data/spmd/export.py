"""SPMD programs exported over a 4-device CPU mesh, with their global inputs, JAX's global
outputs and the shardings JAX gave each argument and result (scripts/jax-spmd-data). Each is
written as text (`Exported.mlir_module()`) and as the bytecode `jax.export` serializes."""
import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

devices = np.array(jax.devices()[:4])
line = Mesh(devices, ("d",))
square = Mesh(devices.reshape(2, 2), ("x", "y"))


def arg(k, shape):
    n = int(np.prod(shape))
    return (np.sin(0.7 * np.arange(n) + 1.3 * k) / 4).astype(np.float32).reshape(shape)


def dp_mlp(x, w1, w2, y):
    h = jax.nn.relu(x @ w1) @ w2
    return h, jnp.mean((h - y) ** 2)


def tp_mlp(x, w1, w2):
    return jax.nn.relu(x @ w1) @ w2


def partial_2x2(x, w):
    return jnp.tanh(x @ w)


def heads_attention(q, k, v):
    s = jnp.einsum("hqd,hkd->hqk", q, k) / 4.0
    return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(s, axis=-1), v)


def collective(body, in_spec, out_spec):
    return jax.shard_map(body, mesh=line, in_specs=in_spec, out_specs=out_spec, check_vma=False)


COLLECTIVES = {
    "all_reduce": (lambda x: jax.lax.psum(x, "d"), P("d"), P()),
    "all_gather": (lambda x: jax.lax.all_gather(x, "d", tiled=True), P("d"), P()),
    "reduce_scatter": (lambda x: jax.lax.psum_scatter(x, "d", tiled=True), P(), P("d")),
    "all_to_all": (
        lambda x: jax.lax.all_to_all(x, "d", split_axis=1, concat_axis=0, tiled=True),
        P("d"),
        P("d"),
    ),
    "collective_permute": (
        lambda x: jax.lax.ppermute(x, "d", [(i, (i + 1) % 4) for i in range(4)]),
        P("d"),
        P("d"),
    ),
    "axis_index": (
        lambda x: x + jax.lax.axis_index("d").astype(jnp.float32),
        P("d"),
        P("d"),
    ),
}

CASES = {
    "dp_mlp": (dp_mlp, line, [((16, 8), P("d")), ((8, 16), P()), ((16, 4), P()), ((16, 4), P("d"))],
               [P("d"), P()]),
    "tp_mlp": (tp_mlp, line, [((8, 16), P()), ((16, 32), P(None, "d")), ((32, 8), P("d", None))],
               [P()]),
    "partial_2x2": (partial_2x2, square, [((8, 6), P("x")), ((6, 4), P(None, "y"))], [P("x", "y")]),
    "heads_attention": (heads_attention, line, [((4, 8, 16), P("d"))] * 3, [P("d")]),
}
for name, (body, i, o) in COLLECTIVES.items():
    CASES[name] = (collective(body, i, o), line, [((8, 4), i)], [o])


# The `spmd` benchmark's programs: a data-parallel MLP over the 4-device mesh, and the same MLP
# on one device for a quarter of the batch. Their arguments are made by `bench_inputs` (and by
# the benchmark, from the same formula), so only the programs are written.
BENCH_BATCH, BENCH_WIDTH = 256, 256


def bench_mlp(x, w1, w2, w3):
    return jax.nn.relu(jax.nn.relu(x @ w1) @ w2) @ w3


def bench_shapes(batch):
    w = BENCH_WIDTH
    return [(batch, w), (w, w), (w, w), (w, 16)]


def bench_inputs(batch):
    return [arg(k, s) for k, s in enumerate(bench_shapes(batch))]


def export_bench(out):
    specs = [P("d")] + [P()] * 3
    ins = [NamedSharding(line, s) for s in specs]
    sharded = jax.jit(bench_mlp, in_shardings=ins, out_shardings=NamedSharding(line, P("d")))
    args = [jax.ShapeDtypeStruct(s, jnp.float32, sharding=sh)
            for s, sh in zip(bench_shapes(BENCH_BATCH), ins)]
    open(os.path.join(out, "bench_dp_mlp.mlir"), "w").write(
        jax.export.export(sharded)(*args).mlir_module())
    one = [jax.ShapeDtypeStruct(s, jnp.float32) for s in bench_shapes(BENCH_BATCH // 4)]
    open(os.path.join(out, "bench_mlp_quarter.mlir"), "w").write(
        jax.export.export(jax.jit(bench_mlp))(*one).mlir_module())


def spec_json(mesh, spec):
    return {
        "mesh": [[n, int(s)] for n, s in mesh.shape.items()],
        "mesh_devices": [int(d.id) for d in mesh.devices.flat],
        "spec": [[] if e is None else ([e] if isinstance(e, str) else list(e)) for e in spec],
    }


def main(out):
    manifest = {"jax": jax.__version__, "cases": []}
    for name, (fn, mesh, args, outs) in CASES.items():
        ins = [NamedSharding(mesh, s) for _, s in args]
        out_sh = tuple(NamedSharding(mesh, s) for s in outs)
        jitted = jax.jit(fn, in_shardings=ins, out_shardings=out_sh if len(outs) > 1 else out_sh[0])
        specs = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=sh)
                 for (shape, _), sh in zip(args, ins)]
        exp = jax.export.export(jitted)(*specs)
        open(os.path.join(out, f"{name}.mlir"), "w").write(exp.mlir_module())
        open(os.path.join(out, f"{name}.mlirbc"), "wb").write(exp.mlir_module_serialized)
        values = [jax.device_put(arg(k, shape), sh) for k, ((shape, _), sh) in enumerate(zip(args, ins))]
        results = jax.tree.leaves(jitted(*values))
        case = {"name": name, "program": f"{name}.mlir", "bytecode": f"{name}.mlirbc",
                "nr_devices": exp.nr_devices, "inputs": [], "outputs": []}
        for k, ((shape, spec), v) in enumerate(zip(args, values)):
            path = f"{name}.in{k}.npy"
            np.save(os.path.join(out, path), np.asarray(v))
            case["inputs"].append({"file": path, **spec_json(mesh, spec),
                                   "hlo_sharding": str(v.sharding._to_xla_hlo_sharding(len(shape)))})
        for k, (r, spec) in enumerate(zip(results, outs)):
            path = f"{name}.out{k}.npy"
            np.save(os.path.join(out, path), np.asarray(r))
            case["outputs"].append({"file": path, **spec_json(mesh, spec),
                                    "hlo_sharding": str(r.sharding._to_xla_hlo_sharding(r.ndim))})
        manifest["cases"].append(case)
    json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)
    export_bench(out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
