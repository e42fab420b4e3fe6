"""Compares ema.py with its reference on random series."""

import unittest

import ema
import ema_ref
import numpy as np


class TestEma(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(1234)

    def test_ema(self):
        for beta in (0.5, 0.9, 0.99):
            x = self.rng.normal(loc=3.0, size=40)
            np.testing.assert_allclose(ema.ema(x, beta), ema_ref.ema(x, beta), rtol=1e-10)

    def test_ema_variance(self):
        for beta in (0.6, 0.95):
            x = self.rng.normal(loc=-1.0, scale=2.0, size=30)
            np.testing.assert_allclose(
                ema.ema_variance(x, beta), ema_ref.ema_variance(x, beta), rtol=1e-10
            )


if __name__ == "__main__":
    unittest.main()
