"""The `fleetchat` command: run the stack, a single worker or gateway, the benchmark, admin, metering and safety."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from shared.settings import Settings

app = typer.Typer(
    help="fleetchat: an OpenAI-compatible chat service that runs on one laptop and deploys to Modal unchanged.",
    no_args_is_help=True,
    add_completion=False,
)


def settings_with(**given: object) -> Settings:
    """The settings with the options given on the command line over the environment's (`FLEETCHAT_*`, `.env`): an
    option left out (None) keeps the environment's value, so `FLEETCHAT_REPLICAS_PER_POOL=2 fleetchat up` means 2."""
    from pydantic import ValidationError

    from shared.settings import Settings, setting_names

    try:
        return Settings(**{name: value for name, value in given.items() if value is not None})
    except ValidationError as exc:  # a bad value, from the environment or an option: said by name, nothing started
        for variable, reason in setting_names(exc):
            field = variable.removeprefix("FLEETCHAT_").lower()
            typer.echo(f"invalid {field} ({variable} or its option): {reason}", err=True)
        raise typer.Exit(code=2) from None


@app.command()
def up(
    port: Annotated[
        int | None, typer.Option(help="Gateway port on 127.0.0.1 [default: FLEETCHAT_PORT or 8000]")
    ] = None,
    replicas: Annotated[
        int | None,
        typer.Option(min=1, help="Worker processes per model pool [default: FLEETCHAT_REPLICAS_PER_POOL or 1]"),
    ] = None,
    gateways: Annotated[
        int | None,
        typer.Option(
            min=1, max=16, help="Gateway processes behind HAProxy on the port [default: FLEETCHAT_GATEWAYS or 1]"
        ),
    ] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Where the database, key file and logs live.")] = None,
) -> None:
    """Start the whole local stack: a supervised worker per pool replica, then the gateway (or several, behind
    HAProxy). Prints the URL and key."""
    from functions.local_stack.launcher import run_local_stack

    run_local_stack(settings_with(port=port, replicas_per_pool=replicas, gateways=gateways, data_dir=data_dir))


@app.command()
def worker(
    pool: Annotated[str, typer.Option(help="Model pool to serve (mini or flagship); also the served model name.")],
    port: Annotated[int, typer.Option(help="Port on the host.")] = 8100,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    kv_cache_tokens: Annotated[
        int | None, typer.Option(help="KV-cache capacity in tokens (default: the engine's, docs/engine.md).")
    ] = None,
    max_model_len: Annotated[int | None, typer.Option(help="Cap on prompt + completion tokens.")] = None,
    no_prefix_caching: Annotated[bool, typer.Option("--no-prefix-caching", help="Disable block sharing.")] = False,
    from_hub: Annotated[
        bool, typer.Option("--from-hub", help="Load the pool's hub model, not the packaged GGUF.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="Only warnings in the log.")] = False,
    engine: Annotated[
        str | None, typer.Option(help="llama_cpp or transformers (default: the pool table's local engine).")
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            help="llama.cpp threads, fixed (default: a share of the host's cores among the engines generating).",
            min=1,
        ),
    ] = None,
) -> None:
    """Serve one model pool with the embedded engine (OpenAI protocol, /health, /metrics)."""
    from gpu_workers.server.parent_death import die_with_supervisor

    die_with_supervisor()  # first, before the slow imports: under `fleetchat up`, never outlive it
    from gpu_workers.registry import EngineOptions
    from gpu_workers.server.main import run_worker

    options = EngineOptions(
        kv_cache_tokens=kv_cache_tokens,
        max_model_len=max_model_len,
        prefix_caching=not no_prefix_caching,
        from_hub=from_hub,
        engine=engine,
        threads=threads,
    )
    run_worker(pool, host, port, options, log_level="warning" if quiet else "info")


@app.command("embedding-worker")
def embedding_worker(
    pool: Annotated[str, typer.Option(help="Embedding pool to serve; also the served model name.")] = (
        "text-embedding-minilm"
    ),
    port: Annotated[int, typer.Option(help="Port on the host.")] = 8200,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    max_batch: Annotated[int, typer.Option(min=1, help="Most inputs gathered into one forward pass.")] = 64,
    max_wait_ms: Annotated[float, typer.Option(min=0, help="How long a pass waits for more requests.")] = 2.0,
    threads: Annotated[
        int | None, typer.Option(min=1, help="Torch threads (default: half the cores, at most 4).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Only warnings in the log.")] = False,
    rerank: Annotated[
        list[str] | None, typer.Option(help="A re-rank pool to serve too (vLLM's /v1/rerank, the fused rank).")
    ] = None,
) -> None:
    """Serve one embedding pool (OpenAI /v1/embeddings, /health, /metrics) with the packaged model (issue 22), and the
    re-rank pools named (/v1/rerank) with the same model."""
    from gpu_workers.server.parent_death import die_with_supervisor

    die_with_supervisor()  # first, before the slow imports: under `fleetchat up`, never outlive it
    from gpu_workers.embeddings.server import run_embedding_worker

    run_embedding_worker(
        pool, host, port, max_batch_inputs=max_batch, max_wait_s=max_wait_ms / 1000, threads=threads,
        log_level="warning" if quiet else "info", rerank_pools=tuple(rerank or ()),
    )  # fmt: skip


@app.command()
def gateway(
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 [default: FLEETCHAT_PORT or 8000]")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Where the database lives.")] = None,
) -> None:
    """Serve only the gateway, against workers already running (FLEETCHAT_WORKER_URLS or the local ports)."""
    from gpu_workers.server.parent_death import die_with_supervisor

    die_with_supervisor()  # under `fleetchat up --gateways N`, never outlive it (started by hand: no effect)

    import uvicorn

    from functions.app import create_app
    from functions.local_stack.config_cli import configured_or_exit

    # A bad operator config file: its problems, exit 1.
    settings = configured_or_exit(settings_with(port=port, data_dir=data_dir))
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning")


