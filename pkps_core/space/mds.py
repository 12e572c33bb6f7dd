"""Classical MDS of a distance matrix (PKPS Eq. 2), shared by the estimator and its callers."""

from __future__ import annotations

import warnings

import numpy as np


def classical_mds(distance: np.ndarray, n_components: int) -> tuple[np.ndarray, np.ndarray]:
    """Classical MDS of a distance matrix (Eq. 2) with ``sklearn.manifold.ClassicalMDS``.

    Components whose eigenvalue is not positive (D not Euclidean there) get coordinate 0.

    Returns
    -------
    embedding : ndarray of shape (n_models, n_components)
    eigenvalues : ndarray of shape (n_components,)
    """
    n = distance.shape[0]
    d = int(max(1, min(n_components, n - 1)))
    from sklearn.manifold import ClassicalMDS  # here: sklearn takes ~1 s to import

    mds = ClassicalMDS(n_components=d, metric="precomputed")
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        embedding = mds.fit_transform(0.5 * (distance + distance.T))
    eigenvalues = mds.eigenvalues_
    embedding = np.where(eigenvalues[None, :] > 0, embedding, 0.0)
    embedding = np.nan_to_num(embedding)
    if d < n_components:
        embedding = np.hstack([embedding, np.zeros((n, n_components - d))])
        eigenvalues = np.concatenate([eigenvalues, np.zeros(n_components - d)])
    return embedding, eigenvalues
