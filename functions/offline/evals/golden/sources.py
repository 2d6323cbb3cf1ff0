"""Where the golden set and the calibration set come from: each source's repository, pinned commit, paths and
licence, and how its rows become items. Nobody on this team wrote or labelled any of it.

- reasoning: GSM8K's test split (grade-school maths word problems, human-written solutions), checked by exact match
  of the final number.
- coding: HumanEval (hand-written Python problems with unit tests), checked by running the tests in a sandbox.
- writing and qa: Self-Instruct's 252 user-oriented instructions, each with an expert-written instance answer (the
  set used for the paper's human evaluation), split by the application that motivated the instruction; judged
  against that answer.
- calibration: MT-Bench's human expert judgments as LLMBar processed them (majority vote per pair, ties removed, 200
  pairs sampled).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator

from pydantic import BaseModel, ConfigDict, Field

from functions.offline.evals.golden.items import CalibrationItem, Category, GoldenItem, NumericCheck, PythonTestsCheck
from functions.offline.safety_training.sources.public_source_model import jsonl_rows, only_file

Reader = Callable[[dict[str, bytes]], Iterator[GoldenItem]]

REASONING_SUFFIX = "\n\nSolve it step by step, then give the final answer on the last line as `Answer: <number>`."
CODING_PREFIX = (
    "Complete the following Python function. Reply with the complete function, including its imports, in one "
    "```python code block.\n\n```python\n"
)

# Self-Instruct's instructions carry the app that motivated them; these decide which category an item tests.
# Apps whose tasks are mostly classification, recipes, planning or code stay out (their answers are one word, or
# the task is another category's).
WRITING_APPS = frozenset(
    {
        "Grammarly", "Gmail", "Google Docs", "MS Word", "you.com (YouWrite)", "Blogger", "LinkedIn", "Twitter",
        "Instagram", "Telegram", "Facebook", "Indeed", "ludwig.guru", "Quora", "Reddit",
    }
)  # fmt: skip
QA_APPS = frozenset(
    {
        "Wikipedia", "Google Search", "merriam-webster.com", "Wolfram alpha", "(Wolfram alpha)?",
        "Socratic by Google", "Semantic Scholar", "Google Scholar", "Explainpaper", "National Geographic",
        "Coursera", "Goodreads", "CNN News", "ESPN", "Weather",
    }
)  # fmt: skip
MIN_REFERENCE_CHARS = 12  # one-word references ("Confident", "Positive") say too little for the judge


class GoldenSource(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    name: str
    repo: str  # owner/name on GitHub
    commit: str
    paths: tuple[str, ...]
    license: str
    origin: str  # who made the data set
    category: Category
    reader: Reader = Field(exclude=True)
    limit: int  # items kept (a fixed sample chosen by each item's hash)


def gsm8k_answer(solution: str) -> str:
    """The final number of a GSM8K solution (`... #### 1,200` -> "1200")."""
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def read_gsm8k(files: dict[str, bytes]) -> Iterator[GoldenItem]:
    for number, row in enumerate(jsonl_rows(only_file(files))):
        yield GoldenItem(
            id=f"gsm8k/test-{number}",
            category="reasoning",
            source="gsm8k",
            prompt=row["question"].strip() + REASONING_SUFFIX,
            reference=row["answer"].strip(),
            check=NumericCheck(answer=gsm8k_answer(row["answer"])),
        )


def read_humaneval(files: dict[str, bytes]) -> Iterator[GoldenItem]:
    for row in jsonl_rows(gzip.decompress(only_file(files))):
        yield GoldenItem(
            id=row["task_id"].replace("HumanEval/", "humaneval/"),
            category="coding",
            source="humaneval",
            prompt=CODING_PREFIX + row["prompt"].rstrip() + "\n```",
            reference=f"```python\n{row['prompt']}{row['canonical_solution'].rstrip()}\n```",
            check=PythonTestsCheck(entry_point=row["entry_point"], header=row["prompt"], tests=row["test"]),
        )


def _self_instruct(apps: frozenset[str], category: Category, name: str) -> Reader:
    def read(files: dict[str, bytes]) -> Iterator[GoldenItem]:
        for row in jsonl_rows(only_file(files)):
            if row["motivation_app"] not in apps:
                continue
            instance = row["instances"][0]
            if len(instance["output"].strip()) < MIN_REFERENCE_CHARS:
                continue
            given = instance["input"].strip()
            prompt = row["instruction"].strip() + (f"\n\n{given}" if given else "")
            yield GoldenItem(
                id=f"{name}/{row['id']}",
                category=category,
                source=name,
                prompt=prompt,
                reference=instance["output"].strip(),
            )

    return read


SELF_INSTRUCT = dict(
    repo="yizhongw/self-instruct",
    commit="0b26ccaa415992100fa32df62d41b994cf928e23",
    paths=("human_eval/user_oriented_instructions.jsonl",),
    license="Apache-2.0",
    origin="Self-Instruct user-oriented evaluation set (Wang et al. 2023): 252 instructions and one answered "
    "instance each, written by the authors for the paper's human evaluation (its README: not for training)",
)

SOURCES: tuple[GoldenSource, ...] = (
    GoldenSource(
        name="gsm8k",
        repo="openai/grade-school-math",
        commit="3101c7d5072418e28b9008a6636bde82a006892c",
        paths=("grade_school_math/data/test.jsonl",),
        license="MIT",
        origin="GSM8K (Cobbe et al. 2021), test split: problems and solutions written by human problem writers",
        category="reasoning",
        reader=read_gsm8k,
        limit=60,
    ),
    GoldenSource(
        name="humaneval",
        repo="openai/human-eval",
        commit="6d43fb980f9fee3c892a914eda09951f772ad10d",
        paths=("data/HumanEval.jsonl.gz",),
        license="MIT",
        origin="HumanEval (Chen et al. 2021): 164 hand-written Python problems with unit tests",
        category="coding",
        reader=read_humaneval,
        limit=50,
    ),
    GoldenSource(
        name="self-instruct-writing",
        category="writing",
        reader=_self_instruct(WRITING_APPS, "writing", "self-instruct-writing"),
        limit=50,
        **SELF_INSTRUCT,
    ),
    GoldenSource(
        name="self-instruct-qa",
        category="qa",
        reader=_self_instruct(QA_APPS, "qa", "self-instruct-qa"),
        limit=50,
        **SELF_INSTRUCT,
    ),
)


class CalibrationSource(BaseModel):
    name: str
    repo: str
    commit: str
    path: str
    license: str
    dataset: str
    annotators: str  # who labelled, as the dataset describes them
    labelled_when: str
    selection: str
    count: int
    max_answer_chars: int  # pairs with a longer answer are left out: each run grades every answer
    max_question_chars: int


CALIBRATION = CalibrationSource(
    name="mt-bench-human",
    repo="princeton-nlp/LLMBar",
    commit="900616bff90b6c6c8e1681f7d079250637c55992",
    path="Dataset/Processed/MT-Bench/dataset.json",
    license="LLMBar repository MIT; MT-Bench human judgments (lmsys/mt_bench_human_judgments) CC BY 4.0",
    dataset="MT-Bench human judgments (Zheng et al. 2023, 'Judging LLM-as-a-Judge with MT-Bench and Chatbot "
    "Arena'), as processed by LLMBar (Zeng et al. 2024): gold preference by majority vote, ties removed, 200 pairs",
    annotators="expert-level human labellers, mostly graduate students with expertise in the topic areas of each "
    "question (the MT-Bench paper's description of its 3.3K pairwise judgments of 6 models' answers to 80 questions)",
    labelled_when="2023 (MT-Bench human judgments released June 2023; LLMBar's processed file committed 2023-10-11)",
    selection="pairs whose answers are at most max_answer_chars and question at most max_question_chars, then a "
    "fixed sample by each pair's hash, as many preferring the first answer as the second",
    count=60,
    max_answer_chars=2500,
    max_question_chars=1500,
)


def read_calibration(blob: bytes) -> Iterator[CalibrationItem]:
    for number, row in enumerate(json.loads(blob)):
        yield CalibrationItem(
            id=f"{CALIBRATION.name}/{number}",
            source=CALIBRATION.name,
            question=row["input"].strip(),
            answer_1=row["output_1"].strip(),
            answer_2=row["output_2"].strip(),
            human_label=row["label"],
        )