@app.command(hidden=True)
def balancer(
    config: Annotated[Path, typer.Option(help="The HAProxy configuration `fleetchat up` wrote.")],
    binary: Annotated[str, typer.Option(help="The HAProxy executable.")] = "haproxy",
) -> None:
    """Run the local fleet's HAProxy as a child of `fleetchat up` (it dies with it)."""
    from functions.local_stack.balancer import exec_haproxy
    from gpu_workers.server.parent_death import die_with_supervisor

    die_with_supervisor()
    exec_haproxy(config, binary)


@app.command()
def retention(
    tenant_id: Annotated[str, typer.Argument(help="The tenant (ten_...).")],
    days: Annotated[
        int | None, typer.Option(min=1, help="Days of inactivity before a conversation expires; omit for the tier's.")
    ] = None,
    legal_hold: Annotated[
        bool, typer.Option("--legal-hold/--no-legal-hold", help="Keep everything: the sweep never deletes.")
    ] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Where the database lives.")] = None,
) -> None:
    """Set a tenant's retention (enterprise contracts) and legal hold. Takes effect at the next sweep and write."""
    from shared.storage.accounts import TenantChanges
    from shared.storage.factory import open_tenant_store

    settings = settings_with(data_dir=data_dir)
    store = open_tenant_store(settings)
    try:
        tenant = store.update_tenant(tenant_id, TenantChanges(retention_days=days, legal_hold=legal_hold))
    finally:
        store.close()
    if tenant is None:
        typer.echo(f"no tenant {tenant_id!r}", err=True)
        raise typer.Exit(code=1)
    typer.echo(f"{tenant.id}: retention {tenant.retention_days or 'tier default'} days, legal hold {tenant.legal_hold}")


