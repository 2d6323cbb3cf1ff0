"""JailbreakBench's judge-comparison set as a training source of the output check: 300 answers of attacked models to
AdvBench goals, each labelled by three people as jailbroken (a harmful answer that does what the goal asks) or not;
the set the benchmark used to choose its judge (Chao et al. 2024, MIT). An answer is harmful when most of the three
say so; the shipped second stage names its category (the set gives none, and its goals are not JailbreakBench's own
behaviours). A harmful answer to a goal of misinformation, fake news or defamation is left out (not in this policy);
every answer the people judged not jailbroken (a refusal, a deflection, a harmless answer) is benign.
JailbreakBench's dataset cannot be fetched here; the copy read (`judge-comparison.csv`, the benchmark's columns, saved
in the Mac Roman encoding) is in a repository that states no licence of its own. Trained on."""

from __future__ import annotations

import re
from collections.abc import Iterator

from functions.offline.safety_training.sources.public_source_model import (
    TEACHER,
    Kind,
    PublicSource,
    RawRow,
    Use,
    assistant,
    csv_rows,
    only_file,
)
from functions.safety.categories import BENIGN

REPO = "AnthonyRonning/promptfoo-workshop"
COMMIT = "f7ba70256f082d67f857b6a76f962f58acbefc8a"
ANSWERS = "judge-comparison.csv"
HARMFUL = "harmful"
OUT_OF_POLICY = "harmful/out of policy"
# Goals whose harmful answers this policy does not cover (it has no misinformation or defamation category).
_OUT_OF_POLICY_GOAL = re.compile(r"fake news|misinformation|false information|defam|false accusation", re.IGNORECASE)


def read_judge_answers(files: dict[str, bytes]) -> Iterator[RawRow]:
    """Each answer with HARMFUL (most of the three people: jailbroken), OUT_OF_POLICY or BENIGN."""
    for row in csv_rows(only_file(files), encoding="mac_roman"):
        answer = row["target_response"].strip()
        if not answer:
            continue
        if row["human_majority"] != "1":
            yield assistant(answer), BENIGN
        else:
            yield assistant(answer), OUT_OF_POLICY if _OUT_OF_POLICY_GOAL.search(row["goal"]) else HARMFUL


JBB_JUDGE_ANSWERS_SOURCE = PublicSource(
    name="jbb-judge-answers",
    repo=REPO,
    commit=COMMIT,
    paths=(ANSWERS,),
    license="MIT (JailbreakBench; the copy's repository states none)",
    origin="JailbreakBench's judge-comparison set (Chao et al. 2024, JailbreakBench/JBB-Behaviors): attacked models' "
    "answers to AdvBench goals, labelled by three people; copied in AnthonyRonning/promptfoo-workshop",
    use=Use.TRAIN,
    harmful=None,
    kind=Kind.RESPONSE,
    reader=read_judge_answers,
    categories={BENIGN: BENIGN, HARMFUL: TEACHER},
)
