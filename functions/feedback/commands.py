"""CLI: `fleetchat feedback export`: ratings as JSONL for reward-model training, or thumbs-down golden candidates."""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from shared.storage.feedback import Rating

feedback_app = typer.Typer(
    help="Answer feedback (thumbs up/down) given in the web chat and the API.", no_args_is_help=True
)


@feedback_app.command("export")
def export(
    out: Annotated[Path | None, typer.Option(help="Write JSONL here (default: standard output).")] = None,
    rating: Annotated[Rating | None, typer.Option(help="Only this rating.")] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant (ten_...).")] = None,
    since: Annotated[
        datetime | None, typer.Option(help="Only ratings given at or after this time (ISO 8601; UTC if no zone).")
    ] = None,
    golden_candidates: Annotated[
        bool,
        typer.Option(
            "--golden-candidates",
            help="Write the thumbs-down ratings as candidate golden items ({id, source, category, messages, answer, "
            "comment}) instead of training rows.",
        ),
    ] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Where the database lives.")] = None,
) -> None:
    """Each current rating with the prompt the model saw, the answer, the comment, the model and the safety policy
    versions, one JSON object per line. Ratings of deleted conversations or of replaced answers are skipped (counted
    on standard error)."""
    from rich.console import Console
    from rich.progress import MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from functions.feedback.export import ExportCounts, ExportFilter, feedback_rows, golden_candidate
    from shared.settings import Settings
    from shared.storage.factory import open_conversation_store, open_feedback_store

    if golden_candidates and rating is Rating.UP:
        raise typer.BadParameter("golden candidates are the thumbs-down ratings", param_hint="--rating")
    chosen = ExportFilter(
        rating=Rating.DOWN if golden_candidates else rating,
        tenant_id=tenant,
        since=None if since is None else since.replace(tzinfo=since.tzinfo or UTC),
    )
    settings = Settings(data_dir=data_dir) if data_dir is not None else Settings()
    feedback, conversations = open_feedback_store(settings), open_conversation_store(settings)
    counts = ExportCounts()
    console = Console(stderr=True)
    partial = None if out is None else out.with_name(f".{out.name}.partial")
    columns = (SpinnerColumn(), TextColumn("feedback export"), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with (
            partial.open("w") if partial is not None else nullcontext(sys.stdout) as sink,
            Progress(*columns, console=console, transient=True) as progress,
        ):
            task = progress.add_task("read", total=None)
            for row in feedback_rows(feedback, conversations, chosen, counts, on_record=lambda: progress.advance(task)):
                line = golden_candidate(row).model_dump_json() if golden_candidates else row.model_dump_json()
                sink.write(line + "\n")
            sink.flush()
            if partial is not None:
                os.fsync(sink.fileno())
        if partial is not None and out is not None:
            partial.replace(out)  # a reader never sees half an export
    finally:
        if partial is not None:
            partial.unlink(missing_ok=True)
        conversations.close()
        feedback.close()
    kind = "golden candidates" if golden_candidates else "ratings"
    print(
        f"exported {counts.exported} {kind}; skipped {counts.conversation_gone} of deleted or expired conversations"
        f" and {counts.answer_replaced} of replaced answers",
        file=sys.stderr,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(feedback_app, name="feedback")
