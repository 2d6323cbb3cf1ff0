"""Hot reload of the operator config file in a running gateway: a changed file's tiers (limits, SLOs, retention,
safety policy, cache TTL) and pool prices apply at once, without a restart; a file with an error is logged with its
file, line, field and reason and the last good config stays in force.

watchfiles (Rust notify: inotify/FSEvents, polling where those are missing) watches the file's directory, so an
editor or a ConfigMap that replaces the file by a rename is seen as well as an in-place write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from watchfiles import Change, awatch

from shared.operator_config import ConfigError, OperatorConfig, install_limits, load_config

log = logging.getLogger("fleetchat.config")
# Read once at start into Settings and the services built from it: a change applies at the next restart.
_START_ONLY = ("guard", "judge", "capacity", "server_tools")


class Reloader:
    """The last good config of one file, and how a changed file is applied over it."""

    def __init__(self, path: Path, last_good: OperatorConfig) -> None:
        self.path = path
        self.last_good = last_good

    def reload(self) -> bool:
        """Apply the file's live-reloadable sections; False (and the problems logged) when it is refused."""
        try:
            config = load_config(self.path)
        except ConfigError as exc:
            for issue in exc.issues:
                log.error("config reload refused, the last good config stays in force: %s", issue)
            return False
        restart = install_limits(config)
        restart += [name for name in _START_ONLY if getattr(config, name) != getattr(self.last_good, name)]
        self.last_good = config
        # At warning: the gateway logs warnings and up, and an operator wants to see the reload happen.
        log.warning("config reloaded from %s: tiers and prices in force", self.path)
        if restart:
            log.warning("config sections %s changed: they apply at the next restart", ", ".join(restart))
        return True


@contextlib.asynccontextmanager
async def watching(path: Path) -> AsyncIterator[None]:
    """Reload `path` whenever it changes, for as long as the context is open (the file as it is now: last good)."""
    stop = asyncio.Event()
    reloader = Reloader(path.resolve(), load_config(path))
    task = asyncio.create_task(_watch(reloader, stop), name="config-watch")
    try:
        yield
    finally:
        stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _watch(reloader: Reloader, stop: asyncio.Event) -> None:
    def ours(change: Change, changed: str) -> bool:
        return Path(changed) == reloader.path and change != Change.deleted

    # debounce: an editor's write-then-rename is one change, not two reloads of a half-written file.
    async for _ in awatch(reloader.path.parent, watch_filter=ours, debounce=300, stop_event=stop, recursive=False):
        await asyncio.to_thread(reloader.reload)  # reads a file: off the event loop
