"""An SPMD program exported with `donate_argnums` over a 4-device CPU mesh (scripts/jax-spmd-data):
`step(cache, x) = cache * 0.5 + x`, both split by rows, the cache donated so its shards back the
output's (each parameter marked `tf.aliasing_output`). Written as text with its global inputs
and JAX's output: donated_step.mlir, donated_step.in{0,1}.npy, donated_step.out0.npy."""
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402


def step(cache, x):
    return cache * 0.5 + x


def main(out):
    mesh = Mesh(np.array(jax.devices()[:4]), ("d",))
    rows = NamedSharding(mesh, P("d"))
    jitted = jax.jit(step, in_shardings=(rows, rows), out_shardings=rows, donate_argnums=0)
    spec = jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=rows)
    exp = jax.export.export(jitted)(spec, spec)
    text = exp.mlir_module()
    assert "tf.aliasing_output" in text, "the export marks no donated parameter"
    open(os.path.join(out, "donated_step.mlir"), "w").write(text)
    cache = (np.arange(128, dtype=np.float32).reshape(16, 8) / 8).astype(np.float32)
    x = np.cos(np.arange(128, dtype=np.float32)).reshape(16, 8).astype(np.float32)
    np.save(os.path.join(out, "donated_step.in0.npy"), cache)
    np.save(os.path.join(out, "donated_step.in1.npy"), x)
    result = jitted(jax.device_put(cache, rows), jax.device_put(x, rows))
    np.save(os.path.join(out, "donated_step.out0.npy"), np.asarray(result))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
