"""Valid artifacts whose inputs no machine holds (scripts/jax-exported-data): a sum over
f32[2^38] (1 TiB), and a function that drops its f32[2^40] argument. Exporting allocates
nothing; `bench` must not try to make their zeros."""
import os
import sys

import jax
import jax.numpy as jnp
from jax import export

f32 = jnp.float32
S = jax.ShapeDtypeStruct


def main(out):
    cases = {
        "huge_input": export.export(jax.jit(lambda x: jnp.sum(x)))(S((2 ** 38,), f32)),
        "huge_unused": export.export(jax.jit(lambda x, y: x * 2))(S((4,), f32), S((2 ** 40,), f32)),
    }
    for name, exp in cases.items():
        open(os.path.join(out, f"{name}.exported"), "wb").write(exp.serialize())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
