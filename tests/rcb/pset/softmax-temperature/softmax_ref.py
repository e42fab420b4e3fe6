"""The tempered softmax and the entropy of its output (reference)."""

import numpy as np


def softmax(logits, temperature=1.0, axis=-1):
    """Probabilities from logits divided by a temperature, computed stably."""
    z = np.asarray(logits, dtype=float) / temperature
    z = z - np.max(z, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)


def entropy(p, axis=-1):
    """Shannon entropy in nats of probability vectors along ``axis``."""
    p = np.clip(p, 1e-12, 1.0)
    return -np.sum(p * np.log(p), axis=axis)
