"""Hidden check: optim.optimizers.run("adam", ...) follows Section 3 of the paper.

Bias-corrected Adam with m_0 = v_0 = 0, t = k + 1, x_{k+1} = x_k - lr * m_hat / (sqrt(v_hat) + eps),
on a hidden quadratic with non-default beta1, beta2; run(...) returns x_0..x_n, shape (n + 1, dim).
Exit 0 = pass; otherwise one line why. The submission's run() is called in a child process
(_child.observe) with a gradient built there from the same A and b; only its values come back.
"""

import numpy as np
from _child import fail, observe

CHILD = """
import numpy as np
from optim.optimizers import run
A, b, x0 = inputs["A"], inputs["b"], inputs["x0"]


def grad(x):
    return A @ x - b


for name, c in inputs["cases"].items():
    report(name, lambda c: np.asarray(run("adam", grad, x0.copy(), c["n"], **c["kw"]), dtype=float), c)
"""


def reference(grad, x0, n, lr, b1, b2, eps, bias_correction=True):
    x = x0.copy()
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    out = [x.copy()]
    for k in range(n):
        t = k + 1
        g = grad(x)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mh = m / (1 - b1**t) if bias_correction else m
        vh = v / (1 - b2**t) if bias_correction else v
        x = x - lr * mh / (np.sqrt(vh) + eps)
        out.append(x.copy())
    return np.array(out)


def main():
    rng = np.random.default_rng(777)
    dim = 7
    Q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    lam = np.geomspace(3.0, 0.02, dim)
    A = (Q * lam) @ Q.T
    b = rng.standard_normal(dim)
    x0 = rng.standard_normal(dim)

    def grad(x):
        return A @ x - b

    settings = [(0.05, 0.8, 0.99, 1e-8, 25), (0.02, 0.9, 0.999, 1e-6, 30)]
    cases = {
        f"run('adam', grad, x0, {n}, lr={lr}, beta1={b1}, beta2={b2}, eps={eps})": {
            "n": n,
            "kw": {"lr": lr, "beta1": b1, "beta2": b2, "eps": eps},
        }
        for lr, b1, b2, eps, n in settings
    }
    seen = observe(CHILD, {"A": A, "b": b, "x0": x0, "cases": cases}, timeout=60)
    for name, (lr, b1, b2, eps, n) in zip(cases, settings, strict=True):
        traj = seen.array(name)
        if traj.shape != (n + 1, dim):
            fail(f"run returned shape {traj.shape}, expected {(n + 1, dim)} (iterates x_0..x_n)")
        want = reference(grad, x0, n, lr, b1, b2, eps)
        if not np.allclose(traj, want, rtol=1e-6, atol=1e-9):
            if np.allclose(
                traj,
                reference(grad, x0, n, lr, b1, b2, eps, bias_correction=False),
                rtol=1e-6,
                atol=1e-9,
            ):
                fail("adam omits the bias correction m/(1-beta1^t), v/(1-beta2^t)")
            k = int(np.argmax(np.any(~np.isclose(traj, want, rtol=1e-6, atol=1e-9), axis=1)))
            fail(
                f"adam trajectory differs from bias-corrected Adam from step {k} on (lr={lr}, beta1={b1}, beta2={b2})"
            )
    print("PASS: adam matches bias-corrected Adam on a hidden quadratic")


if __name__ == "__main__":
    main()
