"""Exports JAX functions that cover every jaxlib LAPACK custom call (s, d, c, z; batched) with
jax.export, runs them in JAX, and writes the programs, inputs, JAX's outputs and a manifest
here. Run through scripts/jax-lapack-data, which pins jax in a venv of its own.

Each function returns two kinds of outputs: values unique up to rounding (compared with JAX's),
and residuals computed inside the program from results that are not unique (eigenvectors,
singular vectors, Schur and Hessenberg factors), which must be small on any correct kernel."""

import json
import os
import re
import sys

import jax
import jax._src.lax.linalg  # geqrf, which jax.lax.linalg does not re-export
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import export, lax

jax.config.update("jax_enable_x64", True)
HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261130)

DTYPES = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}
# Comparison tolerances (relative to the largest magnitude of the expected value) and residual
# bounds, per precision.
TOL = {"f32": (2e-4, 1e-5), "f64": (1e-10, 2e-14), "c64": (2e-4, 1e-5), "c128": (1e-10, 2e-14)}


def rand(shape, dt):
    x = rng.standard_normal(shape)
    if np.issubdtype(dt, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dt)


def adj(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def rel(a, b):
    """max over the batch of |a - b| / |b| (Frobenius)."""
    num = jnp.sqrt(jnp.sum(jnp.abs(a - b) ** 2, axis=(-2, -1)))
    den = jnp.sqrt(jnp.sum(jnp.abs(b) ** 2, axis=(-2, -1)))
    return jnp.max(num / jnp.maximum(den, 1e-30))


def unitary(q):
    k = q.shape[-1]
    return rel(adj(q) @ q, jnp.broadcast_to(jnp.eye(k, dtype=q.dtype), q.shape[:-2] + (k, k)))


def hermitian(shape, dt):
    a = rand(shape, dt)
    return ((a + np.conj(np.swapaxes(a, -1, -2))) / 2).astype(dt)


def spd(shape, dt):
    a = rand(shape, dt)
    n = shape[-1]
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dt)


def sort_complex(w):
    w = w.astype(jnp.result_type(w.dtype, jnp.complex64))
    return jnp.sort(w, axis=-1)


