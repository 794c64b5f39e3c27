"""Progress of long commands (ingest, kg load, first use, record) on stderr: a bar on a terminal, lines in a log.

On a terminal tqdm draws the bar, with the rate and the time left. Anywhere
else (a log file, CI output, a pipe) a bar's ``\\r`` frames pile up into one
unreadable line, so progress is written as plain lines instead: the first
step, then one line every ``[client] progress_interval_s`` at most, then the
last, each with the count, the rate and the time left.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Never, TextIO

from ragbus.config.settings import ClientSettings

from .printable import printable

if TYPE_CHECKING:
    from tqdm import tqdm

LOG_INTERVAL_S = ClientSettings().progress_interval_s
LABEL_CHARS = 40
_LINE = "{desc}{n_fmt}/{total_fmt} ({percentage:.0f}%) [{elapsed}<{remaining}, {rate_fmt}]"
_LINE_NO_TOTAL = "{desc}{n_fmt} [{elapsed}, {rate_fmt}]"


class Progress:
    """``show(done, total, label)``: ``done`` of ``total`` steps (``total`` None when unknown), now at ``label``.

    Reaching ``done == total`` ends the display; ``close()`` ends it earlier (or for an unknown total).
    """

    def __init__(
        self,
        out: TextIO | None = None,
        *,
        unit: str = "doc",
        interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out if out is not None else sys.stderr
        self.unit = unit
        self.interval_s = interval_s
        self.terminal = _is_terminal(self.out)
        self._clock = clock
        # tqdm's (fed by update, over no iterable: Never), on a terminal, from the first step to the end
        self._bar: tqdm[Never] | None = None
        self._started = clock()
        self._last_line = float("-inf")
        self._last: tuple[int, int | None, str] | None = None  # the latest step
        self._shown: tuple[int, int | None, str] | None = None  # the latest step written as a line
        self._closed = False

    def __call__(self, done: int, total: int | None, label: str) -> None:
        if self._closed:
            return
        label = printable(label)[:LABEL_CHARS]  # a document's title: its control characters escaped
        self._last = (done, total, label)
        if self.terminal:
            self._draw(done, total, label)
        else:
            now = self._clock()
            if now - self._last_line >= self.interval_s or done == total:
                self._line(done, total, label, now)
        if done == total:
            self.close()

    def close(self) -> None:
        """End the display: the bar stays on screen; a log gets the last step if it was not written yet."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self._last is not None and self._last != self._shown:
            self._line(*self._last, self._clock())

    def _draw(self, done: int, total: int | None, label: str) -> None:
        from tqdm import tqdm

        if self._bar is None:
            self._bar = tqdm(total=total, file=self.out, unit=self.unit, dynamic_ncols=True, leave=True,
                             mininterval=0.2)
        bar = self._bar
        if bar.total != total:
            bar.total = total
        bar.set_description_str(label, refresh=False)
        bar.update(done - bar.n)  # redraws at most every mininterval

    def _line(self, done: int, total: int | None, label: str, now: float) -> None:
        from tqdm import tqdm

        elapsed = now - self._started
        text = tqdm.format_meter(done,
                                 total,  # type: ignore[arg-type]  # None (unknown) is documented; the stub says float
                                 elapsed, prefix=f"{label}: " if label else "", unit=self.unit,
                                 bar_format=_LINE if total else _LINE_NO_TOTAL)
        print(text, file=self.out, flush=True)
        self._last_line = now
        self._shown = (done, total, label)


def _is_terminal(out: TextIO) -> bool:
    """A terminal a bar can be drawn on: a pseudo-terminal of no width (some CI runners) gets lines."""
    try:
        return out.isatty() and os.get_terminal_size(out.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):  # no isatty or fileno, closed, or no size
        return False


def progress_bar(out: TextIO | None = None, *, unit: str = "doc", interval_s: float = LOG_INTERVAL_S) -> Progress:
    """What ingest, kg load and first use call as ``show(done, total, label)`` after each step."""
    return Progress(out, unit=unit, interval_s=interval_s)
