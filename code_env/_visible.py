"""Text a person reads, with nothing hidden: ``visible`` escapes every character a terminal (or
a font) would act on or draw as nothing, the way Python's ``repr`` spells it.

The attacker is the policy being trained: a program may write ESC sequences (cursor up, erase
line) in a comment or on stdout to hide a hard-coded table from whoever audits its 1.0 episode,
BEL to ring, a bidi override to show its code in another order than it runs, zero-width or tag
characters to carry text nobody sees. Every human-facing output of the package (the ``code-env``
commands' text, ``env.render()``, the demo and baseline tables) passes through ``visible``;
machine-readable outputs (JSON logs, ``--json``, the agent's observations) never do.

Escaped (``\\x1b``, ``\\r``, ``\\u202e``, ``\\U000e0041``):

- control characters: C0 but newline (kept unless ``keep_newlines=False``) and tab, DEL, C1;
- format characters (Unicode category Cf): bidi embeddings, overrides and isolates
  (U+202A-U+202E, U+2066-U+2069), marks (U+200E, U+200F, U+061C), zero-width space and joiners
  (U+200B-U+200D), word joiner (U+2060), BOM (U+FEFF), tag characters (U+E0000-U+E007F), ...;
- lone surrogates, private-use and unassigned code points, line and paragraph separators
  (U+2028, U+2029);
- the other default-ignorable characters that draw nothing although they are letters or marks:
  Hangul fillers (U+115F, U+1160, U+3164, U+FFA0), U+034F, U+17B4, U+17B5, the Mongolian free
  variation selectors, and variation selectors (U+FE00-U+FE0F, U+E0100-U+E01EF) except one
  U+FE0E or U+FE0F right after a symbol or punctuation (``❤️``, ``‼️``) or in a keycap (``1️⃣``).

Kept, so that an emoji sequence shows as itself: a zero-width joiner between two symbols
(``👨‍👩‍👧``; a skin tone or U+FE0F may come between). Everything else is kept as is: letters of any
script (é, 中文), emoji, spaces, U+FFFD. A backslash is not doubled (code stays readable), so
``\\x1b`` on screen is either an ESC or those four characters; either way nothing is hidden.

>>> visible("ok\\x1b[1A\\x1b[2K\\a done\\u202e\\u200b")
'ok\\\\x1b[1A\\\\x1b[2K\\\\x07 done\\\\u202e\\\\u200b'
>>> visible("line 1\\nline 2\\tcafé 中文 👍")
'line 1\\nline 2\\tcafé 中文 👍'
>>> visible("a\\nb", keep_newlines=False)
'a\\\\nb'
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from functools import cache

__all__ = ["visible"]

_DRAW_NOTHING = frozenset({  # letters and marks (not Cf) that are default-ignorable: they draw nothing
    0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x3164, 0xFFA0,
    *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0),
})  # fmt: skip
_ZWJ, _VS15, _VS16 = "\u200d", "\ufe0e", "\ufe0f"
_ASCII_HIDDEN = re.compile(r"[^\t\n\x20-\x7e]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _hidden(ch: str) -> bool:
    """A control, format, surrogate, private-use or unassigned character, or a line or paragraph
    separator (``str.isprintable`` is also False for spaces, which show)."""
    return not ch.isprintable() and ch not in "\n\t" and unicodedata.category(ch) not in ("Zs",)


_UNASSIGNED_PLANES = (0x40000, 0xDFFFF)  # planes 4-13: no character assigned (Unicode 16)
_PRIVATE_PLANES = (0xF0000, 0x10FFFF)  # planes 15-16: private use (and two noncharacters each)


@cache
def _pattern() -> re.Pattern[str]:
    """One character class of every hidden code point, built on first use (the planes known to be
    unassigned or private use whole, without a look at each of their 1.6 million code points)."""
    ranges: list[list[int]] = []
    for cp in itertools.chain(range(_UNASSIGNED_PLANES[0]), range(_UNASSIGNED_PLANES[1] + 1, _PRIVATE_PLANES[0])):
        ch = chr(cp)
        if (cp in _DRAW_NOTHING) if ch.isprintable() else _hidden(ch):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    ranges += [list(_UNASSIGNED_PLANES), list(_PRIVATE_PLANES)]
    return re.compile("[" + "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges) + "]")


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    cp = ord(ch)
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def _symbol(ch: str) -> bool:
    """An emoji's part a joiner may join: a symbol (So) or a skin tone (U+1F3FB-U+1F3FF)."""
    return unicodedata.category(ch) == "So" or 0x1F3FB <= ord(ch) <= 0x1F3FF


def _kept(text: str, i: int) -> bool:
    """Whether the hidden-looking character at ``i`` is part of an emoji: a single U+FE0E/U+FE0F
    after a symbol or punctuation (``❤️``) or in a keycap (``1️⃣``), a joiner between two symbols."""
    ch = text[i]
    before = text[i - 1] if i > 0 else ""
    if ch in (_VS15, _VS16):  # (never after a letter, a space or another selector: those carry data, not a form)
        if before.isascii():
            return before in "0123456789#*" and before != "" and text[i + 1 : i + 2] == "\u20e3"
        return unicodedata.category(before)[0] in "SP"
    if ch == _ZWJ:
        j = i - 1
        if j >= 0 and text[j] == _VS16:
            j -= 1
        return j >= 0 and i + 1 < len(text) and _symbol(text[j]) and _symbol(text[i + 1])
    return False


def visible(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with every control, format, invisible and non-printing character escaped (see the
    module's docstring); newlines kept unless ``keep_newlines=False`` (one line of a table),
    tabs kept. Plain text in any script, emoji included, comes back unchanged."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    if text.isascii() and not _ASCII_HIDDEN.search(text):
        out = text  # the common case, without the table
    else:
        pattern = _pattern()
        pieces: list[str] = []
        last = 0
        for m in pattern.finditer(text):
            i = m.start()
            if _kept(text, i):
                continue
            pieces += [text[last:i], _escape(text[i])]
            last = i + 1
        pieces.append(text[last:])
        out = "".join(pieces)
    return out if keep_newlines else out.replace("\n", "\\n")
