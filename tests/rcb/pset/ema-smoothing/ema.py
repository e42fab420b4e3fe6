"""Exponential moving averages with bias correction."""

import numpy as np
from series import as_series


def ema(x, beta):
    """Smooth a series with an exponential moving average, corrected for its zero start."""
    x = as_series(x)
    # <paper2code name="ema recursion">
    out = np.zeros_like(x)
    # the running average starts at zero

    avg = 0.0
    for t, value in enumerate(x):
        # <paper2code name="ema update">
        avg = beta * avg + (1.0 - beta) * value
        # </paper2code name="ema update">
        # <paper2code name="bias correction">
        out[t] = avg / (1.0 - beta ** (t + 1))
        # </paper2code name="bias correction">
    # </paper2code name="ema recursion">
    return out


def ema_variance(x, beta):
    """The exponential moving average of the squared deviation from the smoothed series."""
    # <paper2code name="ema variance">
    mean = ema(x, beta)
    squared = (as_series(x) - mean) ** 2
    return ema(squared, beta)
    # </paper2code name="ema variance">
