"""The one-time move of a data dir's vector chunks from the SQLite file (where the index kept them before LanceDB) into
the LanceDB index, so an upgraded stack keeps finding what it ingested before.

A file at a time: its chunks written to the index in one commit (`replace_file`), then deleted from SQLite; a crash in
between only repeats that file's write at the next start. Once the SQLite table is empty, each start costs one query.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from shared.storage.sqlite.db import SQLiteDatabase
from shared.storage.vector_index import IndexedChunk, VectorIndex

log = logging.getLogger("fleetchat.files")


def move_sqlite_chunks(db_path: Path, index: VectorIndex) -> int:
    """Move every chunk the SQLite file still holds into `index`; returns how many files moved."""
    if not db_path.exists():
        return 0
    db = SQLiteDatabase(db_path)
    moved = 0
    try:
        while True:
            with db.read() as read:
                first = read.execute("SELECT tenant_id, vector_store_id, file_id FROM vector_chunks LIMIT 1").fetchone()
                if first is None:
                    break
                key = (first["tenant_id"], first["vector_store_id"], first["file_id"])
                rows = read.execute(
                    "SELECT * FROM vector_chunks WHERE tenant_id = ? AND vector_store_id = ? AND file_id = ?"
                    " ORDER BY seq",
                    key,
                ).fetchall()
            chunks = [
                IndexedChunk(
                    r["chunk_id"], r["file_id"], int(r["seq"]), r["text"], int(r["start_offset"]),
                    int(r["end_offset"]), r["heading"], np.frombuffer(r["vector"], dtype="<f4"),
                )
                for r in rows
            ]  # fmt: skip
            index.replace_file(*key, chunks)
            with db.write() as write:
                write.execute(
                    "DELETE FROM vector_chunks WHERE tenant_id = ? AND vector_store_id = ? AND file_id = ?", key
                )
            moved += 1
        if moved:
            with db.write() as write:
                write.execute("DELETE FROM vector_generations")
            log.info("moved the chunks of %d indexed files from SQLite into the LanceDB index", moved)
    finally:
        db.close()
    return moved
