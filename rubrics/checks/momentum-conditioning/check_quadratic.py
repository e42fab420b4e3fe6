"""Hidden check: optim.quadratics.make_quadratic(dim, kappa, seed) -> (A, b) follows Section 4.1.

Tests on inputs the paper never uses: A is symmetric with eigenvalues exactly
kappa ** (-i / (dim - 1)), i = 0..dim-1 (lambda_max = 1, condition number kappa), b has shape
(dim,), and the output is deterministic in the seed. Exit 0 = pass; otherwise one line why.
The submission's function runs in a child process (_child.observe); only its values come back.
"""

import numpy as np
from _child import as_array, fail, observe

CHILD = """
import numpy as np
from optim.quadratics import make_quadratic


def call(dim, kappa, seed):
    A, b = make_quadratic(dim, kappa, seed)
    return [np.asarray(A, dtype=float), np.asarray(b, dtype=float)]


for name, c in inputs.items():
    report(name, call, c["dim"], c["kappa"], c["seed"])
"""
CASES = [(13, 250.0, 7), (40, 1000, 3), (5, 10, 11), (21, 37.5, 0)]


def label(dim, kappa, seed):
    return f"make_quadratic({dim}, {kappa}, {seed})"


def main():
    calls = {}
    for dim, kappa, seed in CASES:
        for s in (seed, seed + 1):
            calls[label(dim, kappa, s)] = {"dim": dim, "kappa": kappa, "seed": s}
        calls[label(dim, kappa, seed) + " again"] = {"dim": dim, "kappa": kappa, "seed": seed}
    seen = observe(CHILD, calls, timeout=60)

    def pair(name):
        out = seen.value(name)
        if not (isinstance(out, list) and len(out) == 2):
            fail(f"{name} did not return (A, b)")
        return as_array(out[0], f"{name}: A"), as_array(out[1], f"{name}: b")

    for dim, kappa, seed in CASES:
        A, b = pair(label(dim, kappa, seed))
        if A.shape != (dim, dim):
            fail(f"A has shape {A.shape}, expected {(dim, dim)} for dim={dim}")
        if b.reshape(-1).shape != (dim,):
            fail(f"b has shape {b.shape}, expected {(dim,)}")
        if not np.allclose(A, A.T, rtol=0, atol=1e-10):
            fail(
                f"A is not symmetric (max |A - A^T| = {np.max(np.abs(A - A.T)):.2e}) for dim={dim}"
            )
        eig = np.sort(np.linalg.eigvalsh(0.5 * (A + A.T)))[::-1]
        want = float(kappa) ** (-np.arange(dim) / (dim - 1))
        if not np.allclose(eig, want, rtol=1e-6, atol=1e-12):
            cond = eig[0] / eig[-1] if eig[-1] > 0 else float("inf")
            fail(
                f"eigenvalues are not kappa^(-i/(dim-1)) for dim={dim}, kappa={kappa}: "
                f"max={eig[0]:.6g}, min={eig[-1]:.6g}, condition number={cond:.6g}"
            )
        A2, b2 = pair(label(dim, kappa, seed) + " again")
        if not (np.array_equal(A2, A) and np.array_equal(b2.reshape(-1), b.reshape(-1))):
            fail(f"make_quadratic is not deterministic for seed={seed}")
        A3, b3 = pair(label(dim, kappa, seed + 1))
        if np.allclose(A3, A) and np.allclose(b3.reshape(-1), b.reshape(-1)):
            fail(
                f"make_quadratic ignores the seed (seed {seed} and {seed + 1} give the same problem)"
            )
    print("PASS: make_quadratic spectrum, symmetry, shapes and seeding are correct")


if __name__ == "__main__":
    main()
