"""Helpers for one-dimensional series."""

import numpy as np


def as_series(x):
    """``x`` as a 1-D float array."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"expected a 1-D series, got shape {x.shape}")
    return x
