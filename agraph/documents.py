"""Text pages and document pages drawn with Pillow, deterministic (seeded), nothing
downloaded: the inputs of the OCR text detector, the page-orientation classifier and the
layout detector (agraph/pretrained_onnx.py, agraph/detectors.py).

Text is the English prose of :func:`agraph.pretrained.english_text` cut into sentences of
six words; ``part`` 0 draws the even sentences, ``part`` 1 the odd ones, so calibration and
evaluation pages never share a sentence.  Fonts: the TrueType faces matplotlib ships
(DejaVu Sans / Serif / Mono, Computer Modern, STIX; regular, bold, italic).  Photos drawn as
figures or backgrounds are the caller's (calibration and evaluation use different photos).
"""
from __future__ import annotations

import os
from typing import List, Sequence, Tuple

import numpy as np

from .pretrained import english_text, photo, resize

F32 = np.float32
PAGE_SHAPE = (1000, 760)   # document pages, height x width
BODY_FONTS = ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "cmr10.ttf", "STIXGeneral.ttf",
              "DejaVuSans-Oblique.ttf", "DejaVuSerif-Italic.ttf")
BOLD_FONTS = ("DejaVuSans-Bold.ttf", "DejaVuSerif-Bold.ttf", "STIXGeneralBol.ttf")


def text_sentences(part: int) -> List[str]:
    """Sentences of six words of :func:`agraph.pretrained.english_text`: ``part`` 0 the even
    ones, 1 the odd ones (disjoint sets)."""
    words = english_text().split()
    chunks = [" ".join(words[k:k + 6]) for k in range(0, len(words) - 6, 6)]
    return chunks[part::2]


def font(file: str, size: int):
    """A matplotlib-shipped TrueType face at ``size`` pixels."""
    import matplotlib
    from PIL import ImageFont
    return ImageFont.truetype(os.path.join(matplotlib.get_data_path(), "fonts", "ttf", file), size)


class Writer:
    """Draws text of one ``part`` on a Pillow RGB image, taking the sentences in turn from a
    seeded starting point."""

    def __init__(self, image, rng: np.random.Generator, part: int) -> None:
        from PIL import ImageDraw
        self.draw, self.rng = ImageDraw.Draw(image), rng
        self.words = " ".join(text_sentences(part)).split()
        self.next = int(rng.integers(len(self.words)))

    def take(self, count: int) -> str:
        picked = [self.words[(self.next + k) % len(self.words)] for k in range(count)]
        self.next += count
        return " ".join(picked)

    def ink(self) -> Tuple[int, int, int]:
        return tuple(int(v) for v in self.rng.integers(0, 70, 3))

    def line(self, xy, face, width: int, fill=None) -> int:
        """One line of words no wider than ``width`` at ``xy``; returns its height."""
        text = self.take(1)
        while face.getlength(text + " " + self.words[self.next % len(self.words)]) <= width:
            text += " " + self.take(1)
        self.draw.text(xy, text, font=face, fill=fill or self.ink())
        return face.getbbox("Hg")[3]

    def paragraph(self, left: int, top: int, width: int, lines: int, face, bottom: int) -> int:
        """``lines`` lines (the last one shorter) from ``top`` down, stopping at ``bottom``;
        returns the y below the paragraph."""
        step = int(face.size * self.rng.uniform(1.25, 1.6))
        fill = self.ink()
        for k in range(lines):
            if top + step > bottom:
                break
            short = width if k < lines - 1 else int(width * self.rng.uniform(0.3, 0.9))
            self.line((left, top), face, short, fill)
            top += step
        return top


def paper_colour(rng: np.random.Generator) -> Tuple[int, int, int]:
    """Off-white with a slight tint."""
    return tuple(int(v) for v in rng.integers(225, 256, 3))


def paper(shape: Tuple[int, int], rng: np.random.Generator):
    """A Pillow RGB page of ``shape`` (height, width) in :func:`paper_colour`."""
    from PIL import Image
    return Image.new("RGB", shape[::-1], paper_colour(rng))


def finish(image, rng: np.random.Generator) -> np.ndarray:
    """The page as BGR float32 [H, W, 3] in [0, 255], with a little sensor noise."""
    rgb = np.asarray(image, F32) + rng.normal(0, 3, (image.height, image.width, 1))
    return np.ascontiguousarray(np.clip(rgb, 0, 255)[..., ::-1]).astype(F32)


def paste_photo(image, name: str, box: Tuple[int, int, int, int]) -> None:
    """Photo ``name`` resized into ``box`` = (left, top, right, bottom)."""
    from PIL import Image
    left, top, right, bottom = box
    pixels = np.clip(resize(photo(name), (bottom - top, right - left)), 0, 255).astype(np.uint8)
    image.paste(Image.fromarray(pixels), (left, top))


