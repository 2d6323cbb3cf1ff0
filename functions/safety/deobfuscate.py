"""Undo cheap obfuscation before judging: leetspeak inside words, letters spaced or dotted apart, zero-width marks."""

from __future__ import annotations

import re
import unicodedata

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "!": "i"})
# A word mixing letters with leet digits/symbols ("m3th", "b0mb", "h@ck"); plain numbers are left alone.
_LEET_WORD = re.compile(r"\b(?=[\w@$!]*[a-zA-Z])(?=[\w@$!]*[013457@$!])[\w@$!]{3,}")
# Single letters separated by one space, dot, dash or underscore: "b o m b", "m.e.t.h", "k-i-l-l".
_SPACED = re.compile(r"\b(?:[a-zA-Z][ ._\-*]){2,}[a-zA-Z]\b")


def deobfuscate(text: str) -> str:
    """`text` with obfuscation undone (the same string when there was none)."""
    text = unicodedata.normalize("NFKC", text).translate(_ZERO_WIDTH)
    text = _SPACED.sub(lambda m: re.sub(r"[ ._\-*]", "", m.group()), text)
    return _LEET_WORD.sub(lambda m: m.group().translate(_LEET), text)
