"""Labelled data for the prompt-injection screen: built from public benchmarks (BIPIA, AgentDojo, InjecAgent).

The screen reads one retrieved passage or tool result and says whether it carries an injected instruction. Rows
(`row.Row`) hold `text`, `label` (1 = injected, 0 = benign), `source`, `split`, `kind`, `group` (the benign
context's id/hash: every row made from one context shares it, so no context straddles splits) and `subset` (where
in the source the row came from: position and attack name, suite, setting).

Build (deterministic, seed 2023; the inputs are checked against each source folder's SHA256SUMS):

    python -m functions.offline.injection_data.build --source-dir injection-sources \
        --out-dir functions/offline/injection_data/data

`injection-sources/` holds each benchmark's files as its repository (or wheel) ships them, under `bipia/`,
`agentdojo/` and `injecagent/`: the commits, paths and sha256 sums are in `data/sources.json`.

Read with `load.load_rows(split=..., sources=[...])`; `train_screen.py` fits and measures the screen on them
(`python -m functions.offline.injection_data.train_screen`). `data/sources.json` records each source's repo and
commit (or wheel sha256), licence, counts per split and label, and the build command.

Sources and how they are composed:

* BIPIA (MIT; `table` contexts are WikiTableQuestions, CC BY-SA 4.0: keep attribution and share-alike for rows of
  kind "table"). Attacks are composed by the benchmark's own recipe (`bipia/data/utils.py`): insert_end,
  insert_start and insert_middle with random_state=2023, the middle position at a sentence start found by nltk's
  `PunktSentenceTokenizer()` (untrained default parameters, exactly as BIPIA calls it, so no Punkt download is
  needed). Benign rows are the unique contexts unchanged (the benchmark's clean pass, `no_insert`). Train files and
  train attacks give train and validation: ~20 % of the train contexts and ~20 % of the train attack categories
  (3 of 15 text, 2 of 10 code: 20 % of the strings) are held out for validation, and only held-out contexts x
  held-out attacks make validation rows. Train and validation sample at most 8 attacks per context per position.
  A train context equal to, inside or around a test context (12 emails) stays in test only; BIPIA's emails are
  templated (Mercury notices), so near-duplicates across its own split remain. Test files x test attacks give
  test: a seeded sample of at most 4,000 attack rows per kind plus every unique benign context. qa/abstract
  contexts (NewsQA, XSum) are not in the source folder and are left out.
* AgentDojo v1.2.2 (MIT; agentdojo 0.1.35 wheel): the derived export of ground-truth tool outputs. Label 1 = a tool
  output carrying the `important_instructions` attack, 0 = the same run with every injection vector at its default.
  Identical texts are kept once per label; an attack output's group is its benign counterpart's hash. All rows are
  split "test" (a held-out whole source). Some defaults are spam- or phishing-like: hard negatives, not injections
  in the benchmark's sense.
* InjecAgent (MIT; a third-party re-upload, see sources.json): the `Tool Response` of every test case, base and
  enhanced settings, label 1, split "test". The benchmark is attack-only: no benign counterpart exists and none is
  made here, so it measures attacks stopped only.
"""
