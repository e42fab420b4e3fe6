"""Hidden test of calib.metrics.expected_calibration_error(probs, labels, n_bins=15).

Exit 0 if the submission's ECE matches the paper's definition (Section 3.4) on hidden inputs.
The submission's function runs in a child process (_child.observe); only its values come back.
"""

import numpy as np
from _child import fail, observe

CHILD = """
from calib.metrics import expected_calibration_error
for name, case in inputs.items():
    report(name, lambda c: float(expected_calibration_error(c["p"], c["y"], n_bins=c["n_bins"])), case)
"""


def reference_ece(p, y, n_bins):
    conf = np.maximum(p, 1.0 - p)
    correct = ((p >= 0.5).astype(int) == y).astype(float)
    idx = np.minimum(np.floor(conf * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        m = idx == b
        if m.any():
            total += m.mean() * abs(correct[m].mean() - conf[m].mean())
    return total


def cases():
    rng = np.random.default_rng(20240611)
    # 1. broad scores, miscalibrated labels
    p = rng.random(4000)
    y = (rng.random(4000) < p**1.7).astype(int)
    yield "uniform scores, 15 bins", p, y, 15
    # 2. overconfident scores concentrated near 0 and 1 (the top bin dominates)
    z = 6.0 * rng.normal(size=3000)
    p = 1.0 / (1.0 + np.exp(-z))
    y = (rng.random(3000) < 1.0 / (1.0 + np.exp(-z / 4.0))).astype(int)
    yield "overconfident scores, 15 bins", p, y, 15
    # 3. n_bins must be honoured
    yield "overconfident scores, 10 bins", p, y, 10
    # 4. hand-made: confidences of exactly 1.0 and values just below it
    p = np.array([1.0, 1.0, 0.0, 0.999, 0.97, 0.02, 0.62, 0.31, 0.55, 0.81])
    y = np.array([1, 0, 0, 1, 0, 0, 0, 1, 1, 1])
    yield "hand-made with p in {0, 1}", p, y, 15


def main():
    all_cases = list(cases())
    for _, p, _, n_bins in all_cases:
        # avoid exact bin edges, where conventions may legitimately differ
        conf = np.maximum(p, 1 - p)
        assert not np.any((np.abs(conf * n_bins - np.round(conf * n_bins)) < 1e-9) & (conf < 1.0))
    wants = {name: reference_ece(p, y, n_bins) for name, p, y, n_bins in all_cases}
    seen = observe(
        CHILD, {name: {"p": p, "y": y, "n_bins": n} for name, p, y, n in all_cases}, timeout=40
    )
    for name, want in wants.items():
        got = seen.number(name)
        if not np.isfinite(got) or abs(got - want) > 1e-6:
            fail(f"{name}: ECE {got:.6f}, expected {want:.6f}")
    print(
        "PASS: expected_calibration_error matches the paper's 15-bin top-label ECE on 4 hidden cases"
    )


if __name__ == "__main__":
    main()
