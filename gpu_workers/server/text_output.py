"""Token ids to streamed text: incremental detokenization plus stop-string matching with hold-back.

Text that might be the start of a stop string is held back until it is known not to be, so a client never sees
part of a stop sequence (as vLLM does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


class TextAssembler:
    def __init__(self, decode: Callable[[Sequence[int]], str], stop: Sequence[str] = ()) -> None:
        self._decode = decode
        self._stop = [s for s in stop if s]
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self.text = ""  # everything decoded so far (before any stop truncation)
        self._emitted = 0  # characters of `text` already handed out
        self.stopped = False

    def _decode_new(self) -> str:
        """vLLM-style incremental decode: re-decode a short window so merges across tokens come out right."""
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        full_text = self._decode(self._ids[self._prefix_offset :])
        if len(full_text) > len(prefix_text) and not full_text.endswith("\ufffd"):
            delta = full_text[len(prefix_text) :]
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            return delta
        return ""

    def feed(self, token_ids: Sequence[int]) -> str:
        """Add new tokens; return the text that may be sent now. After a stop string matches, returns ''."""
        if self.stopped or not token_ids:
            return ""
        self._ids.extend(token_ids)
        self.text += self._decode_new()
        if self._stop:
            # Only the unsent tail plus a stop's length can hold a new match.
            window_start = max(0, self._emitted - max(len(s) for s in self._stop) + 1)
            hits = [i for s in self._stop if (i := self.text.find(s, window_start)) != -1]
            if hits:
                self.stopped = True
                self.text = self.text[: min(hits)]
                return self._take(len(self.text))
            return self._take(len(self.text) - self._held_back())
        return self._take(len(self.text))

    def flush(self) -> str:
        """At the end of generation nothing more can complete a stop string: release what was held."""
        if self.stopped:
            return ""
        tail = self._decode(self._ids[self._prefix_offset :])
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        if len(tail) > len(prefix_text):
            self.text += tail[len(prefix_text) :]
            self._prefix_offset = self._read_offset = len(self._ids)
        return self._take(len(self.text))

    def _held_back(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of some stop string."""
        longest = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(self.text)), longest, -1):
                if self.text.endswith(stop[:n]):
                    longest = n
                    break
        return longest

    def _take(self, upto: int) -> str:
        upto = max(upto, self._emitted)
        piece = self.text[self._emitted : upto]
        self._emitted = upto
        return piece
