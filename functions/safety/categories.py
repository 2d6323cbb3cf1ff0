"""The safety categories (aligned with OpenAI's moderation categories) and what the classifier predicts."""

from __future__ import annotations

from enum import StrEnum


class Category(StrEnum):
    HARASSMENT = "harassment"
    HATE = "hate"
    SELF_HARM = "self-harm"
    SEXUAL = "sexual"
    SEXUAL_MINORS = "sexual/minors"
    VIOLENCE = "violence"
    ILLICIT = "illicit"
    ILLICIT_VIOLENT = "illicit/violent"
    # Attempts to override the assistant's instructions or safety policy (not an OpenAI moderation category).
    JAILBREAK = "jailbreak"


BENIGN = "benign"
# The classifier's output classes, in the head's order: benign first, then every category.
CLASSIFIER_LABELS: tuple[str, ...] = (BENIGN, *(c.value for c in Category))