def text_pages(count: int, shape: Tuple[int, int], photos: Sequence[str], seed: int, part: int) -> np.ndarray:
    """``count`` pages of text, BGR [count, H, W, 3]: paragraphs in one or two columns, font
    sizes 11-26 px, some with a bold heading; every third page is a photo of ``photos`` with
    a text panel on it (a sign, a label)."""
    rng = np.random.default_rng(seed)
    pages = []
    for k in range(count):
        image = paper(shape, rng)
        writer = Writer(image, rng, part)
        left, top, right, bottom = 8, 8, shape[1] - 8, shape[0] - 8
        if k % 3 == 2:
            paste_photo(image, photos[k % len(photos)], (0, 0, shape[1], shape[0]))
            left, top = int(rng.integers(8, shape[1] // 3)), int(rng.integers(8, shape[0] // 3))
            right, bottom = min(shape[1] - 8, left + shape[1] // 2), min(shape[0] - 8, top + shape[0] // 2)
            writer.draw.rectangle((left - 6, top - 6, right + 6, bottom + 6), fill=paper_colour(rng))
        if rng.random() < 0.5:
            top += writer.line((left, top), font(BOLD_FONTS[k % len(BOLD_FONTS)], int(rng.integers(18, 30))),
                               right - left) + 10
        columns = 2 if rng.random() < 0.4 and right - left > 300 else 1
        face = font(BODY_FONTS[int(rng.integers(len(BODY_FONTS)))], int(rng.integers(11, 27)))
        width = (right - left - 16 * (columns - 1)) // columns
        for column in range(columns):
            y = top
            while y < bottom - face.size:
                y = writer.paragraph(left + column * (width + 16), y, width, int(rng.integers(2, 7)), face, bottom)
                y += int(face.size * rng.uniform(0.4, 1.2))
        pages.append(finish(image, rng))
    return np.stack(pages)


def table(writer: Writer, box: Tuple[int, int, int, int], face) -> None:
    """A ruled table of short words and numbers in ``box``."""
    left, top, right, bottom = box
    rng = writer.rng
    rows, cols = int(rng.integers(3, 8)), int(rng.integers(3, 6))
    row_h, col_w = (bottom - top) // rows, (right - left) // cols
    ink = writer.ink()
    for r in range(rows + 1):
        writer.draw.line((left, top + r * row_h, left + cols * col_w, top + r * row_h), fill=ink,
                         width=2 if r in (0, 1, rows) else 1)
    for c in range(cols + 1):
        if rng.random() < 0.5 or c in (0, cols):
            writer.draw.line((left + c * col_w, top, left + c * col_w, top + rows * row_h), fill=ink)
    for r in range(rows):
        for c in range(cols):
            text = writer.take(1) if r == 0 or c == 0 else f"{rng.uniform(0, 1000):.{int(rng.integers(0, 3))}f}"
            writer.draw.text((left + c * col_w + 4, top + r * row_h + (row_h - face.size) // 2), text[:12],
                             font=face, fill=ink)


def chart(writer: Writer, box: Tuple[int, int, int, int]) -> None:
    """A bar or line chart with axes in ``box``."""
    left, top, right, bottom = box
    rng = writer.rng
    writer.draw.line((left, top, left, bottom, right, bottom), fill=(0, 0, 0), width=2)
    values = rng.uniform(0.1, 1.0, int(rng.integers(5, 12)))
    step = (right - left) / (len(values) + 1)
    colour = tuple(int(v) for v in rng.integers(0, 200, 3))
    points = [(left + step * (k + 1), bottom - v * (bottom - top - 10)) for k, v in enumerate(values)]
    if rng.random() < 0.5:
        for x, y in points:
            writer.draw.rectangle((x - step / 3, y, x + step / 3, bottom - 1), fill=colour)
    else:
        writer.draw.line(points, fill=colour, width=3)


def document_pages(count: int, shape: Tuple[int, int], photos: Sequence[str], seed: int, part: int) -> np.ndarray:
    """``count`` document pages, BGR [count, H, W, 3]: a running header, a bold title, then
    in one or two columns paragraphs, figures (a photo of ``photos`` or a chart) with their
    captions and ruled tables with their captions, a page number at the foot."""
    rng = np.random.default_rng(seed)
    height, width = shape
    margin = width // 12
    pages = []
    for k in range(count):
        image = paper(shape, rng)
        writer = Writer(image, rng, part)
        body = font(BODY_FONTS[int(rng.integers(len(BODY_FONTS)))], int(rng.integers(13, 19)))
        small = font(BODY_FONTS[0], int(rng.integers(10, 13)))
        top = margin // 2
        if rng.random() < 0.6:
            writer.line((margin, top), small, width // 2)
            writer.draw.line((margin, top + 18, width - margin, top + 18), fill=(90, 90, 90))
        top += 40
        title = font(BOLD_FONTS[k % len(BOLD_FONTS)], int(rng.integers(24, 38)))
        top += writer.line((margin, top), title, int((width - 2 * margin) * rng.uniform(0.5, 1.0))) + 24
        columns = 2 if rng.random() < 0.4 else 1
        col_w = (width - 2 * margin - 24 * (columns - 1)) // columns
        bottom = height - margin
        for column in range(columns):
            left, y = margin + column * (col_w + 24), top
            while y < bottom - 60:
                kind = rng.choice(["text", "text", "figure", "table"])
                space = bottom - 40 - y
                if kind == "text" or space < 120:
                    y = writer.paragraph(left, y, col_w, int(rng.integers(3, 9)), body, bottom - 30) + body.size
                    continue
                block = int(min(space - 30, rng.integers(100, 260)))
                inner = (left + col_w // 10, y, left + col_w - col_w // 10, y + block)
                if kind == "table":
                    y += writer.line((left + col_w // 6, y), small, col_w * 2 // 3) + 8
                    table(writer, (inner[0], y, inner[2], y + block), small)
                    y += block + body.size
                else:
                    if rng.random() < 0.6:
                        paste_photo(image, photos[int(rng.integers(len(photos)))], inner)
                    else:
                        chart(writer, inner)
                    y += block + 8
                    y += writer.line((left + col_w // 6, y), small, col_w * 2 // 3) + body.size
        writer.draw.text((width // 2, height - margin // 2), str(int(rng.integers(1, 400))), font=small,
                         fill=(40, 40, 40))
        pages.append(finish(image, rng))
    return np.stack(pages)
