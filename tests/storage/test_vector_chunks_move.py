"""A data dir indexed before LanceDB: its SQLite chunks move into the LanceDB index when the gateway opens its stores,
and search finds them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from functions.files.backends import open_file_backends
from shared.settings import Settings
from shared.storage.sqlite.db import SQLiteDatabase


def test_old_sqlite_chunks_move_into_the_index_once(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    db = SQLiteDatabase(settings.db_path)  # the schema as every earlier version made it
    with db.write() as write:
        for seq, vector in enumerate(([1.0, 0.0], [0.0, 1.0])):
            write.execute(
                "INSERT INTO vector_chunks (tenant_id, vector_store_id, file_id, seq, chunk_id, text, start_offset,"
                " end_offset, heading, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ("ten_1", "vs_1", "file_1", seq, f"file_1-{seq}", f"old text {seq}", seq * 10, seq * 10 + 8, None,
                 np.array(vector, "<f4").tobytes()),
            )  # fmt: skip
        write.execute("INSERT INTO vector_generations VALUES ('ten_1', 'vs_1', 2)")
    db.close()

    backends = open_file_backends(settings)
    try:
        assert [h.text for h in backends.index.chunks("ten_1", "vs_1")] == ["old text 0", "old text 1"]
        assert backends.index.search("ten_1", "vs_1", np.array([0.0, 1.0]), 1)[0].chunk_id == "file_1-1"
        assert backends.index.keyword_search("ten_1", "vs_1", "old", 5)
    finally:
        backends.close()
    check = SQLiteDatabase(settings.db_path)
    with check.read() as read:
        assert read.execute("SELECT COUNT(*) FROM vector_chunks").fetchone()[0] == 0
    check.close()
    again = open_file_backends(settings)  # nothing left to move: the index is as it was
    try:
        assert again.index.count("ten_1", "vs_1") == 2
    finally:
        again.close()
