"""How the onnx backend groups texts sorted by length into onnxruntime calls."""

from __future__ import annotations

import numpy as np

from ragbus.embed.onnx_backend import batches


def _sizes(lengths: list[int], most: int, tokens: int) -> list[list[int]]:
    ordered = np.array(sorted(lengths))
    return [ordered[s].tolist() for s in batches(ordered, most, tokens)]


def test_long_texts_go_one_a_call_and_short_ones_many():
    assert _sizes([210, 230, 256, 256], most=32, tokens=256) == [[210], [230], [256], [256]]
    assert _sizes([12] * 40, most=32, tokens=256) == [[12] * 21, [12] * 19]  # 21 x 12 = 252 tokens
    assert _sizes([12] * 40, most=16, tokens=4096) == [[12] * 16, [12] * 16, [12] * 8]


def test_a_call_is_padded_to_its_longest_and_a_text_over_the_budget_still_goes():
    # 100 + 120 would pad to 2 x 120 = 240 <= 256; a third would pad to 3 x 130 > 256
    assert _sizes([100, 120, 130, 300], most=32, tokens=256) == [[100, 120], [130], [300]]
    assert _sizes([], most=32, tokens=256) == []
