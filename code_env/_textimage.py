"""Text as an RGB image, numpy only: the ``rgb_array`` render of the environments.

A fixed grid of character cells (``columns`` x ``rows``, 6 x 10 pixels each) drawn with a 5 x 7
bitmap font of printable ASCII; any other character shows as a hollow box, long lines wrap, lines
past the last row are dropped. The image's size depends only on the grid, never on the text, so
that frames of one episode stack into a video.

>>> image = text_image(["turn 1: 3/3 public tests passed"], columns=40, rows=4)
>>> image.shape, image.dtype
((40, 240, 3), dtype('uint8'))
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RGB = tuple[int, int, int]

CELL_W, CELL_H = 6, 10  # a 5 x 7 glyph, one blank column on the right, one row above, two below
BACKGROUND: RGB = (24, 24, 28)
FOREGROUND: RGB = (220, 220, 220)
GREEN: RGB = (110, 220, 120)
RED: RGB = (240, 110, 100)

# The glyphs of chr(32) .. chr(126), then the box for every other character: 7 rows each, one
# base-32 digit per row (its 5 bits are the row's pixels, left to right).
_FONT = (
    "00000004444404AAA0000AAVAVAA4FKE5U4OP248J3CIK8LID44800002488842842224804LEL40044V440"
    "0000C48000V00000000CC01248G0EHJLPHE4C4444EEH1248VV2421HE26AIV22VGU11HE68GUHHEV124888"
    "EHHEHHEEHHF12C0CC0CC00CC0C48248G84200V0V008421248EH12404EH1DLLEEHHVHHHUHHUHHUEHGGGHE"
    "SIHHHISVGGUGGVVGGUGGGEHGNHHFHHHVHHHE44444E72222ICHIKOKIHGGGGGGVHRLLHHHHHPLJHHEHHHHHE"
    "UHHUGGGEHHHLIDUHHUKIHFGGE11UV444444HHHHHHEHHHHHA4HHHLLLAHHA4AHHHHHA444V1248GVE88888E"
    "0G84210E22222E4AH0000000000V842000000E1FHFGGMPHHU00EGGHE11DJHHF00EHVGE698S8880FHHF1E"
    "GGMPHHH40C444E20622ICGGIKOKIC44444E00QLLHH00MPHHH00EHHHE00UHUGG00DJF1100MPGGG00EGE1U"
    "88S889600HHHJD00HHHA400HHLLA00HA4AH00HHF1E00V248V244844244444448442448008L200"
    "VHHHHHV"
)
_ROWS = np.array([int(d, 32) for d in _FONT], dtype=np.uint8).reshape(-1, 7)
_BITS = ((_ROWS[:, :, None] >> np.arange(4, -1, -1, dtype=np.uint8)) & 1).astype(bool)  # (96, 7, 5)
_CELLS = np.zeros((len(_BITS), CELL_H, CELL_W), dtype=bool)
_CELLS[:, 1:8, :5] = _BITS
_BOX = len(_BITS) - 1


def _cell_ids(line: str, columns: int) -> np.ndarray:
    codes = np.fromiter((ord(c) for c in line), dtype=np.int64, count=len(line)) - 32
    codes[(codes < 0) | (codes > 94)] = _BOX
    out = np.zeros(columns, dtype=np.int64)  # 0: the space
    out[: len(codes)] = codes[:columns]
    return out


def wrap(lines: Sequence[str], columns: int) -> list[tuple[int, str]]:
    """``(index of the source line, piece)`` for every screen line: tabs expanded, long lines cut
    into pieces of ``columns`` characters."""
    out: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        text = line.expandtabs(4)
        out.extend((i, text[k : k + columns]) for k in range(0, max(len(text), 1), columns))
    return out


def text_image(lines: Sequence[str], colors: Sequence[RGB | None] | None = None, *, columns: int = 80,
               rows: int = 24) -> np.ndarray:  # fmt: skip
    """An ``(rows * 10, columns * 6, 3)`` ``uint8`` image of ``lines`` (no newlines inside a line),
    each in its colour (``colors[i]``, ``None`` or missing: light grey) on a dark background."""
    if columns < 1 or rows < 1:
        raise ValueError(f"columns, rows: expected ints >= 1, got {columns!r}, {rows!r}")
    screen = wrap(lines, columns)[:rows]
    ids = np.zeros((rows, columns), dtype=np.int64)
    fg = np.tile(np.array(FOREGROUND, dtype=np.uint8), (rows, 1))
    for r, (i, piece) in enumerate(screen):
        ids[r] = _cell_ids(piece, columns)
        color = colors[i] if colors is not None and i < len(colors) else None
        if color is not None:
            fg[r] = color
    mask = _CELLS[ids].transpose(0, 2, 1, 3).reshape(rows * CELL_H, columns * CELL_W)
    fg_px = np.repeat(fg, CELL_H, axis=0)[:, None, :]
    image = np.where(mask[:, :, None], fg_px, np.array(BACKGROUND, dtype=np.uint8))
    return np.ascontiguousarray(image, dtype=np.uint8)
