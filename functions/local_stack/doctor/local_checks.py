"""Local checks: the data dir is writable and its SQLite file opens at the code's schema version; the web build."""

from __future__ import annotations

import sqlite3
import uuid
from html.parser import HTMLParser
from pathlib import Path

from functions.local_stack.doctor.results import CheckResult, fail, ok, warn
from shared.settings import Settings
from shared.storage.conversations import StoreUnavailableError
from shared.storage.sqlite.db import MIGRATIONS, SQLiteDatabase


def check_data_dir(settings: Settings) -> list[CheckResult]:
    """Created where missing (as `fleetchat up` would), then a file written and removed in it."""
    where = settings.data_dir
    hint = f"make {where} writable by this user (chmod u+w), or point FLEETCHAT_DATA_DIR elsewhere"
    try:
        where.mkdir(parents=True, exist_ok=True)
        probe = where / f".doctor-{uuid.uuid4().hex}"
        probe.write_bytes(b"probe")
        probe.unlink()
    except OSError as exc:
        return [fail("stores", "data dir", f"{where}: {exc.strerror or exc}", hint)]
    return [ok("stores", "data dir", f"{where} is writable")]


def _file_version(path: Path) -> int:
    """The schema version on disk, read without changing anything (a read-only connection)."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def check_sqlite(settings: Settings) -> list[CheckResult]:
    """The database opens (migrations applied, as the gateway does at start), passes quick_check and takes a write."""
    path, latest = settings.db_path, len(MIGRATIONS)
    name = "sqlite"
    try:
        if path.exists() and (found := _file_version(path)) > latest:
            hint = "run the fleetchat version that wrote it, or restore a backup made for this one"
            return [fail("stores", name, f"{path} is at schema {found}, newer than this code's {latest}", hint)]
        db = SQLiteDatabase(path, busy_timeout_s=1.0)
    except (sqlite3.Error, StoreUnavailableError, OSError) as exc:
        hint = f"make {path} and its directory writable, or stop the process holding its write lock"
        return [fail("stores", name, f"cannot open {path}: {exc}", hint)]
    try:
        with db.read() as conn:
            verdict = str(conn.execute("PRAGMA quick_check").fetchone()[0])
        if verdict != "ok":
            return [fail("stores", name, f"{path} is damaged: {verdict[:200]}", "restore the data dir from a backup")]
        with db.write() as conn:  # proves the write lock and the file's write permission, and leaves nothing behind
            conn.execute("CREATE TABLE doctor_probe (x INTEGER)")
            conn.execute("DROP TABLE doctor_probe")
        version = db.schema_version
    except (sqlite3.Error, StoreUnavailableError) as exc:
        hint = f"make {path} writable, or stop the process holding its write lock"
        return [fail("stores", name, f"{path} cannot be written: {exc}", hint)]
    finally:
        db.close()
    return [ok("stores", name, f"{path} at schema {version}/{latest}, writable")]


class _References(HTMLParser):
    """The same-origin paths a page loads (scripts, styles, icons, preloads)."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for attr, value in attrs:
            if attr in ("src", "href") and value and value.startswith("/") and not value.startswith("//"):
                self.paths.append(value.split("?")[0].split("#")[0])


def check_web_build(settings: Settings) -> list[CheckResult]:
    dist, name = settings.web_dist_dir, "web build"
    build_hint = "run `npm ci && npm run build` in web/ (or set FLEETCHAT_WEB_DIST_DIR)"
    index = dist / "index.html"
    if not index.is_file():
        return [fail("web", name, f"no {index}: / serves no chat page", build_hint)]
    parser = _References()
    parser.feed(index.read_text(encoding="utf-8", errors="replace"))
    if any(path.startswith("/src/") for path in parser.paths):
        return [fail("web", name, f"{index} is the unbuilt source page (loads /src/)", build_hint)]
    missing = [path for path in parser.paths if not (dist / path.lstrip("/")).is_file()]
    if missing:
        return [fail("web", name, f"index.html loads missing file(s) {missing[:5]}", build_hint)]
    if not parser.paths:
        return [warn("web", name, f"{index} loads no scripts or styles", "check the build output")]
    return [ok("web", name, f"{index} and its {len(parser.paths)} referenced file(s)")]
