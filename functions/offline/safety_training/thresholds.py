"""How both classifier stages pick their block threshold on the validation split."""

from __future__ import annotations

import numpy as np

from functions.offline.safety_training.sources.sensitive_benign_sources import SENSITIVE_BENIGN

# The block threshold is the lowest that refuses at most this share of the validation split's benign examples.
MAX_VALIDATION_FALSE_POSITIVE = 0.02
# The second stage (what blocks) is held to half that. At 2 % its fine-tunes on the public data refused 3.4 to 5.6 % of
# the golden benign set (legal, security and mental-health questions); at 1 % the same r7 model refuses 1.3 % and
# still blocks 97.4 % of the golden adversarial set. Chosen on the validation split; held-out sources never read.
SECOND_STAGE_MAX_VALIDATION_FALSE_POSITIVE = 0.01


def choose_threshold(
    harmful_scores: np.ndarray,
    y: np.ndarray,
    max_false_positive: float = MAX_VALIDATION_FALSE_POSITIVE,
    *,
    ceiling: float = 0.99,
    margin: float = 1e-4,
) -> float:
    """The lowest threshold whose benign (y == 0) false-positive rate on these examples is within the target (a
    fine-tuned net's scores may crowd towards 1: raise `ceiling` and shrink `margin` for one)."""
    benign = np.sort(harmful_scores[y == 0])
    allowed = int(np.floor(max_false_positive * benign.size))
    # Block when score >= t: t just above the (allowed+1)-th highest benign score lets `allowed` through.
    cut = benign[-(allowed + 1)] if benign.size > allowed else 0.0
    return float(min(max(cut + margin, 0.05), ceiling))


def source_capped_threshold(scores: np.ndarray, groups: dict[str, np.ndarray], cap: float | None) -> float:
    """The lowest threshold that blocks at most `cap` of each group's rows (a mask of benign rows per source; 0.0
    without a cap): the per-source rule a second stage may add to the pooled one (`IntentConfig.source_cap`)."""
    if cap is None:
        return 0.0
    return max(
        (choose_threshold(scores[rows], np.zeros(int(rows.sum()), np.int64), cap) for rows in groups.values()),
        default=0.0,
    )


def sensitive_benign_rows(sources: np.ndarray, benign: np.ndarray) -> dict[str, np.ndarray]:
    """Each SENSITIVE_BENIGN source's rows among the `benign` ones (`sources`: each row's source name), a mask per
    source present: the groups `source_capped_threshold` holds."""
    masks = {source: (sources == source) & benign for source in SENSITIVE_BENIGN}
    return {source: rows for source, rows in masks.items() if rows.any()}
