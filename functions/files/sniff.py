"""What an uploaded file is, by its content (the `filetype` library's signatures, then a strict UTF-8 decode), and
whether that is what its name or declared type claims: a PNG named `notes.pdf`, or a PDF named `notes.txt`, is a 400.

Kinds: `pdf`, `docx` (binary, by signature) and `html`, `markdown`, `text`, `jsonl` (text: valid UTF-8 without NUL
bytes; which of the four is the claim's, as a text file has no signature to tell them apart).
"""

from __future__ import annotations

from pathlib import PurePath

import filetype

from shared.errors import InvalidRequestError

TEXT_KINDS = ("html", "markdown", "text", "jsonl")
KINDS_BY_EXTENSION = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".jsonl": "jsonl",  # a batch's input (purpose `batch`): one JSON request per line
}
KINDS_BY_MEDIA_TYPE = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "text/html": "html",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/plain": "text",
    "application/jsonl": "jsonl",
    "application/x-ndjson": "jsonl",
}
SUPPORTED = ", ".join(sorted(KINDS_BY_EXTENSION))


def claimed_kind(filename: str, media_type: str | None) -> str:
    """The kind the upload claims: its extension's, else its declared media type's; 400 when neither is supported."""
    kind = KINDS_BY_EXTENSION.get(PurePath(filename).suffix.lower())
    if kind is None and media_type is not None:
        kind = KINDS_BY_MEDIA_TYPE.get(media_type.split(";")[0].strip().lower())
    if kind is None:
        raise InvalidRequestError(
            f"Unsupported file type for `{filename}`: supported are {SUPPORTED} (PDF, DOCX, HTML, Markdown, text).",
            param="file",
            code="unsupported_file",
        )
    return kind


def sniffed_kind(head: bytes, read_all: bytes | None = None) -> str | None:
    """`pdf` or `docx` by signature, `text` for UTF-8 text (the whole body is checked when given), else None."""
    guess = filetype.guess(head)
    if guess is not None:
        return guess.extension if guess.extension in ("pdf", "docx") else None
    body = head if read_all is None else read_all
    if b"\x00" in body:
        return None
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return "text"


def checked_kind(filename: str, media_type: str | None, head: bytes, body: bytes) -> str:
    """The file's kind when its content is what it claims to be; else the 400 that says what it really is."""
    claim = claimed_kind(filename, media_type)
    found = sniffed_kind(head, body)
    if found == claim or (found == "text" and claim in TEXT_KINDS):
        return claim
    what = {"pdf": "a PDF", "docx": "a DOCX document", "text": "text"}.get(found or "", "not a supported type")
    raise InvalidRequestError(
        f"The content of `{filename}` is not {claim.upper() if claim != 'text' else 'text'}: by its content it is "
        f"{what}.",
        param="file",
        code="invalid_file",
    )
