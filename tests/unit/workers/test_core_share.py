"""The cores of one host divided among the embedded engines generating on it (gpu_workers/llama_cpp/core_share.py): all
of them to an engine alone, a share to each of several at once, none held by an engine gone quiet or dead."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpu_workers.llama_cpp import core_share
from gpu_workers.llama_cpp.core_share import BUSY_WINDOW_S, CoreShare, host_cores


def test_an_engine_alone_gets_every_core(tmp_path: Path) -> None:
    share = CoreShare(4, tmp_path)
    assert share.threads_for_step() == 4
    assert share.threads_for_step() == 4


def test_engines_generating_at_once_split_the_cores(tmp_path: Path) -> None:
    first, second = CoreShare(4, tmp_path), CoreShare(4, tmp_path)
    assert first.threads_for_step() == 4, "alone so far"
    assert second.threads_for_step() == 2, "it joins one already generating"
    time.sleep(core_share.REFRESH_S)
    assert first.threads_for_step() == 2, "the first sees it at its next refresh"
    third = CoreShare(4, tmp_path)
    assert third.threads_for_step() == 1
    assert CoreShare(1, tmp_path).threads_for_step() == 1, "never fewer than one thread"


def test_an_engine_gone_quiet_gives_its_cores_back(tmp_path: Path) -> None:
    busy, quiet = CoreShare(2, tmp_path), CoreShare(2, tmp_path)
    quiet.threads_for_step()
    past = time.time() - 2 * BUSY_WINDOW_S
    os.utime(quiet._marker, (past, past))
    assert busy.threads_for_step() == 2
    quiet.close()
    assert not quiet._marker.exists(), "a clean shutdown removes its marker"


def test_a_dead_engines_marker_is_removed(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"{gone.stdout.strip()}-abc"
    left.touch()
    share = CoreShare(2, tmp_path)
    assert not left.exists()
    assert share.threads_for_step() == 2


def test_an_engine_joining_waits_until_the_one_stepping_has_seen_it(tmp_path: Path) -> None:
    stepping = CoreShare(2, tmp_path)
    seen: list[int] = []
    stop = threading.Event()

    def steps() -> None:  # another engine, stepping every few milliseconds
        while not stop.is_set():
            seen.append(stepping.threads_for_step())
            time.sleep(0.003)

    worker = threading.Thread(target=steps)
    worker.start()
    try:
        time.sleep(0.05)
        joining = CoreShare(2, tmp_path)
        assert seen[-1] == 2, "a made engine that has not stepped yet is not counted"
        assert joining.threads_for_step() == 1
        deadline = time.monotonic() + 2.0  # the handover is seen at once; a loaded CI host may delay the thread
        while seen[-1] != 1 and time.monotonic() < deadline:
            time.sleep(0.002)
        assert seen[-1] == 1, "the other runs on its share too"
    finally:
        stop.set()
        worker.join()


def test_a_marker_being_made_is_never_counted_fresh(tmp_path: Path) -> None:
    stepping = CoreShare(2, tmp_path)
    counted: list[int] = []
    stop = threading.Event()

    def scans() -> None:  # what a stepping engine reads, as often as it can
        while not stop.is_set():
            counted.append(len(stepping._busy_others()))

    scanner = threading.Thread(target=scans)
    scanner.start()
    try:
        for _ in range(300):  # before: touched (fresh) then dated 1970, so a scan in between counted it for an instant
            CoreShare(2, tmp_path).close()
    finally:
        stop.set()
        scanner.join()
    assert counted and max(counted) == 0, "an engine made but not generating is never counted"
    assert not list(tmp_path.glob(".*")), "nothing left under the name used while making it"


def test_the_host_cores_are_this_process_affinity_capped() -> None:
    assert 1 <= host_cores() <= min(len(os.sched_getaffinity(0)), core_share.MAX_THREADS)
