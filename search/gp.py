"""A small Gaussian process in numpy: the surrogate of :mod:`search.guided`.

Regression with a constant mean and an automatic-relevance-determination Matérn 5/2 kernel
(Rasmussen & Williams 2006, *Gaussian Processes for Machine Learning*, eq. 4.17):

    k(x, x') = s^2 (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r),
    r^2 = sum_i (x_i - x'_i)^2 / l_i^2,

plus observation noise ``n^2`` on the diagonal. The hyperparameters (``log l_i``, ``log s^2``,
``log n^2``) maximise the log marginal likelihood (eq. 5.8) plus log-normal priors that keep
them in a plausible range when there are few points (a maximum a posteriori type-II fit), by
Adam steps on its gradient (eq. 5.9: ``1/2 tr((a a^T - K^-1) dK/dtheta)``, ``a = K^-1 y``);
a refit starts from the last values, so a few steps suffice as points arrive. Prediction is
eqs. 2.25-2.26. Every operation is deterministic (no random restarts).

Expected improvement (Jones, Schonlau & Welch 1998, eq. 15) ranks candidates for a maximised
objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["GaussianProcess", "Hyper", "expected_improvement", "normal_cdf"]

Array = NDArray[np.float64]
_SQ5 = math.sqrt(5.0)
_JITTER = 1e-8


@dataclass(frozen=True)
class Hyper:
    """Log hyperparameters and their priors: lengthscales (one per feature; features span
    about 0..1), signal variance and noise variance, each ``N(mean, sd^2)`` in log space."""

    log_lengthscale_prior: float = math.log(0.5)
    log_lengthscale_sd: float = 1.5
    log_signal_prior: float = 0.0
    log_signal_sd: float = 2.0
    log_noise_prior: float = math.log(1e-2)
    log_noise_sd: float = 2.0
    min_lengthscale: float = 0.02
    max_lengthscale: float = 50.0
    min_noise: float = 1e-6


def _matern(r: Array) -> Array:
    return (1.0 + _SQ5 * r + (5.0 / 3.0) * r * r) * np.exp(-_SQ5 * r)


class GaussianProcess:
    """A fitted GP: ``fit(X, y)`` then ``predict(Xs)`` (mean and variance of ``y``).

    ``y`` is centred on its mean and scaled by ``scale`` (its standard deviation unless
    given: the residual model of :mod:`search.guided` fixes it, so that a few nearly equal
    residuals do not look like a strong signal)."""

    def __init__(self, dims: int, *, hyper: Hyper | None = None) -> None:
        self.hyper = hyper or Hyper()
        self.log_ell = np.full(dims, self.hyper.log_lengthscale_prior)
        self.log_sf2 = self.hyper.log_signal_prior
        self.log_sn2 = self.hyper.log_noise_prior
        self._X: Array = np.zeros((0, dims))
        self._alpha: Array = np.zeros(0)
        self._linv: Array = np.zeros((0, 0))
        self._mean, self._scale = 0.0, 1.0

    def fit(
        self, X: Array, y: Array, *, steps: int = 30, scale: float | None = None
    ) -> GaussianProcess:
        """Condition on ``(X, y)`` after ``steps`` Adam steps on the hyperparameters (0: keep
        them). Returns self."""
        self._X = np.asarray(X, dtype=float)
        y = np.asarray(y, dtype=float)
        self._mean = float(y.mean()) if len(y) else 0.0
        spread = float(y.std()) if len(y) > 1 else 0.0
        self._scale = scale if scale is not None else (spread if spread > 1e-12 else 1.0)
        target = (y - self._mean) / self._scale
        if steps and len(y) > 1:
            self._optimise(target, steps)
        self._factor(target)
        return self

    def _kernel(self, A: Array, B: Array) -> Array:
        ell = np.exp(self.log_ell)
        a, b = A / ell, B / ell
        d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * (a @ b.T)
        return float(np.exp(self.log_sf2)) * _matern(np.sqrt(np.maximum(d2, 0.0)))

    def _factor(self, target: Array) -> None:
        n = len(self._X)
        noise = max(float(np.exp(self.log_sn2)), self.hyper.min_noise)
        K = self._kernel(self._X, self._X) + (noise + _JITTER) * np.eye(n)
        L = _cholesky(K)
        self._linv = np.asarray(np.linalg.inv(L), dtype=float)
        self._alpha = self._linv.T @ (self._linv @ target)

    def _optimise(self, target: Array, steps: int) -> None:
        """Adam (Kingma & Ba 2015) on the log posterior of the hyperparameters."""
        h = self.hyper
        X = self._X
        diff2 = (X[:, None, :] - X[None, :, :]) ** 2  # n x n x d
        theta = np.concatenate([self.log_ell, [self.log_sf2, self.log_sn2]])
        prior_mean = np.concatenate(
            [np.full(len(self.log_ell), h.log_lengthscale_prior), [h.log_signal_prior]]
        )
        prior_sd = np.concatenate(
            [np.full(len(self.log_ell), h.log_lengthscale_sd), [h.log_signal_sd]]
        )
        m = np.zeros_like(theta)
        v = np.zeros_like(theta)
        lo = np.concatenate(
            [
                np.full(len(self.log_ell), math.log(h.min_lengthscale)),
                [-10.0, math.log(h.min_noise)],
            ]
        )
        hi = np.concatenate([np.full(len(self.log_ell), math.log(h.max_lengthscale)), [5.0, 0.0]])
        for t in range(1, steps + 1):
            grad = _gradient(theta, diff2, target)
            grad[:-1] -= (theta[:-1] - prior_mean) / prior_sd**2
            grad[-1] -= (theta[-1] - h.log_noise_prior) / h.log_noise_sd**2
            m = 0.9 * m + 0.1 * grad
            v = 0.999 * v + 0.001 * grad * grad
            step = 0.1 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
            theta = np.clip(theta + step, lo, hi)
        self.log_ell = theta[:-2].copy()
        self.log_sf2, self.log_sn2 = float(theta[-2]), float(theta[-1])

    def predict(self, Xs: Array) -> tuple[Array, Array]:
        """Posterior mean and variance of ``y`` at the rows of ``Xs`` (eqs. 2.25-2.26)."""
        Xs = np.asarray(Xs, dtype=float)
        if len(self._X) == 0:
            prior = float(np.exp(self.log_sf2)) * self._scale**2
            return np.full(len(Xs), self._mean), np.full(len(Xs), prior)
        Ks = self._kernel(self._X, Xs)
        mean = Ks.T @ self._alpha
        V = self._linv @ Ks
        var = np.maximum(float(np.exp(self.log_sf2)) - (V * V).sum(0), 1e-12)
        return mean * self._scale + self._mean, var * self._scale**2


def _cholesky(K: Array) -> Array:
    """Cholesky factor, adding diagonal jitter until ``K`` is numerically positive definite."""
    jitter = 0.0
    for _ in range(8):
        try:
            return np.asarray(np.linalg.cholesky(K + jitter * np.eye(len(K))), dtype=float)
        except np.linalg.LinAlgError:
            jitter = max(1e-10, 10.0 * jitter) if jitter else 1e-10 * float(np.trace(K))
    floor = 1e-3 * float(np.trace(K)) / len(K)
    return np.asarray(np.linalg.cholesky(K + floor * np.eye(len(K))), dtype=float)


def _gradient(theta: Array, diff2: Array, target: Array) -> Array:
    """Gradient of the log marginal likelihood in ``theta = (log l, log s^2, log n^2)``."""
    d = diff2.shape[2]
    ell2 = np.exp(2.0 * theta[:d])
    sf2, sn2 = float(np.exp(theta[d])), float(np.exp(theta[d + 1]))
    r2 = (diff2 / ell2).sum(-1)
    r = np.sqrt(np.maximum(r2, 0.0))
    e = np.exp(-_SQ5 * r)
    K0 = (1.0 + _SQ5 * r + (5.0 / 3.0) * r2) * e
    n = len(target)
    L = _cholesky(sf2 * K0 + (sn2 + _JITTER) * np.eye(n))
    linv = np.linalg.inv(L)
    kinv = linv.T @ linv
    alpha = kinv @ target
    W = np.outer(alpha, alpha) - kinv
    # dk/dlog l_i = s^2 (5/3) (1 + sqrt5 r) exp(-sqrt5 r) (x_i - x'_i)^2 / l_i^2
    D = W * (sf2 * (5.0 / 3.0) * (1.0 + _SQ5 * r) * e)
    grad = np.empty(d + 2)
    grad[:d] = 0.5 * np.einsum("jk,jki->i", D, diff2) / ell2
    grad[d] = 0.5 * float(np.sum(W * (sf2 * K0)))
    grad[d + 1] = 0.5 * float(np.trace(W)) * sn2
    return grad


def normal_cdf(z: Array) -> Array:
    """The standard normal CDF, ``erfc(-z / sqrt 2) / 2`` with the rational approximation of
    ``erfc`` of Press et al., *Numerical Recipes* (2007) sec. 6.2.2 (``erfcc``; fractional
    error below 1.2e-7 everywhere)."""
    x = -np.asarray(z, dtype=float) / math.sqrt(2.0)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * a)
    poly = (
        -a * a
        - 1.26551223
        + t
        * (
            1.00002368
            + t
            * (
                0.37409196
                + t
                * (
                    0.09678418
                    + t
                    * (
                        -0.18628806
                        + t
                        * (
                            0.27886807
                            + t
                            * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                        )
                    )
                )
            )
        )
    )
    erfc = t * np.exp(poly)
    return 0.5 * np.where(x >= 0, erfc, 2.0 - erfc)


def expected_improvement(mean: Array, var: Array, best: float) -> Array:
    """E[max(0, f - best)] for ``f ~ N(mean, var)`` (Jones et al. 1998, eq. 15)."""
    sd = np.sqrt(np.maximum(var, 1e-18))
    z = (mean - best) / sd
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return np.asarray(sd * (z * normal_cdf(z) + pdf))
