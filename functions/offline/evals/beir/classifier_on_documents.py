"""How often the safety classifier (the pre-filter: deny rules, then the classifier cascade) flags benign documents:
BEIR's scientific abstracts, each read as one user message. The reason untrusted context (passages, tool results) is
not gated by it (docs/safety.md, "Untrusted text").

    python -m functions.offline.evals.beir.classifier_on_documents --per-set 600
"""

from __future__ import annotations

import argparse
import random
from collections import Counter

from pydantic import BaseModel

from functions.offline.evals.beir.data_sets import SETS, load

MAX_CHARS = 2000  # a passage-sized read of each document (title and the start of its text)


class FlagRate(BaseModel):
    set: str
    documents: int
    flagged: int
    by_category: dict[str, int]

    @property
    def rate(self) -> float:
        return self.flagged / self.documents if self.documents else 0.0


def flag_rates(per_set: int, seed: int = 0) -> list[FlagRate]:
    from functions.safety.classifier.cascade import shipped_classifier
    from functions.safety.prefilter import PreFilter
    from shared.wire.schemas import ChatMessage

    prefilter = PreFilter(shipped_classifier())
    rates = []
    for name in SETS:
        documents = load(name).documents
        random.Random(seed).shuffle(documents)
        found: Counter[str] = Counter()
        for document in documents[:per_set]:
            text = f"{document.title}\n{document.text}"[:MAX_CHARS]
            finding = prefilter.assess([ChatMessage(role="user", content=text)]).finding
            if finding is not None:
                found[finding.category] += 1
        rates.append(FlagRate(set=name, documents=min(per_set, len(documents)), flagged=sum(found.values()),
                              by_category=dict(found)))  # fmt: skip
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-set", type=int, default=600)
    args = parser.parse_args()
    for rate in flag_rates(args.per_set):
        print(f"{rate.set}: {rate.flagged}/{rate.documents} flagged ({rate.rate:.1%}) {rate.by_category}")


if __name__ == "__main__":
    main()
