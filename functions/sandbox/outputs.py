"""What a run gives back, bounded: its printed output (head and tail kept, the middle dropped) and the files it
offers (at most so many, each at most so large; the rest named as dropped), whichever runner it ran on."""

from __future__ import annotations

import posixpath

from functions.sandbox.protocol import SandboxFile, SandboxLimits


class BoundedOutput:
    """stdout+stderr kept within a byte bound: the first half and the last half, the middle dropped."""

    def __init__(self, limit: int) -> None:
        self.limit, self.head, self.tail, self.dropped = limit, bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > self.limit // 2:
            cut = len(self.tail) - self.limit // 2
            self.dropped += cut
            del self.tail[:cut]

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes of output dropped ...]\n".encode() if self.dropped else b""
        return bytes(self.head + middle + self.tail).decode("utf-8", errors="replace")


class OfferedFiles:
    """The files a run offers, admitted one by one within `limits` (count, size per file)."""

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits
        self.files: list[SandboxFile] = []
        self.dropped: list[str] = []

    def admits(self, name: str, size: int) -> bool:
        """Whether a file of this name and size fits (then `keep` it); why not is recorded in `dropped`."""
        plain = posixpath.basename(name)
        if not plain or plain != name or "\x00" in name or len(name) > 255:
            self.dropped.append(f"{name[:100]!r}: not a plain file name")
        elif size > self.limits.out_file_mb << 20:
            self.dropped.append(f"{name}: larger than {self.limits.out_file_mb} MB")
        elif len(self.files) >= self.limits.out_files:
            self.dropped.append(f"{name}: more than {self.limits.out_files} files")
        else:
            return True
        return False

    def keep(self, name: str, data: bytes) -> None:
        self.files.append(SandboxFile(name=name, data=data))
