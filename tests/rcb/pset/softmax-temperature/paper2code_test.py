"""Compares softmax.py with its reference on random logits, large ones included."""

import unittest

import numpy as np
import softmax
import softmax_ref


class TestSoftmax(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(99)

    def test_softmax(self):
        for temperature in (0.1, 1.0, 3.0):
            logits = self.rng.normal(scale=5.0, size=(4, 7))
            got = softmax.softmax(logits, temperature)
            np.testing.assert_allclose(got, softmax_ref.softmax(logits, temperature), rtol=1e-10)

    def test_large_logits_stay_finite(self):
        logits = np.array([[1000.0, 999.0, -1000.0]])
        got = softmax.softmax(logits, 0.5)
        self.assertTrue(np.all(np.isfinite(got)))
        np.testing.assert_allclose(got, softmax_ref.softmax(logits, 0.5), rtol=1e-10)

    def test_entropy(self):
        p = softmax_ref.softmax(self.rng.normal(size=(5, 6)), 2.0)
        np.testing.assert_allclose(softmax.entropy(p), softmax_ref.entropy(p), rtol=1e-10)


if __name__ == "__main__":
    unittest.main()
