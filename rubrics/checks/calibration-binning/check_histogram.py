"""Hidden test of calib.methods.histogram_binning(cal_probs, cal_labels, test_probs, n_bins=15).

Exit 0 if the calibrated test probabilities match equal-width histogram binning of P(y=1)
fitted on the calibration arrays (every bin is populated, so empty-bin rules do not matter).
The submission's function runs in a child process (_child.observe); only its values come back.
"""

import numpy as np
from _child import fail, observe

CHILD = """
from calib.methods import histogram_binning
for name, c in inputs.items():
    report(name, histogram_binning, c["cal_p"], c["cal_y"], c["test_p"], n_bins=c["n_bins"])
"""


def reference(cal_p, cal_y, test_p, n_bins):
    idx = np.minimum(np.floor(cal_p * n_bins).astype(int), n_bins - 1)
    values = np.array([cal_y[idx == b].mean() for b in range(n_bins)])
    tidx = np.minimum(np.floor(test_p * n_bins).astype(int), n_bins - 1)
    return values[tidx]


def away_from_edges(p, n_bins):
    x = p * n_bins
    return p[np.abs(x - np.round(x)) > 1e-6]


def cases():
    rng = np.random.default_rng(4242)
    cal_p = rng.random(3000)
    cal_y = (rng.random(3000) < cal_p**2).astype(int)
    test_p = rng.random(1500)
    for n_bins in (15, 7):
        cp = away_from_edges(cal_p, n_bins)
        cy = cal_y[np.isin(cal_p, cp)]
        tp = away_from_edges(test_p, n_bins)
        yield f"{n_bins} bins", cp, cy, tp, n_bins


def main():
    all_cases = list(cases())
    wants = {name: reference(cp, cy, tp, n_bins) for name, cp, cy, tp, n_bins in all_cases}
    seen = observe(
        CHILD,
        {
            name: {"cal_p": cp, "cal_y": cy, "test_p": tp, "n_bins": n_bins}
            for name, cp, cy, tp, n_bins in all_cases
        },
        timeout=40,
    )
    for name, want in wants.items():
        got = seen.array(name)
        if got.shape != want.shape:
            fail(f"{name}: output shape {got.shape}, expected {want.shape}")
        err = float(np.max(np.abs(got - want)))
        if not np.isfinite(err) or err > 1e-9:
            fail(
                f"{name}: calibrated probabilities differ from histogram binning by up to {err:.4f}"
            )
    print("PASS: histogram_binning matches equal-width binning of P(y=1) on 2 hidden cases")


if __name__ == "__main__":
    main()
