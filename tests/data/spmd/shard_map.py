"""Each collective as a user exports it: `jax.jit` of a `shard_map` over a 4-device mesh, no
shardings given to `jit` (scripts/jax-spmd-data, once per jax version). Written as the artifact
`jax.export` serializes (`NAME.jaxVER.exported`) and its module's bytecode (`.mlirbc`), with
the global inputs and JAX's outputs; shard_map.VER.json lists them."""
import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

line = Mesh(np.array(jax.devices()[:4]), ("d",))
tag = "jax" + jax.__version__.replace(".", "")

COLLECTIVES = {
    "psum": (lambda x: jax.lax.psum(x, "d"), P("d"), P()),
    "pmax": (lambda x: jax.lax.pmax(x, "d"), P("d"), P()),
    "pmean": (lambda x: jax.lax.pmean(x, "d"), P("d"), P()),
    "all_gather": (lambda x: jax.lax.all_gather(x, "d", tiled=True), P("d"), P()),
    "psum_scatter": (lambda x: jax.lax.psum_scatter(x, "d", tiled=True), P(), P("d")),
    "ppermute": (lambda x: jax.lax.ppermute(x, "d", [(i, (i + 1) % 4) for i in range(4)]),
                 P("d"), P("d")),
    "all_to_all": (lambda x: jax.lax.all_to_all(x, "d", split_axis=1, concat_axis=0, tiled=True),
                   P("d"), P("d")),
    "axis_index": (lambda x: x + jax.lax.axis_index("d").astype(jnp.float32), P("d"), P("d")),
}


def main(out):
    cases = []
    for name, (body, i, o) in COLLECTIVES.items():
        f = jax.jit(jax.shard_map(body, mesh=line, in_specs=i, out_specs=o, check_vma=False))
        x = (np.sin(0.7 * np.arange(32)) / 4).astype(np.float32).reshape(8, 4)
        exp = jax.export.export(f)(jax.ShapeDtypeStruct(x.shape, jnp.float32))
        stem = f"{name}.{tag}"
        open(os.path.join(out, f"{stem}.exported"), "wb").write(exp.serialize())
        open(os.path.join(out, f"{stem}.mlirbc"), "wb").write(exp.mlir_module_serialized)
        np.save(os.path.join(out, f"{name}.in0.npy"), x)
        np.save(os.path.join(out, f"{stem}.out0.npy"), np.asarray(f(x)))
        cases.append({"name": name, "exported": f"{stem}.exported", "bytecode": f"{stem}.mlirbc",
                      "input": f"{name}.in0.npy", "output": f"{stem}.out0.npy",
                      "nr_devices": exp.nr_devices})
    json.dump({"jax": jax.__version__, "cases": cases},
              open(os.path.join(out, f"shard_map.{jax.__version__}.json"), "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
