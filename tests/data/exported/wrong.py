"""Artifacts with one field of `Exported` wrong in turn (scripts/jax-exported-data), written by
JAX's own serializer from a good export with that field replaced, so the flatbuffer is well
formed and only the field lies. wrong.json lists each: the field, what it says, the base.
With the 0.11.2 serializer given (argv[2]), also the versions it writes (12) and one past."""
import dataclasses
import importlib
import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import export  # noqa: E402
from jax._src import core, effects  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

f32 = jnp.float32
S = jax.ShapeDtypeStruct
A = core.ShapedArray


class LoggingEffect(effects.Effect):
    """An effect with a nullary constructor, as the serializer requires."""
    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


def mlp(params, x):
    return jax.nn.relu(x @ params["w"] + params["b"])


def unused(a, b, c):
    return a * 2 + c


def main(out, serializer_0112=None):
    os.makedirs(out, exist_ok=True)
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))
    small = Mesh(np.array(jax.devices()[:2]), ("data",))
    ns = lambda m, *s: NamedSharding(m, P(*s))
    base = {
        "mlp": export.export(jax.jit(mlp))({"w": S((8, 4), f32), "b": S((4,), f32)}, S((2, 8), f32)),
        "unused": export.export(jax.jit(unused))(S((3,), f32), S((5,), f32), S((3,), f32)),
        "sharded": export.export(jax.jit(
            lambda x: x * 2, in_shardings=ns(mesh, "data", "model"),
            out_shardings=ns(mesh, "data", "model")))(S((4, 4), f32)),
    }
    m, u, sh = base["mlp"], base["unused"], base["sharded"]
    tree2 = jax.tree_util.tree_structure(((1, 2), {}))
    out_tree2 = jax.tree_util.tree_structure((1, 2))
    bytecode = m.mlir_module_serialized
    cases = {
        # field: (base, replacement, what it says)
        "in_tree": ("mlp", dict(in_tree=tree2), "a tree of 2 leaves for 3 avals"),
        "in_avals_shape": ("mlp", dict(in_avals=(m.in_avals[0], A((4, 8), f32), *m.in_avals[2:])),
                           "w as f32[4,8]; the module takes f32[8,4]"),
        "in_avals_dtype": ("mlp", dict(in_avals=(*m.in_avals[:2], A((2, 8), jnp.int32))),
                           "x as s32; the module takes f32"),
        "out_tree": ("mlp", dict(out_tree=out_tree2), "two results for one aval"),
        "out_avals": ("mlp", dict(out_avals=(A((2, 8), f32),)), "the result as f32[2,8]"),
        "in_shardings_mesh": ("sharded", dict(_in_named_shardings=(ns(small, "data"),)),
                              "an input on a 2-device mesh; the export is for 4"),
        "in_shardings_axis": ("sharded", dict(_in_named_shardings=(ns(mesh, "data", None, "model"),)),
                              "an input split over 3 dims of a 2-d array"),
        "out_shardings_count": ("sharded", dict(_out_named_shardings=(None, None)),
                                "two output shardings for one output"),
        "nr_devices_more": ("sharded", dict(nr_devices=8, _in_named_shardings=(None,),
                                            _out_named_shardings=(None,)),
                            "8 devices; the client has 4"),
        "nr_devices_less": ("sharded", dict(nr_devices=2, _in_named_shardings=(None,),
                                            _out_named_shardings=(None,)),
                            "2 devices for a module partitioned 4 ways"),
        "platforms_other": ("mlp", dict(platforms=("tpu",)), "exported for TPU only"),
        "platforms_none": ("mlp", dict(platforms=()), "no platform"),
        "platforms_extra": ("mlp", dict(platforms=("cpu", "cuda")),
                            "two platforms for a module with no platform index"),
        "ordered_effects": ("mlp", dict(ordered_effects=(LoggingEffect(),)), "an ordered effect"),
        "module_garbage": ("mlp", dict(mlir_module_serialized=b"not bytecode at all"),
                           "a module that is not MLIR bytecode"),
        "module_cut": ("mlp", dict(mlir_module_serialized=bytecode[: len(bytecode) // 2]),
                       "half a module"),
        "calling_convention_old": ("mlp", dict(calling_convention_version=8), "version 8"),
        "calling_convention_new": ("mlp", dict(calling_convention_version=11), "version 11"),
        "kept_out_of_range": ("unused", dict(module_kept_var_idx=(0, 5)), "keeps argument 5 of 3"),
        "kept_wrong": ("unused", dict(module_kept_var_idx=(0, 1)),
                       "keeps b (f32[5]) where the module takes f32[3]"),
        "kept_out_of_order": ("unused", dict(module_kept_var_idx=(2, 0)),
                              "keeps c before a, which the module cannot say"),
        "uses_global_constants": ("mlp", dict(uses_global_constants=True),
                                  "needs shape refinement"),
        # Not wrong: JAX runs these, and so must we.
        "ok_unordered_effects": ("mlp", dict(unordered_effects=(LoggingEffect(),)),
                                 "an unordered effect, which needs no token"),
        "ok_platform_check_disabled": ("mlp", dict(
            platforms=("tpu",), disabled_safety_checks=(export.DisabledSafetyCheck.platform(),)),
            "exported for TPU with the platform check disabled"),
    }
    listing = []
    for name, (b, replace, says) in cases.items():
        exp = dataclasses.replace(base[b], **replace)
        open(os.path.join(out, f"{name}.exported"), "wb").write(exp.serialize())
        listing.append({"name": name, "base": b, "says": says})
    if serializer_0112:
        # jax 0.11.2's serializer (scripts/jax-exported-data fetches it): its version, 12, and
        # the next one, which this reader has not seen.
        sys.path.insert(0, serializer_0112)
        s12 = importlib.import_module("serialization_0112")
        for name, version in (("version_12", 12), ("version_13", 13)):
            s12._SERIALIZATION_VERSION = version
            open(os.path.join(out, f"{name}.exported"), "wb").write(s12.serialize(m))
            listing.append({"name": name, "base": "mlp",
                            "says": f"serialization version {version}, by jax 0.11.2's serializer"})
        s12._SERIALIZATION_VERSION = 12
    json.dump({"jax": jax.__version__, "cases": listing}, open(os.path.join(out, "wrong.json"), "w"),
              indent=1)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    main(os.path.join(here, "wrong"), sys.argv[1] if len(sys.argv) > 1 else None)
