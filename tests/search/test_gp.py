"""The guided sampler's Gaussian process (``search.gp``): hand-worked small cases, the
gradient of the marginal likelihood against finite differences, the normal CDF against
``math.erf``, and expected improvement's closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from search.gp import GaussianProcess, _gradient, expected_improvement, normal_cdf


def _matern(r: float) -> float:
    return (1 + math.sqrt(5) * r + 5 * r * r / 3) * math.exp(-math.sqrt(5) * r)


def test_two_points_predict_the_hand_worked_posterior() -> None:
    """Unit lengthscale and signal variance, noise 1e-4: the posterior mean at x = 0.5
    between y(0) = 1 and y(1) = -1 (centred: the mean of y is 0) is k*^T K^-1 y, and the
    variance 1 - k*^T K^-1 k* (Rasmussen & Williams eqs. 2.25-2.26)."""
    gp = GaussianProcess(1)
    gp.log_ell[:] = 0.0
    gp.log_sf2, gp.log_sn2 = 0.0, math.log(1e-4)
    X = np.array([[0.0], [1.0]])
    gp.fit(X, np.array([1.0, -1.0]), steps=0, scale=1.0)
    k01 = _matern(1.0)
    K = np.array([[1 + 1e-4, k01], [k01, 1 + 1e-4]])
    ks = np.array([_matern(0.5), _matern(0.5)])
    mean, var = gp.predict(np.array([[0.5], [0.0], [0.25]]))
    assert mean[0] == pytest.approx(0.0, abs=1e-9)  # symmetric: half way is the mean
    assert var[0] == pytest.approx(1 - ks @ np.linalg.solve(K, ks), rel=1e-6)
    assert mean[1] == pytest.approx(1.0, abs=1e-3)  # a training point: interpolated
    assert var[1] < 1e-3
    ks2 = np.array([_matern(0.25), _matern(0.75)])
    assert mean[2] == pytest.approx(ks2 @ np.linalg.solve(K, np.array([1.0, -1.0])), rel=1e-6)


def test_far_from_the_data_the_prediction_is_the_prior() -> None:
    gp = GaussianProcess(2).fit(np.array([[0.0, 0.0], [0.1, 0.2]]), np.array([3.0, 5.0]))
    mean, var = gp.predict(np.array([[100.0, 100.0]]))
    assert mean[0] == pytest.approx(4.0)  # the data's mean
    assert var[0] == pytest.approx(math.exp(gp.log_sf2) * 1.0**2, rel=1e-6)  # scale = std = 1


def test_the_likelihood_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    X = rng.random((12, 3))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2
    y = (y - y.mean()) / y.std()
    diff2 = (X[:, None, :] - X[None, :, :]) ** 2

    def log_ml(theta: np.ndarray) -> float:
        ell2 = np.exp(2 * theta[:3])
        r = np.sqrt((diff2 / ell2).sum(-1))
        K = math.exp(theta[3]) * (1 + math.sqrt(5) * r + 5 * r * r / 3) * np.exp(-math.sqrt(5) * r)
        K += (math.exp(theta[4]) + 1e-8) * np.eye(len(y))
        sign, logdet = np.linalg.slogdet(K)
        return float(-0.5 * y @ np.linalg.solve(K, y) - 0.5 * logdet)

    theta = np.array([math.log(0.4), math.log(0.7), math.log(1.3), 0.2, math.log(1e-2)])
    grad = _gradient(theta, diff2, y)
    for i in range(len(theta)):
        step = np.zeros_like(theta)
        step[i] = 1e-5
        numeric = (log_ml(theta + step) - log_ml(theta - step)) / 2e-5
        assert grad[i] == pytest.approx(numeric, rel=1e-4, abs=1e-6), i


def test_fitting_raises_the_likelihood_and_is_deterministic() -> None:
    rng = np.random.default_rng(1)
    X = rng.random((30, 2))
    y = np.exp(X[:, 0]) * 2 + 0.1 * X[:, 1]  # the second feature barely matters
    a = GaussianProcess(2).fit(X, y, steps=60)
    b = GaussianProcess(2).fit(X, y, steps=60)
    assert np.array_equal(a.log_ell, b.log_ell)
    assert a.log_ell[1] > a.log_ell[0]  # automatic relevance: a longer scale for the weak one
    test = rng.random((50, 2))
    mean, _ = a.predict(test)
    truth = np.exp(test[:, 0]) * 2 + 0.1 * test[:, 1]
    assert np.abs(mean - truth).max() < 0.05


@pytest.mark.parametrize("z", [-8.0, -3.2, -1.0, -0.1, 0.0, 0.5, 1.7, 4.0, 9.0])
def test_normal_cdf_matches_erf(z: float) -> None:
    exact = 0.5 * math.erfc(-z / math.sqrt(2))
    assert float(normal_cdf(np.array([z]))[0]) == pytest.approx(exact, rel=2e-7, abs=1e-15)


def test_expected_improvement_closed_form_and_monotone() -> None:
    # at mean = best, EI = sd * phi(0)
    ei = expected_improvement(np.array([1.0]), np.array([4.0]), 1.0)
    assert ei[0] == pytest.approx(2.0 / math.sqrt(2 * math.pi))
    # no uncertainty: the plain improvement
    ei = expected_improvement(np.array([3.0, 0.5]), np.array([0.0, 0.0]), 1.0)
    assert ei[0] == pytest.approx(2.0) and ei[1] == pytest.approx(0.0)
    means = np.linspace(-2, 2, 9)
    assert np.all(np.diff(expected_improvement(means, np.ones(9), 0.0)) > 0)
    sds = np.linspace(0.1, 3, 9) ** 2
    assert np.all(np.diff(expected_improvement(np.zeros(9), sds, 0.5)) > 0)
