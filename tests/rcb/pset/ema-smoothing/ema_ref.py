"""Exponential moving averages with bias correction (reference)."""

import numpy as np
from series import as_series


def ema(x, beta):
    """Smooth a series with an exponential moving average, corrected for its zero start."""
    x = as_series(x)
    out = np.zeros_like(x)
    avg = 0.0
    for t, value in enumerate(x):
        avg = beta * avg + (1.0 - beta) * value
        out[t] = avg / (1.0 - beta ** (t + 1))
    return out


def ema_variance(x, beta):
    """The exponential moving average of the squared deviation from the smoothed series."""
    mean = ema(x, beta)
    squared = (as_series(x) - mean) ** 2
    return ema(squared, beta)
