"""A scanned page's words said as text: table rows a line, cells apart by gaps and rules, wrapped cells joined.

Tesseract's word boxes written by hand (its ``image_to_data`` dictionary), on pages drawn with Pillow; the
same on real scans is in tests/processors/test_scans.py.
"""

from __future__ import annotations

import pytest
from PIL import Image, ImageDraw

from ragbus.ingestion.convert.scan_tables import page_text

HEIGHT = 40  # a line's height in pixels, as at 300 dpi
SPACE = 15  # between two words of a line


def tsv(lines: list[list[tuple[int, int, str]]], *, paragraph_per_line: bool = False) -> dict[str, list]:
    """``image_to_data``'s dictionary for lines of words given as (left, top, text), each word 20 px a letter."""
    data: dict[str, list] = {k: [] for k in ("level", "block_num", "par_num", "line_num", "left", "top", "width",
                                            "height", "text")}
    for number, words in enumerate(lines, 1):
        for left, top, text in words:
            for key, value in (("level", 5), ("block_num", 1), ("par_num", number if paragraph_per_line else 1),
                               ("line_num", number), ("left", left), ("top", top), ("width", 20 * len(text)),
                               ("height", HEIGHT), ("text", text)):
                data[key].append(value)
    return data


def words_of(text: str, left: int, top: int) -> list[tuple[int, int, str]]:
    """``text``'s words from ``left`` on one line at ``top``, a space apart."""
    out = []
    for word in text.split():
        out.append((left, top, word))
        left += 20 * len(word) + SPACE
    return out


def page(rules: list[tuple[int, int, int, int]] = ()) -> Image.Image:
    """A white page with black rules (x0, y0, x1, y1), 3 px wide."""
    image = Image.new("L", (2000, 1000), 255)
    draw = ImageDraw.Draw(image)
    for rule in rules:
        draw.line(rule, fill=0, width=3)
    return image


def test_prose_keeps_its_lines_and_paragraphs_and_gains_no_bars():
    data = tsv([words_of("The keeper climbs the tower at dusk.", 100, 100),
                words_of("He lights the lamp and logs the hour.", 100, 150)])
    assert page_text(data, page()) == "The keeper climbs the tower at dusk.\nHe lights the lamp and logs the hour."
    data = tsv([words_of("One paragraph.", 100, 100), words_of("Another one.", 100, 200)], paragraph_per_line=True)
    assert page_text(data) == "One paragraph.\n\nAnother one."


def test_cells_far_apart_are_said_a_row_a_line_and_a_tables_rows_stay_together():
    rows = [("Day", "First bus", "Last bus"), ("Monday", "05:40", "20:00"), ("Sunday", "08:00", "22:30")]
    lines = [[*words_of(a, 100, 100 + 60 * i), *words_of(b, 700, 100 + 60 * i), *words_of(c, 1300, 100 + 60 * i)]
             for i, (a, b, c) in enumerate(rows)]
    data = tsv([words_of("Times below.", 100, 20), *lines], paragraph_per_line=True)
    assert page_text(data, page()) == ("Times below.\n\nDay | First bus | Last bus\nMonday | 05:40 | 20:00\n"
                                      "Sunday | 08:00 | 22:30")


def test_a_rule_between_two_near_words_ends_a_cell_and_without_it_they_are_one():
    # "Heron S" ends 5 px before its cell's rule at x=260; "4 km" starts 12 px after it: a gap of two spaces.
    line = [[(100, 100, "Heron"), (220, 100, "S"), (272, 100, "4"), (307, 100, "km")]]
    assert page_text(tsv(line), page([(260, 80, 260, 160)])) == "Heron S | 4 km"
    assert page_text(tsv(line), page()) == "Heron S 4 km"
    # A rule shorter than the line (a letter's stroke, a dash) is not one.
    assert page_text(tsv(line), page([(260, 125, 260, 140)])) == "Heron S 4 km"


def test_a_rule_read_as_a_bar_ends_a_cell_and_is_not_a_word():
    line = [[(100, 100, "|"), (130, 100, "Model"), (250, 100, "|"), (280, 100, "Range"), (400, 100, "|")]]
    assert page_text(tsv(line)) == "Model | Range"


def test_a_cells_wrapped_text_joins_its_column_unless_a_rule_parts_the_lines():
    rows = [[*words_of("Monday to", 100, 100), *words_of("05:40", 700, 100), *words_of("12 min", 1300, 100)],
            words_of("Friday", 100, 160),
            [*words_of("Saturday", 100, 220), *words_of("06:15", 700, 220), *words_of("15 min", 1300, 220)]]
    data = tsv(rows, paragraph_per_line=True)
    assert page_text(data, page()) == "Monday to Friday | 05:40 | 12 min\nSaturday | 06:15 | 15 min"
    # A rule under "Monday to": "Friday" is a row of its own (its other cells empty).
    assert page_text(data, page([(90, 150, 1500, 150)])).startswith("Monday to | 05:40 | 12 min\n\nFriday\n\n")


def test_a_line_under_a_row_running_past_its_column_is_prose_not_a_wrap():
    rows = [[*words_of(";", 100, 100), *words_of("Fines for parking are never paid.", 300, 100)],
            words_of("Minibar charges too.", 100, 145)]
    assert page_text(tsv(rows), page()) == "; | Fines for parking are never paid.\nMinibar charges too."


def test_a_line_under_a_row_with_as_many_cells_is_a_row_not_a_wrap():
    rows = [[*words_of("Saturday", 100, 100), *words_of("06:15", 700, 100)],
            [*words_of("Sunday", 100, 145), *words_of("08:00", 700, 145)]]
    assert page_text(tsv(rows), page()) == "Saturday | 06:15\nSunday | 08:00"


@pytest.mark.parametrize("turn", ["left", "up", "down"])
def test_a_page_tesseract_turned_is_said_as_read(turn):
    """Tesseract's boxes are the image's as given: on a page turned a quarter, a line's words run up or down."""
    upright = [[*words_of("Saturday", 100, 100), *words_of("06:15", 700, 100)]]
    width, height = 2000, 1000

    def moved(left, top, text):
        right, bottom = left + 20 * len(text), top + HEIGHT
        if turn == "left":
            return (width - right, height - bottom, text), (20 * len(text), HEIGHT)
        if turn == "up":  # the page turned a quarter anticlockwise: x becomes the height less y
            return (top, width - right, text), (HEIGHT, 20 * len(text))
        return (height - bottom, left, text), (HEIGHT, 20 * len(text))

    data = tsv([[w for w, _ in (moved(*word) for word in upright[0])]])
    data["width"], data["height"] = ([size[0] for _, size in (moved(*w) for w in upright[0])],
                                     [size[1] for _, size in (moved(*w) for w in upright[0])])
    image = Image.new("L", (width, height) if turn == "left" else (height, width), 255)
    assert page_text(data, image) == "Saturday | 06:15"
