"""How many CPU threads an embedded llama.cpp engine may use for its next step: the host's cores divided among the
engines on this host that are generating at the moment.

Why (docs/engine.md, "Sharing the cores"): llama.cpp's threads meet at a spinning barrier after every operation of a
step, so an engine whose threads outnumber the cores it actually gets stalls for seconds at a time whenever another
busy process holds one of them. On a 2-core machine, `fleetchat up`'s two pools decoding at once (2 threads each)
fell from ~200 to ~10 tokens/s together, with 3 s gaps in every stream; at 1 thread each they kept ~205 tokens/s.
Alone, an engine keeps every core (its prefill and batched steps need them).

Each engine process owns one marker file in a directory shared by the host (the temp dir, per user); it touches it
while it generates. An engine counts the markers touched in the last BUSY_WINDOW_S (its own included) and takes its
share of the cores. Markers of dead processes go stale on their own; a clean shutdown removes its own. Deployed, one
engine owns its container's cores, and no other engine's marker is there to count.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

# An engine that stepped within this window counts as busy (a step takes ~5-50 ms; a quiet pool drops out quickly).
BUSY_WINDOW_S = 0.25
# How often (at most) an engine touches its marker and re-reads the others': a step should not pay syscalls each.
REFRESH_S = 0.01
# An engine that starts generating while others are busy waits (at most this long) until each of them has seen it
# (touched its marker since), so none is still running on all the cores when it joins: a step that overlaps by even
# a few milliseconds is stretched to seconds by the spinning barrier.
HANDOVER_MAX_S = 0.2
# Only engines that touched their marker this recently are waited for (one stepping now touches it every REFRESH_S
# plus a step); an older marker is an engine that has just gone quiet, or one in a long prefill step.
ACTIVE_S = 0.06
MAX_THREADS = 8  # beyond this, llama.cpp's decode of small models stops scaling


def host_cores() -> int:
    """The cores this process may run on (its affinity mask, not the machine's count), at most MAX_THREADS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_THREADS))


def default_directory() -> Path:
    return Path(tempfile.gettempdir()) / f"fleetchat-engine-cores-{os.getuid()}"


class CoreShare:
    def __init__(self, cores: int, directory: Path | None = None) -> None:
        self.cores = max(1, cores)
        self._directory = directory or default_directory()
        self._directory.mkdir(parents=True, exist_ok=True)
        self._marker = self._directory / f"{os.getpid()}-{id(self):x}"
        _remove_dead_markers(self._directory)
        # Made, not generating: counted by no one until its first step. The marker appears already dated 1970 (made
        # under a name no one counts, then renamed), so no engine stepping meanwhile sees it fresh for an instant.
        unborn = self._directory / f".{self._marker.name}"
        unborn.touch()
        os.utime(unborn, (0, 0))
        unborn.rename(self._marker)
        self._checked_at = 0.0
        self._busy = 1

    def threads_for_step(self) -> int:
        """Mark this engine busy and return its share of the cores for the step it is about to run."""
        now = time.monotonic()
        if now - self._checked_at >= REFRESH_S:
            joining = now - self._checked_at > BUSY_WINDOW_S  # the others have not counted this engine until now
            self._checked_at = now
            announced = self._touch()
            others = self._busy_others()
            if joining and others:
                others = self._await_handover(announced)
            self._busy = 1 + len(others)
        return max(1, self.cores // self._busy)

    def _touch(self) -> float:
        """Touch our marker; returns its new mtime as the file system holds it."""
        with contextlib.suppress(OSError):
            os.utime(self._marker)
            return self._marker.stat().st_mtime
        return time.time()

    def _busy_others(self) -> list[float]:
        """The mtimes of the other engines' markers touched within BUSY_WINDOW_S."""
        fresh_after = time.time() - BUSY_WINDOW_S
        mtimes = []
        with contextlib.suppress(OSError), os.scandir(self._directory) as entries:
            for entry in entries:
                if entry.name == self._marker.name or entry.name.startswith("."):
                    continue
                with contextlib.suppress(OSError):
                    mtime = entry.stat().st_mtime
                    if mtime >= fresh_after:
                        mtimes.append(mtime)
        return mtimes

    def _await_handover(self, announced: float) -> list[float]:
        """Wait until every engine stepping now has touched its marker since `announced` (and so counted this one),
        touching ours meanwhile (two engines joining at once acknowledge each other); at most HANDOVER_MAX_S."""
        deadline = time.monotonic() + HANDOVER_MAX_S
        others = self._busy_others()
        while any(announced - ACTIVE_S <= m < announced for m in others) and time.monotonic() < deadline:
            time.sleep(0.002)
            self._touch()
            others = self._busy_others()
        return others

    def close(self) -> None:
        self._marker.unlink(missing_ok=True)


def _remove_dead_markers(directory: Path) -> None:
    """Markers left by engines whose process is gone (killed, crashed): they would only go stale, but pile up."""
    for marker in directory.iterdir():
        pid = marker.name.lstrip(".").split("-", 1)[0]  # a dot: one made but not yet renamed into place
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            marker.unlink(missing_ok=True)
        except PermissionError:  # alive, someone else's
            pass
