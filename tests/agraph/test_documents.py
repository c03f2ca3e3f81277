"""The rendered text and document pages (agraph/documents.py): deterministic, the two parts
share no sentence, and the pages hold ink where text is drawn."""
from __future__ import annotations

import numpy as np

from agraph import documents
from agraph.pretrained import PHOTOS_CAL


def test_parts_share_no_sentence():
    even, odd = documents.text_sentences(0), documents.text_sentences(1)
    assert len(even) > 50 and len(odd) > 50
    assert not set(even) & set(odd)


def test_text_pages_are_seeded_and_hold_text():
    pages = documents.text_pages(3, (128, 192), PHOTOS_CAL, seed=5, part=1)
    assert pages.shape == (3, 128, 192, 3) and pages.dtype == np.float32
    assert np.array_equal(pages, documents.text_pages(3, (128, 192), PHOTOS_CAL, seed=5, part=1))
    assert not np.array_equal(pages, documents.text_pages(3, (128, 192), PHOTOS_CAL, seed=6, part=1))
    ink = (pages[:2] < 100).mean(axis=(1, 2, 3))   # the two paper pages: dark glyphs on light paper
    assert np.all(ink > 0.01) and np.all(ink < 0.4)


def test_document_pages_have_title_body_and_foot():
    page = documents.document_pages(1, documents.PAGE_SHAPE, PHOTOS_CAL, seed=0, part=0)[0]
    dark_rows = (page.min(axis=(1, 2)) < 100)
    height = documents.PAGE_SHAPE[0]
    assert dark_rows[:height // 8].any() and dark_rows[height // 4:3 * height // 4].mean() > 0.3
    assert dark_rows[-height // 16:].any()   # the page number