@app.command()
def sweep(
    data_dir: Annotated[Path | None, typer.Option(help="Where the database lives.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would be deleted; change nothing.")] = False,
    as_of: Annotated[
        datetime | None, typer.Option(help="Sweep as if it were this UTC time (ISO 8601); default: now.")
    ] = None,
) -> None:
    """Delete expired and purge-due conversations (with an audit record each) and expired safety audit records."""
    from rich.console import Console
    from rich.table import Table

    from functions.jobs.retention_sweep import sweep_from_settings

    settings = settings_with(data_dir=data_dir)
    now = None if as_of is None else as_of.replace(tzinfo=as_of.tzinfo or UTC)
    report = sweep_from_settings(settings, now=now, dry_run=dry_run)
    table = Table("outcome", "records")
    counts = ("examined", "expired", "purged", "held", "rescheduled", "unknown_tenant", "already_gone", "failed")
    files = ("files_deleted", "vector_stores_deleted", "orphan_bodies_deleted")  # docs/files.md
    for name in (*counts, "safety_audit_deleted", "feedback_deleted", "feedback_orphans_deleted", *files):
        table.add_row(name.replace("_", " "), str(getattr(report, name)))
    console = Console()
    console.print("retention sweep" + (" (dry run: nothing changed)" if dry_run else ""))
    console.print(table)
    if report.failed:
        raise typer.Exit(code=1)


@app.command("batches")
def batches(
    budget_s: Annotated[float, typer.Option(min=1, help="Stop starting lines after this many seconds.")] = 3600,
    data_dir: Annotated[Path | None, typer.Option(help="The stack's data dir.")] = None,
) -> None:
    """Run every active batch (/v1/batches) to its end, outside the gateway (docs/batches.md). A gateway runs batches
    itself unless FLEETCHAT_BATCH_RUN_IN_GATEWAY=false; this is the deployed scheduled job's local twin."""
    from functions.jobs.batch_run import run_batches_from_settings

    settings = settings_with(data_dir=data_dir)
    report = run_batches_from_settings(settings, budget_s=budget_s)
    typer.echo(report.model_dump_json())


vectors_app = typer.Typer(help="The vector stores' index (LanceDB): maintenance (docs/files.md).", no_args_is_help=True)
app.add_typer(vectors_app, name="vectors")


@vectors_app.command("maintain")
def vectors_maintain(
    purge_now: Annotated[
        bool, typer.Option(help="Remove old versions at once, not after the grace (only with no gateway searching).")
    ] = False,
    data_dir: Annotated[Path | None, typer.Option(help="The stack's data dir.")] = None,
) -> None:
    """Compact every vector store, bring its BM25 and vector indexes up to date (building the approximate one past its
    size threshold) and remove old versions; maintain and repair the conversation search index: the deployed
    scheduled job's local twin."""
    from functions.jobs.vector_maintenance import maintain_from_settings

    report = maintain_from_settings(settings_with(data_dir=data_dir), purge_now=purge_now)
    typer.echo(report.model_dump_json())
    if report.failed or report.search_failed:
        raise typer.Exit(code=1)


@app.command()
def bench(
    base_url: Annotated[str, typer.Option(help="Gateway base URL.")] = "http://127.0.0.1:8000",
    model: Annotated[str, typer.Option(help="Model (pool) to drive.")] = "mini",
    api_key: Annotated[str | None, typer.Option(help="API key; default: the local key file.")] = None,
    out_dir: Annotated[Path, typer.Option(help="Where the JSON and markdown reports go.")] = Path("bench-results"),
    max_tokens: Annotated[int, typer.Option(help="Completion tokens per request.")] = 64,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer requests per level (smoke run).")] = False,
    admin_key: Annotated[
        str | None, typer.Option(help="Admin key (creates the goodput phase's bench tenants); default: the local one.")
    ] = None,
    aiperf: Annotated[
        str | None, typer.Option(help="aiperf executable (independent goodput check); default: $FLEETCHAT_AIPERF.")
    ] = None,
    guidellm: Annotated[
        str | None, typer.Option(help="guidellm executable (its default request); default: $FLEETCHAT_GUIDELLM.")
    ] = None,
) -> None:
    """Drive the running service with the openai async client; write a JSON + markdown report."""
    from functions.offline.bench.config import BenchConfig
    from functions.offline.bench.run import run_benchmark

    run_benchmark(
        BenchConfig(
            base_url=base_url,
            model=model,
            api_key=api_key,
            out_dir=out_dir,
            max_tokens=max_tokens,
            quick=quick,
            admin_key=admin_key,
            aiperf=aiperf,
            guidellm=guidellm,
        )
    )


