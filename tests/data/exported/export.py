"""Serialized jax.export artifacts (`Exported.serialize()`) and what JAX itself reads back from
each (scripts/jax-exported-data): the reader's test compares its fields with these."""
import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import export  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

f32 = jnp.float32


def mlp(params, x):
    h = jax.nn.relu(x @ params["layer0"]["w"] + params["layer0"]["b"])
    return {"logits": h @ params["layer1"]["w"], "hidden": h}


def unused(a, b, c):
    return a * 2 + c


def two_platforms(x):
    return jnp.sin(x) * 2


def poly(x):
    return jnp.sum(x, axis=0), x * 2


mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))


def sharded(x, w):
    return x @ w


def main(out):
    spec = lambda *s: jax.ShapeDtypeStruct(s, f32)
    params = {"layer0": {"w": spec(8, 16), "b": spec(16)}, "layer1": {"w": spec(16, 4)}}
    cases = {
        "mlp": export.export(jax.jit(mlp))(params, spec(2, 8)),
        "unused_arg": export.export(jax.jit(unused))(spec(3), spec(5), spec(3)),
        "two_platforms": export.export(jax.jit(two_platforms), platforms=("cpu", "cuda"))(spec(4)),
        "poly": export.export(jax.jit(poly))(
            jax.ShapeDtypeStruct(export.symbolic_shape("b, 3"), f32)),
        "sharded": export.export(jax.jit(
            sharded,
            in_shardings=(NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P(None, "model"))),
            out_shardings=NamedSharding(mesh, P("data", "model"))))(
                jax.ShapeDtypeStruct((8, 6), f32, sharding=NamedSharding(mesh, P("data", None))),
                jax.ShapeDtypeStruct((6, 4), f32, sharding=NamedSharding(mesh, P(None, "model")))),
    }
    manifest = {"jax": jax.__version__, "cases": []}
    for name, exp in cases.items():
        open(os.path.join(out, f"{name}.exported"), "wb").write(exp.serialize())
        # JAX's own call of the artifact, read back, on arguments of its input types (not for
        # the shape-polymorphic one, which is refused, not run).
        files = {"inputs": [], "outputs": []}
        if name != "poly":
            back = export.deserialize(exp.serialize())
            args = [(np.sin(0.7 * np.arange(int(np.prod(a.shape))) + 1.3 * k) / 4)
                    .astype(np.float32).reshape(a.shape) for k, a in enumerate(back.in_avals)]
            placed = args
            if back.nr_devices > 1:  # on the real mesh, as the export's shardings say
                placed = [jax.device_put(a, NamedSharding(mesh, s.spec))
                          for a, s in zip(args, exp._in_named_shardings)]
            call_args = jax.tree_util.tree_unflatten(back.in_tree, placed)[0]
            flat_out = jax.tree_util.tree_leaves(jax.jit(back.call)(*call_args))
            for kind, values in (("inputs", args), ("outputs", flat_out)):
                for k, v in enumerate(values):
                    path = f"{name}.{kind[:-1]}{k}.npy"
                    np.save(os.path.join(out, path), np.asarray(v))
                    files[kind].append(path)
        paths = lambda tree: [jax.tree_util.keystr(p) for p, _ in
                              jax.tree_util.tree_flatten_with_path(
                                  jax.tree_util.tree_unflatten(tree, [0] * tree.num_leaves))[0]]
        shard = lambda s: None if s is None else {
            "mesh": [[n, int(z)] for n, z in s.mesh.shape.items()],
            "spec": [[] if e is None else ([e] if isinstance(e, str) else list(e)) for e in s.spec]}
        manifest["cases"].append({
            "name": name,
            "function_name": exp.fun_name,
            "in_paths": paths(exp.in_tree),
            "out_paths": paths(exp.out_tree),
            "in_avals": [[str(d) for d in a.shape] + [str(a.dtype)] for a in exp.in_avals],
            "out_avals": [[str(d) for d in a.shape] + [str(a.dtype)] for a in exp.out_avals],
            "platforms": list(exp.platforms),
            "nr_devices": exp.nr_devices,
            "calling_convention_version": exp.calling_convention_version,
            "module_kept_var_idx": list(exp.module_kept_var_idx),
            "uses_global_constants": exp.uses_global_constants,
            "in_shardings": [shard(s) for s in exp._in_named_shardings],
            "module_bytes": len(exp.mlir_module_serialized),
            **files,
        })
    json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)
    # Weights for the loader's tests: the MLP's parameters by their dotted paths, and the
    # sharded export's second argument by a suffix of its path.
    load = lambda name: np.load(os.path.join(out, name))
    write_safetensors(os.path.join(out, "mlp.safetensors"), {
        "layer0.b": load("mlp.input0.npy"), "layer0.w": load("mlp.input1.npy"),
        "layer1.w": load("mlp.input2.npy")})
    write_safetensors(os.path.join(out, "sharded.safetensors"), {"1": load("sharded.input1.npy")})
    mlp_weights = {"layer0.b": load("mlp.input0.npy"), "layer0.w": load("mlp.input1.npy"),
                   "layer1.w": load("mlp.input2.npy")}
    np.savez(os.path.join(out, "mlp.npz"), **mlp_weights)
    np.savez_compressed(os.path.join(out, "mlp_compressed.npz"), **mlp_weights)


def write_safetensors(path, tensors):
    """The safetensors format by hand (8-byte header size, JSON header, the data)."""
    header, data = {}, b""
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(len(text).to_bytes(8, "little") + text + data)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
