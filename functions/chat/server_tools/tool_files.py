"""The python tool's files: the caller's uploads a run asked for, read into its sandbox at /mnt/data, and the files it
offered back, kept as the caller's files (purpose `assistants_output`, checked by type and counted against the file
quota as uploads are, expiring) so the chat can offer them for download at `/v1/files/{id}/content`."""

from __future__ import annotations

import posixpath

from anyio import to_thread

from functions.accounts.auth import Caller
from functions.files.files_service import FilesService
from functions.sandbox.protocol import SandboxFile
from shared.errors import FleetchatError

OUTPUT_TTL_S = 7 * 24 * 3600  # a run's files stay downloadable a week


class ToolFileError(ValueError):
    """A file the run asked for cannot be given to it (told to the model, which can fix its call)."""


class ToolFiles:
    def __init__(self, files: FilesService, *, max_input_bytes: int) -> None:
        self.files = files
        self.max_input_bytes = max_input_bytes  # all of one run's input files together

    async def inputs(self, caller: Caller, file_ids: list[str]) -> dict[str, bytes]:
        """The files by the names the run sees them under (a repeated name gets its id appended)."""
        found: dict[str, bytes] = {}
        total = 0
        for file_id in dict.fromkeys(file_ids):
            try:
                record, chunks = await self.files.content(caller, file_id)
            except FleetchatError as exc:
                raise ToolFileError(f"file {file_id}: {exc.message}") from exc
            total += record.bytes
            if total > self.max_input_bytes:
                raise ToolFileError(f"the files asked for exceed {self.max_input_bytes >> 20} MB together")
            name = posixpath.basename(record.filename) or record.id
            if name in found or name == "out":
                stem, dot, suffix = name.rpartition(".")
                name = f"{stem}-{record.id}.{suffix}" if dot else f"{name}-{record.id}"
            found[name] = await to_thread.run_sync(b"".join, chunks)
        return found

    async def keep(self, caller: Caller, offered: list[SandboxFile]) -> tuple[list[dict[str, object]], list[str]]:
        """Each offered file kept (its id, name and size), or why not."""
        kept: list[dict[str, object]] = []
        dropped: list[str] = []
        for file in offered:
            try:
                record = await self.files.keep_tool_output(caller, file.name, file.data, OUTPUT_TTL_S)
            except FleetchatError as exc:
                dropped.append(f"{file.name}: {exc.message}")
                continue
            kept.append({"file_id": record.id, "filename": record.filename, "bytes": record.bytes})
        return kept, dropped
