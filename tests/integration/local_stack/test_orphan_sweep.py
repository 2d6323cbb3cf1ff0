"""The retention job's orphan sweep with real processes: a process that dies (SIGKILL) between storing an upload's body
and inserting its metadata leaves a body no file names; `fleetchat sweep` (a real CLI process on the same data dir)
keeps it while it is younger than the grace age (it may be an upload in flight), deletes it after, and never touches a
body whose file exists or an orphan of a tenant under legal hold."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.accounts import TenantChanges
from shared.storage.files import FileQuota, StoredFile
from shared.storage.sqlite.accounts import SQLiteStore
from tests.support.processes import REPO

# The upload's own code path (FilesService._store: the body's put, then the metadata insert), in a process that is
# killed right where the insert would run: the crash the orphan sweep exists for.
DIES_BEFORE_THE_INSERT = """
import os, signal, sys
from datetime import UTC, datetime
from functions.files.backends import open_file_backends
from functions.files.files_service import FilesService
from shared.settings import Settings
from shared.storage.files import FileQuota, StoredFile

backends = open_file_backends(Settings(data_dir=sys.argv[1]))
backends.files.add_file = lambda record, quota: os.kill(os.getpid(), signal.SIGKILL)
record = StoredFile(id=sys.argv[3], tenant_id=sys.argv[2], filename="notes.md", purpose="assistants", bytes=5,
                    kind="markdown", sha256="0" * 64, created_at=datetime.now(UTC))
FilesService(backends)._store(record, b"hello", FileQuota(max_files=10, max_total_bytes=1000))
"""


def _crash_mid_upload(data: Path, tenant_id: str, file_id: str) -> None:
    died = subprocess.run(
        [sys.executable, "-c", DIES_BEFORE_THE_INSERT, str(data), tenant_id, file_id], cwd=REPO, timeout=120
    )
    assert died.returncode == -signal.SIGKILL


def _sweep(data: Path, as_of: datetime) -> dict[str, str]:
    command = [
        sys.executable,
        "-m",
        "functions.cli",
        "sweep",
        "--data-dir",
        str(data),
        "--as-of",
        as_of.isoformat(),
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.strip("│ ").split("│") for line in done.stdout.splitlines() if line.count("│") == 3]
    return {name.strip(): count.strip() for name, count in rows}


def test_a_body_left_by_a_crash_between_put_and_insert_is_swept_after_the_grace_age(tmp_path: Path) -> None:
    data = tmp_path / "data"
    tenants = SQLiteStore(data / "fleetchat.db")
    owner = tenants.create_tenant("owner", Tier.PLUS)
    held = tenants.create_tenant("held", Tier.PLUS)
    tenants.update_tenant(held.id, TenantChanges(legal_hold=True))
    tenants.close()
    _crash_mid_upload(data, owner.id, "file-orphan")
    _crash_mid_upload(data, held.id, "file-heldorphan")
    # A file stored whole, through the same backends (its body and its metadata).
    from functions.files.backends import open_file_backends
    from functions.files.files_service import FilesService

    backends = open_file_backends(Settings(data_dir=data))
    kept = StoredFile(
        id="file-kept", tenant_id=owner.id, filename="kept.md", purpose="assistants", bytes=4, kind="markdown",
        sha256="0" * 64, created_at=datetime.now(UTC),
    )  # fmt: skip
    FilesService(backends)._store(kept, b"kept", FileQuota(max_files=10, max_total_bytes=1000))
    partial = data / "files" / owner.id / ".file-cut.partial"  # a local put killed before its rename
    partial.write_bytes(b"half")
    try:
        assert backends.blobs.read(owner.id, "file-orphan") == b"hello"  # the crash left the body...
        assert backends.files.get_file(owner.id, "file-orphan") is None  # ...and no metadata
        now = datetime.now(UTC)
        assert _sweep(data, now)["orphan bodies deleted"] == "0"  # young: maybe an upload in flight
        assert backends.blobs.read(owner.id, "file-orphan") == b"hello" and partial.exists()
        swept = _sweep(data, now + timedelta(hours=2))  # past the default grace of one hour
        assert swept["orphan bodies deleted"] == "2" and swept["files deleted"] == "0"
        assert backends.blobs.read(owner.id, "file-orphan") is None and not partial.exists()
        assert backends.blobs.read(owner.id, "file-kept") == b"kept"  # its file exists
        assert backends.blobs.read(held.id, "file-heldorphan") == b"hello"  # legal hold keeps everything
    finally:
        backends.close()