# name -> (function, input makers, how many leading outputs are compared)
def cases(dt):
    real = not np.issubdtype(dt, np.complexfloating)
    A54 = lambda: rand((2, 5, 4), dt)
    A45 = lambda: rand((3, 4, 5), dt)
    A44 = lambda: rand((2, 4, 4), dt)
    B43 = lambda: rand((2, 4, 3), dt)
    c = {}
    c["lu"] = (lambda a: lax.linalg.lu(a), [A54], 3)
    c["lu_wide"] = (lambda a: lax.linalg.lu(a), [A45], 3)
    c["solve"] = (lambda a, b: jnp.linalg.solve(a, b), [A44, B43], 1)
    c["solve_singular"] = (
        lambda a, b: jnp.linalg.solve(a, b),
        [lambda: np.array([[[1, 2, 3], [2, 4, 6], [0, 1, 1]]] * 2).astype(dt), lambda: rand((2, 3, 2), dt)],
        1,
    )
    c["trsm_left_lower_adjoint"] = (
        lambda a, b: lax.linalg.triangular_solve(
            jnp.tril(a) + 4 * jnp.eye(4, dtype=dt), b, left_side=True, lower=True, transpose_a=True, conjugate_a=True
        ),
        [A44, B43],
        1,
    )
    c["trsm_right_upper_unit"] = (
        lambda a, b: lax.linalg.triangular_solve(
            jnp.triu(a), b, left_side=False, lower=False, unit_diagonal=True
        ),
        [lambda: rand((2, 3, 3), dt), B43],
        1,
    )
    c["qr_reduced"] = (
        lambda a: (lambda q, r: (q, r, rel(q @ r, a), unitary(q)))(*jnp.linalg.qr(a)),
        [A54],
        2,
    )
    c["qr_complete"] = (
        lambda a: (lambda q, r: (q, r, rel(q @ r, a), unitary(q)))(*jnp.linalg.qr(a, mode="complete")),
        [A54],
        2,
    )
    c["qr_pivoting"] = (
        lambda a: (lambda q, r, p: (q, r, p, rel(q @ r, jnp.take_along_axis(a, p[..., None, :], axis=-1))))(
            *jsl.qr(a, pivoting=True, mode="economic")
        ),
        [lambda: rand((5, 4), dt)],
        3,
    )
    c["ormqr"] = (
        lambda a, x: (lambda r, taus: (
            lax.linalg.ormqr(r, taus, x, left=True, transpose=True),
            lax.linalg.ormqr(r, taus, jnp.swapaxes(x, -1, -2), left=False, transpose=False),
        ))(*jax._src.lax.linalg.geqrf(a)),
        [A44, B43],
        2,
    )
    c["cholesky"] = (lambda a: jnp.linalg.cholesky(a), [lambda: spd((2, 4, 4), dt)], 1)
    c["cholesky_not_pd"] = (lambda a: jnp.linalg.cholesky(a), [lambda: hermitian((2, 4, 4), dt) - 5 * np.eye(4, dtype=dt)], 1)
    for name, fn in [
        ("svd_gesdd_reduced", lambda a: jnp.linalg.svd(a, full_matrices=False)),
        ("svd_gesdd_full", lambda a: jnp.linalg.svd(a, full_matrices=True)),
        ("svd_gesvd_full", lambda a: lax.linalg.svd(a, full_matrices=True, algorithm=lax.linalg.SvdAlgorithm.QR)),
        ("svd_gesvd_reduced", lambda a: lax.linalg.svd(a, full_matrices=False, algorithm=lax.linalg.SvdAlgorithm.QR)),
    ]:
        def svd_case(a, fn=fn):
            u, s, vh = fn(a)
            k = s.shape[-1]
            recon = (u[..., :, :k] * s[..., None, :].astype(dt)) @ vh[..., :k, :]
            return s, rel(recon, a), unitary(u), unitary(adj(vh))
        c[name] = (svd_case, [A54], 1)
    c["svd_values_only"] = (lambda a: jnp.linalg.svd(a, compute_uv=False), [A45], 1)
    c["svd_values_only_gesvd"] = (
        lambda a: lax.linalg.svd(a, compute_uv=False, algorithm=lax.linalg.SvdAlgorithm.QR),
        [A54],
        1,
    )

    def eigh_case(a):
        w, v = jnp.linalg.eigh(a)
        return w, rel(a @ v, v * w[..., None, :].astype(dt)), unitary(v)
    c["eigh"] = (eigh_case, [lambda: hermitian((2, 5, 5), dt)], 1)
    c["eigvalsh"] = (lambda a: jnp.linalg.eigvalsh(a), [lambda: hermitian((3, 4, 4), dt)], 1)

    def eig_case(a):
        w, vl, vr = lax.linalg.eig(a, compute_left_eigenvectors=True, compute_right_eigenvectors=True)
        ac = a.astype(w.dtype)
        right = rel(ac @ vr, vr * w[..., None, :])
        left = rel(adj(vl) @ ac, w[..., :, None] * adj(vl))
        return sort_complex(w), right, left
    c["eig"] = (eig_case, [lambda: rand((2, 5, 5), dt)], 1)
    c["eigvals"] = (lambda a: sort_complex(jnp.linalg.eigvals(a)), [lambda: rand((2, 4, 4), dt)], 1)

    def schur_case(a):
        t, z = jsl.schur(a)
        below = jnp.tril(t, -2 if real else -1)
        return rel(z @ t @ adj(z), a), unitary(z), jnp.max(jnp.abs(below)) / jnp.max(jnp.abs(a))
    c["schur"] = (schur_case, [lambda: rand((5, 5), dt)], 0)

    def hessenberg_case(a):
        h, q = jsl.hessenberg(a, calc_q=True)
        return rel(q @ h @ adj(q), a), unitary(q), jnp.max(jnp.abs(jnp.tril(h, -2))) / jnp.max(jnp.abs(a))
    c["hessenberg"] = (hessenberg_case, [lambda: rand((5, 5), dt)], 0)

    def tridiagonal_case(a):
        arr, d, e, taus = lax.linalg.tridiagonal(a, lower=True)
        t = jnp.apply_along_axis(jnp.diag, -1, d).astype(dt)
        off = jnp.apply_along_axis(lambda v: jnp.diag(v, -1) + jnp.diag(v, 1), -1, e).astype(dt)
        spread = jnp.max(jnp.abs(jnp.linalg.eigvalsh(t + off) - jnp.linalg.eigvalsh(a)))
        return jnp.abs(d), jnp.abs(e), spread / jnp.max(jnp.abs(a))
    c["tridiagonal"] = (tridiagonal_case, [lambda: hermitian((2, 5, 5), dt)], 2)

    def gtsv_inputs():
        dl = rand((2, 5), dt)
        dl[:, 0] = 0
        du = rand((2, 5), dt)
        du[:, -1] = 0
        d = (rand((2, 5), dt) + 6).astype(dt)
        return [dl, d, du, rand((2, 5, 3), dt)]
    gt = gtsv_inputs()
    c["tridiagonal_solve"] = (
        lambda dl, d, du, b: lax.linalg.tridiagonal_solve(dl, d, du, b),
        [lambda i=i: gt[i] for i in range(4)],
        1,
    )
    # Whole functions users call, built from the kernels above.
    c["inv"] = (lambda a: jnp.linalg.inv(a), [A44], 1)
    c["det"] = (lambda a: jnp.linalg.det(a), [A44], 1)
    c["lstsq"] = (lambda a, b: jnp.linalg.lstsq(a, b)[0], [lambda: rand((6, 4), dt), lambda: rand((6, 2), dt)], 1)
    c["expm"] = (lambda a: jsl.expm(a), [lambda: rand((4, 4), dt) / 4], 1)
    return c


