"""The first stage's features as one scipy sparse matrix [dense | hashed n-grams]: what its logistic scorers learn."""

from __future__ import annotations

from typing import Any

import numpy as np

from functions.safety.classifier.features import Features
from functions.safety.classifier.ngrams import WIDTH


def sparse_matrix(features: Features) -> Any:
    """One row per feature row: the dense vector, then the n-gram block."""
    from scipy.sparse import csr_matrix, hstack

    indptr = np.cumsum([0] + [i.size for i, _ in features.sparse])
    indices = np.concatenate([i for i, _ in features.sparse])
    values = np.concatenate([v for _, v in features.sparse])
    grams = csr_matrix((values, indices, indptr), shape=(len(features.sparse), WIDTH))
    return hstack([csr_matrix(features.dense), grams]).tocsr()
