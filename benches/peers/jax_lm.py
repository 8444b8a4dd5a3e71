"""The exported transformer (tests/data/exported/serve) as the Python servers that users pick
instead of ours run it: jax.export.deserialize, the weights from transformer.args.npz, one
jitted call a request, padded to the export's 16 rows as our batcher pads. scripts/peers serves
it with KServe's and MLServer's Python servers."""
import os

import jax
import numpy as np
from jax import export

BATCH = 16
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/data/exported/serve")


class TransformerLM:
    def __init__(self):
        with open(os.path.join(DATA, "transformer.exported"), "rb") as f:
            exp = export.deserialize(f.read())
        args = np.load(os.path.join(DATA, "transformer.args.npz"))
        # The arguments by dotted path, in the export's flattened order: weights, then tokens.
        leaves = [args[k] for k in args.files]
        (params, _), _ = jax.tree_util.tree_unflatten(exp.in_tree, leaves)
        self.params = jax.device_put(params)
        self.call = jax.jit(exp.call)
        self.predict(np.zeros((1, 8), np.int32))

    def predict(self, tokens):
        rows = tokens.shape[0]
        padded = np.zeros((BATCH, tokens.shape[1]), np.int32)
        padded[:rows] = tokens
        return np.asarray(self.call(self.params, {"tokens": padded}))[:rows]
