"""jax 0.12's own exports of corpus.py's functions (scripts/jax-exported-data runs this in
jax 0.12.0.1's venv, Python 3.12): for each, NAME.jax012.exported (`Exported.serialize()` of
jax 0.12's export: its own lowering, StableHLO and serializer) and NAME.jax012.want.npz (jax
0.12's outputs of the deserialized artifact on corpus.py's inputs, which NAME.args.npz holds);
corpus_jax012.json lists them with the StableHLO version jax targeted, and what jax refused."""
import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax import export  # noqa: E402
from jaxlib.mlir.dialects import stablehlo as shlo  # noqa: E402

import corpus  # noqa: E402  (the functions, their inputs and the sharding meshes)


def main(out):
    manifest = {"jax": jax.__version__, "cases": [], "refused": {}}
    for name, (fn, args, exp_kw, jit_kw) in corpus.cases().items():
        try:
            exp = export.export(jax.jit(fn, **jit_kw), **exp_kw)(*args)
            blob = exp.serialize()
        except Exception as e:  # noqa: BLE001
            manifest["refused"][name] = f"{type(e).__name__}: {str(e)[:200]}"
            continue
        open(os.path.join(out, f"{name}.jax012.exported"), "wb").write(blob)
        back = export.deserialize(blob)
        leaves = jax.tree_util.tree_flatten_with_path(
            jax.tree_util.tree_unflatten(back.in_tree, list(range(back.in_tree.num_leaves))))[0]
        paths = [jax.tree_util.keystr(p) for p, _ in leaves]
        flat = [corpus.make_input(a, k, p) for k, (a, p) in enumerate(zip(back.in_avals, paths))]
        if back.nr_devices > 1:
            flat = [jax.device_put(x, s) for x, s in zip(flat, back.in_shardings_jax(
                corpus.mesh if name == "tp_block" else corpus.mesh4))]
        call_args = jax.tree_util.tree_unflatten(back.in_tree, flat)[0]
        outs = jax.tree_util.tree_leaves(jax.jit(back.call)(*call_args))
        # The inputs are corpus.py's: the same values NAME.args.npz holds.
        args_npz = np.load(os.path.join(out, f"{name}.args.npz"))
        for p, x in zip(paths, flat):
            assert np.array_equal(args_npz[corpus.dotted(p)], corpus.host(x)), (name, p)
        np.savez(os.path.join(out, f"{name}.jax012.want.npz"),
                 **{f"out{k}": corpus.host(v) for k, v in enumerate(outs)})
        manifest["cases"].append({"name": name, "inputs": len(flat), "outputs": len(outs)})
    # The StableHLO version jax 0.12 writes its artifacts for: its 12-week compatibility window.
    manifest["stablehlo_target"] = shlo.get_version_from_compatibility_requirement(
        shlo.StablehloCompatibilityRequirement.WEEK_12)
    json.dump(manifest, open(os.path.join(out, "corpus_jax012.json"), "w"), indent=1)
    print(f"{len(manifest['cases'])} exported by jax {jax.__version__}, "
          f"{len(manifest['refused'])} refused", file=sys.stderr)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    main(os.path.join(here, sys.argv[1] if len(sys.argv) > 1 else "corpus"))