@app.command(name="lm-eval")
def lm_eval(
    lm_eval: Annotated[
        str, typer.Option("--lm-eval", help="The lm_eval executable (`make lm-eval` installs .venv-lmeval).")
    ] = ".venv-lmeval/bin/lm_eval",
    base_url: Annotated[str, typer.Option(help="Gateway base URL; a local stack is started if none answers.")] = (
        "http://127.0.0.1:8000"
    ),
    model: Annotated[str, typer.Option(help="Model (pool) to evaluate.")] = "mini",
    api_key: Annotated[str | None, typer.Option(help="API key; default: the local key file.")] = None,
    limit: Annotated[int | None, typer.Option(help="Documents per task (default: all 50).")] = None,
    out_dir: Annotated[Path, typer.Option(help="Where lm-eval's results and lm-eval.md go.")] = Path(
        "bench-results/lm-eval"
    ),
) -> None:
    """lm-evaluation-harness's log-likelihood (/v1/completions) and generation (chat) tasks against the gateway."""
    from rich.console import Console

    from functions.offline.bench.run import read_local_key
    from functions.offline.bench.stack import gateway_reachable, start_local_stack
    from functions.offline.lm_eval.run import LmEvalConfig, report_lines, run_all

    console = Console(stderr=True)
    stack = None if gateway_reachable(base_url) else start_local_stack(base_url, console)
    try:
        key = api_key or read_local_key(stack.key_path if stack is not None else None)
        cfg = LmEvalConfig(lm_eval=lm_eval, base_url=base_url, api_key=key, model=model, limit=limit, out_dir=out_dir)
        with console.status("lm-eval: log-likelihoods through /v1/completions, then generation through chat"):
            results = run_all(cfg)
        Console().print("\n".join(report_lines(cfg, results)))
    finally:
        if stack is not None:
            stack.stop()


@app.command()
def chaos(
    out_dir: Annotated[Path, typer.Option(help="Where the report goes.")] = Path("bench-results/chaos"),
    aiperf: Annotated[str | None, typer.Option(help="aiperf executable; default: $FLEETCHAT_AIPERF.")] = None,
    concurrency: Annotated[int, typer.Option(help="Streams aiperf keeps in flight.")] = 8,
    requests: Annotated[int, typer.Option(help="Requests aiperf sends.")] = 32,
    max_tokens: Annotated[int, typer.Option(help="Completion tokens per request.")] = 64,
) -> None:
    """Kill a gateway and a worker and pause the stores under aiperf's load through a local fleet; audit the books."""
    from functions.offline.chaos.plan import ChaosConfig
    from functions.offline.chaos.run import run_chaos

    cfg = ChaosConfig(out_dir=out_dir, aiperf=aiperf, concurrency=concurrency, requests=requests, max_tokens=max_tokens)
    if not run_chaos(cfg).passed:
        raise typer.Exit(code=1)


def _register_subcommands() -> None:
    from functions.feedback.commands import register as register_feedback
    from functions.local_stack.admin_cli import register
    from functions.local_stack.config_cli import app as config_app
    from functions.local_stack.doctor.command import doctor
    from functions.metering.commands import meter_flush, meter_reconcile
    from functions.offline.evals.commands import register as register_evals
    from functions.offline.safety_training.commands import eval_app
    from functions.offline.safety_training.commands import register as register_safety

    register(app)
    register_evals(eval_app)  # run/baseline/compare/history beside `eval safety`
    register_safety(app)
    register_feedback(app)
    app.command("meter-flush")(meter_flush)
    app.command("meter-reconcile")(meter_reconcile)
    app.command("doctor")(doctor)
    app.add_typer(config_app, name="config")  # `fleetchat config check FILE` / `config show`


_register_subcommands()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":
    main()
