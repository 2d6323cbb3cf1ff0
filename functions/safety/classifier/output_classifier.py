"""The learned output check: P(harmful) of a window of generated text and its most likely category — MiniLM's bottom
two layers fine-tuned on model answers (complying with a harmful request, refusing it, or answering an ordinary
one), not on requests; int8, run by ONNX Runtime every few chunks of a stream (`stream_guard.py`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from functions.safety.classifier.intent_model import IntentVerdict, SpanModel, SpanModelMeta
from functions.safety.classifier.token_table import MODEL_DIR

OUTPUT = "output"  # output.onnx + output.json


class OutputMeta(SpanModelMeta):
    threshold: float = Field(ge=0.0, le=1.0)  # halt when P(harmful) >= threshold


OutputVerdict = IntentVerdict
OutputModel = SpanModel[OutputMeta]


class OutputClassifier:
    """One verdict per window of an answer."""

    def __init__(self, model: OutputModel) -> None:
        self.model = model
        self.meta = model.meta

    def judge(self, text: str) -> OutputVerdict:
        return self.model.judge([text])[0]

    def scores(self, texts: list[str]) -> list[float]:
        return [verdict.score for verdict in self.model.judge(texts)] if texts else []

    @classmethod
    def load(cls, directory: Path = MODEL_DIR, *, threads: int | None = None) -> OutputClassifier | None:
        """The trained output check, or None where none was trained (the stream guard then runs rules and PII)."""
        if not (directory / f"{OUTPUT}.onnx").exists():
            return None
        return cls(SpanModel.load(OutputMeta, OUTPUT, directory, threads=threads))
