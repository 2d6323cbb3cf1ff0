"""CLI: `fleetchat eval run|baseline|compare|history` (added to the `eval` group beside `eval safety`).

Imports only typer at module level: the CLI starts fast and the eval code loads when a command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from functions.offline.evals.reporting.store import ReportStore

OutDir = Annotated[
    Path | None,
    typer.Option(
        "--out-dir", help="Reports directory (default: FLEETCHAT_EVAL_REPORTS_DIR, or the data dir's evals/)."
    ),
]
DataDir = Annotated[Path | None, typer.Option(help="The local data dir (default: FLEETCHAT_DATA_DIR or .fleetchat).")]


def _settings(data_dir: Path | None):  # type: ignore[no-untyped-def]
    from shared.settings import Settings

    settings = Settings(**({"data_dir": data_dir} if data_dir else {}))
    return settings.eval, settings


def _store(out_dir: Path | None, data_dir: Path | None) -> ReportStore:
    from functions.offline.evals.reporting.store import open_report_store

    eval_settings, settings = _settings(data_dir)
    return open_report_store(eval_settings, settings, out_dir)


def _fail(console: Console, message: str) -> typer.Exit:
    console.print(f"[red]{message}[/]")
    return typer.Exit(code=2)


def eval_run(
    base_url: Annotated[
        str | None, typer.Option(help="The gateway (with or without /v1); default: the local stack's.")
    ] = None,
    suite: Annotated[
        list[str] | None, typer.Option("--suite", "-s", help="A suite to run (repeatable; default: all).")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many items per suite (quick runs).")] = None,
    out_dir: OutDir = None,
    data_dir: DataDir = None,
) -> None:
    """Run the eval suites against a running deployment; write the run (JSON), its HTML report and a metrics file,
    and append it to the history. Exit 1 when a suite errors, a threshold is broken, or a metric regresses beyond
    its tolerance against the baseline of the same model versions.

    Keys: FLEETCHAT_EVAL_FREE_KEY / FLEETCHAT_EVAL_PLUS_KEY, else the eval tenants' key file in the reports dir, else
    new eval tenants created with FLEETCHAT_EVAL_ADMIN_KEY (locally: the data dir's admin key file)."""
    import asyncio

    import httpx
    from rich.console import Console

    from functions.offline.evals.launch import resolve_run_config
    from functions.offline.evals.reporting.console import RichProgress, print_gate
    from functions.offline.evals.reporting.store import open_report_store
    from functions.offline.evals.runner import run_eval, suite_names
    from functions.offline.evals.suites import SUITES
    from functions.offline.evals.tenants import EvalKeyError

    console = Console()
    eval_settings, settings = _settings(data_dir)
    unknown = [name for name in suite or [] if name not in SUITES]
    if unknown:  # before anything is contacted or created
        raise _fail(console, f"unknown suite(s): {', '.join(unknown)}; known: {', '.join(SUITES)}")
    store = open_report_store(eval_settings, settings, out_dir)
    try:
        config = resolve_run_config(
            eval_settings, settings, base_url=base_url, suites=suite_names(suite), limit=limit, out_dir=out_dir
        )
    except (EvalKeyError, ValueError) as exc:
        raise _fail(console, str(exc)) from None
    except httpx.HTTPError as exc:
        raise _fail(console, f"cannot reach the deployment at {base_url or 'the local gateway'}: {exc}") from None
    with RichProgress(console) as progress:
        outcome = asyncio.run(run_eval(config, store, progress))
    print_gate(console, outcome.run)
    console.print(f"run {outcome.run.run_id}: {outcome.json_location}")
    console.print(f"report: {outcome.html_location}")
    if outcome.run.gate is not None and not outcome.run.gate.passed:
        raise typer.Exit(code=1)


def eval_baseline(
    run_id: Annotated[str, typer.Argument(help="A run id, or `latest`.")],
    out_dir: OutDir = None,
    data_dir: DataDir = None,
) -> None:
    """Accept a run as the baseline for its model versions (later runs of the same versions are gated against it)."""
    from rich.console import Console

    from functions.offline.evals.reporting.history import RunBook, RunNotFoundError

    console = Console()
    try:
        run = RunBook(_store(out_dir, data_dir)).accept_baseline(run_id)
    except RunNotFoundError as exc:
        raise _fail(console, str(exc)) from None
    if run.gate is not None and not run.gate.passed:
        console.print(f"[yellow]note: run {run.run_id} did not pass its own gate[/]")
    console.print(f"baseline for {run.version_key}: {run.run_id}")


def eval_compare(
    run_a: Annotated[str, typer.Argument(help="Run A (e.g. before a model update), or `latest`.")],
    run_b: Annotated[str, typer.Argument(help="Run B (after), or `latest`.")],
    html: Annotated[Path | None, typer.Option(help="Also write the side-by-side as HTML here.")] = None,
    out_dir: OutDir = None,
    data_dir: DataDir = None,
) -> None:
    """Side by side: every metric of two runs, B - A, and whether B is better, worse, or regressed beyond tolerance."""
    from rich.console import Console

    from functions.offline.evals.reporting.console import print_compare
    from functions.offline.evals.reporting.history import RunBook, RunNotFoundError
    from functions.offline.evals.reporting.report import render_compare

    console = Console()
    book = RunBook(_store(out_dir, data_dir))
    try:
        a, b = book.load_run(run_a), book.load_run(run_b)
    except RunNotFoundError as exc:
        raise _fail(console, str(exc)) from None
    print_compare(console, a, b)
    target = html
    if target is None:
        name = f"compare/{a.run_id}_vs_{b.run_id}.html"
        book.store.put(name, render_compare(a, b).encode(), "text/html; charset=utf-8")
        console.print(f"side-by-side: {book.store.location(name)}")
    else:
        target.write_text(render_compare(a, b))
        console.print(f"side-by-side: {target}")


def eval_history(
    out_dir: OutDir = None,
    data_dir: DataDir = None,
    last: Annotated[int, typer.Option(min=1, help="Show the newest N runs.")] = 20,
) -> None:
    """The runs in the history, newest first, with their verdict and which is the baseline."""
    from rich.console import Console

    from functions.offline.evals.reporting.console import print_history
    from functions.offline.evals.reporting.history import RunBook

    book = RunBook(_store(out_dir, data_dir))
    print_history(Console(), book.history()[-last:], book.baselines())


def eval_tenants(
    base_url: Annotated[
        str | None, typer.Option(help="The gateway (with or without /v1); default: the local stack's.")
    ] = None,
    out_dir: OutDir = None,
    data_dir: DataDir = None,
) -> None:
    """Create the eval tenants (purpose eval, free and plus) where missing, with FLEETCHAT_EVAL_ADMIN_KEY (locally:
    the admin key file). Their keys go to eval_keys.json in the reports dir (0600, never printed): put them into the
    `fleetchat-eval` Modal secret for the nightly job (docs/evals.md)."""
    from rich.console import Console

    from functions.offline.evals.launch import resolve_keys
    from functions.offline.evals.settings import reports_dir
    from functions.offline.evals.tenants import KEYS_FILE, EvalKeyError

    console = Console()
    eval_settings, settings = _settings(data_dir)
    try:
        url, keys = resolve_keys(eval_settings, settings, base_url=base_url, out_dir=out_dir)
    except EvalKeyError as exc:
        raise _fail(console, str(exc)) from None
    path = (out_dir or reports_dir(eval_settings, settings)) / KEYS_FILE
    console.print(f"eval tenants of {url}: {', '.join(tier.value for tier in keys)}; keys in {path}")


def eval_beir(
    sets: Annotated[
        list[str] | None, typer.Option("--set", help="BEIR sets (scifact, nfcorpus); default: both.")
    ] = None,
    engines: Annotated[
        list[str] | None,
        typer.Option("--engine", help="lancedb (the service's engine) and/or sqlite-vec; default: lancedb."),
    ] = None,
    out_dir: Annotated[Path, typer.Option(help="Where beir.json, beir.md and beir.png go.")] = Path(
        "bench-results/beir"
    ),
) -> None:
    """Retrieval quality on public BEIR sets: keyword, vector and hybrid nDCG@10 and recall@100 against the published
    BM25 and MiniLM figures (docs/retrieval-engines.md). Embeds each corpus once (cached in ~/.cache/fleetchat/beir)."""
    from rich.console import Console

    from functions.offline.evals.beir.data_sets import SETS
    from functions.offline.evals.beir.retrieval_eval import report_lines, run

    console = Console()
    chosen = sets or sorted(SETS, reverse=True)
    unknown = sorted(set(chosen) - set(SETS)) + sorted(set(engines or []) - {"lancedb", "sqlite-vec"})
    if unknown:
        raise _fail(console, f"unknown set or engine: {', '.join(unknown)}")
    results = run(chosen, engines or ["lancedb"], out_dir)  # type: ignore[arg-type]
    console.print("\n".join(report_lines(results)))
    console.print(f"report: {out_dir / 'beir.md'}, plot: {out_dir / 'beir.png'}")


def register(eval_app: typer.Typer) -> None:
    eval_app.command("beir")(eval_beir)
    eval_app.command("run")(eval_run)
    eval_app.command("baseline")(eval_baseline)
    eval_app.command("compare")(eval_compare)
    eval_app.command("history")(eval_history)
    eval_app.command("tenants")(eval_tenants)
