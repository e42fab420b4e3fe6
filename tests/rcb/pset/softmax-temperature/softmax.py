"""The tempered softmax and the entropy of its output."""

import numpy as np


def softmax(logits, temperature=1.0, axis=-1):
    """Probabilities from logits divided by a temperature, computed stably."""
    # <paper2code name="tempered softmax">
    # <paper2code name="scale logits">
    z = np.asarray(logits, dtype=float) / temperature
    # </paper2code name="scale logits">
    # <paper2code name="stable exponent">
    z = z - np.max(z, axis=axis, keepdims=True)
    e = np.exp(z)
    # </paper2code name="stable exponent">
    return e / np.sum(e, axis=axis, keepdims=True)
    # </paper2code name="tempered softmax">


def entropy(p, axis=-1):
    """Shannon entropy in nats of probability vectors along ``axis``."""
    # <paper2code name="entropy">
    p = np.clip(p, 1e-12, 1.0)
    return -np.sum(p * np.log(p), axis=axis)
    # </paper2code name="entropy">