# What the same functions lower to for NVIDIA GPUs (cross-lowered here, no GPU needed): the
# custom calls a GPU runtime would have to provide.
GPU_SURVEY = {
    "lu": (lambda a: lax.linalg.lu(a), [(2, 5, 4)]),
    "solve": (lambda a, b: jnp.linalg.solve(a, b), [(2, 4, 4), (2, 4, 3)]),
    "triangular_solve": (lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True), [(2, 4, 4), (2, 4, 3)]),
    "qr": (lambda a: jnp.linalg.qr(a), [(2, 5, 4)]),
    "qr_pivoting": (lambda a: jsl.qr(a, pivoting=True), [(5, 4)]),
    "ormqr": (lambda a, t, x: lax.linalg.ormqr(a, t, x, left=True, transpose=True), [(2, 4, 4), (2, 4), (2, 4, 3)]),
    "cholesky": (lambda a: jnp.linalg.cholesky(a), [(2, 4, 4)]),
    "svd": (lambda a: jnp.linalg.svd(a), [(2, 5, 4)]),
    "eigh": (lambda a: jnp.linalg.eigh(a), [(2, 4, 4)]),
    "eig": (lambda a: jnp.linalg.eig(a), [(2, 4, 4)]),
    "schur": (lambda a: jsl.schur(a), [(4, 4)]),
    "hessenberg": (lambda a: jsl.hessenberg(a), [(4, 4)]),
    "tridiagonal": (lambda a: lax.linalg.tridiagonal(a), [(2, 4, 4)]),
    "tridiagonal_solve": (lambda dl, d, du, b: lax.linalg.tridiagonal_solve(dl, d, du, b), [(2, 4)] * 3 + [(2, 4, 3)]),
    "inv": (lambda a: jnp.linalg.inv(a), [(2, 4, 4)]),
    "lstsq": (lambda a, b: jnp.linalg.lstsq(a, b)[0], [(6, 4), (6, 2)]),
}


def gpu_survey():
    out = {}
    for name, (fn, shapes) in GPU_SURVEY.items():
        specs = [jax.ShapeDtypeStruct(s, np.float32) for s in shapes]
        try:
            text = export.export(jax.jit(fn), platforms=["cuda"])(*specs).mlir_module()
            out[name] = sorted(set(re.findall(r"stablehlo\.custom_call @(\w+)", text)))
        except Exception as e:  # not exportable for CUDA: say why, in one line
            found = sorted(set(re.findall(r"custom_call @(\w+)", str(e))))
            reason = f"custom calls without a stability guarantee: {found}" if found else str(e).splitlines()[0]
            out[name] = "not exportable: " + reason
    return out


def targets_of(text):
    return sorted(set(re.findall(r"stablehlo\.custom_call @(lapack_\w+)", text)))


def main():
    manifest = {"jax": jax.__version__, "cases": []}
    unchecked = [export.DisabledSafetyCheck.custom_call(t) for t in _all_targets()]
    for dname, dt in DTYPES.items():
        for name, (fn, makers, compared) in cases(dt).items():
            case = f"{name}.{dname}"
            inputs = [np.asarray(m()) for m in makers]
            specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]
            exp = export.export(jax.jit(fn), platforms=["cpu"], disabled_checks=unchecked)(*specs)
            outs = jax.jit(fn)(*inputs)
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            files = {"program": f"{case}.mlirbc", "inputs": [], "outputs": []}
            with open(os.path.join(HERE, files["program"]), "wb") as f:
                f.write(exp.mlir_module_serialized)
            for i, x in enumerate(inputs):
                files["inputs"].append(f"{case}.in{i}.npy")
                np.save(os.path.join(HERE, files["inputs"][-1]), x)
            for i, y in enumerate(outs):
                y = np.asarray(y)
                files["outputs"].append(f"{case}.out{i}.npy")
                np.save(os.path.join(HERE, files["outputs"][-1]), y)
                if i >= compared:
                    bound = TOL[dname][1] * 50
                    assert y.size == 1 and float(y) < bound, f"JAX's own {case} residual {i} is {y}"
            close, resid = TOL[dname]
            manifest["cases"].append({
                "name": case,
                "targets": targets_of(exp.mlir_module()),
                **files,
                "compared": compared,
                "rtol": close,
                "residual_bound": resid * 50,
            })
            print(case, manifest["cases"][-1]["targets"], file=sys.stderr)
    covered = sorted({t for c in manifest["cases"] for t in c["targets"]})
    missing = sorted(set(_all_targets()) - set(covered))
    assert not missing, f"targets no case covers: {missing}"
    manifest["targets"] = covered
    manifest["cuda_custom_calls"] = gpu_survey()
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def _all_targets():
    from jaxlib.cpu import _lapack
    return sorted(k for k in _lapack.registrations() if k.startswith("lapack_") and k.endswith("_ffi"))


if __name__ == "__main__":
    main()
