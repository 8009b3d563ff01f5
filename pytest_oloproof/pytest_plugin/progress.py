"""The live progress line, written between pytest's own lines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def progress_writer(tr: Any) -> Callable[[str], bool]:
    """Write the progress line only between pytest's lines, as pytest's own `[ 40%]` progress does.

    pytest tracks where its output stands: the terminal writer's width of the current line
    and the reporter's `currentfspath` (the file prefix of a line of dots, a node id in -v,
    or -2 once a -v line is finished). Writing a line break of our own into a line of dots
    would cut it short and make pytest reprint the file prefix, and in -v it would land
    between a node id and its outcome. So the line is written only when pytest is at the
    start of a line (after it wrapped a line of dots with its percentage), or when a -v
    line is finished (pytest ends it itself before the next node id); otherwise this
    returns False and the display tries again on the next item.
    """
    tw = tr.config.get_terminal_writer() if tr is not None else None  # pytest's own writer, public API

    def write(line: str) -> bool:
        width = getattr(tw, "width_of_current_line", None)
        if tw is None or width is None:
            return False
        if width == 0:
            tw.line(line)  # a line of its own; the dots go on below it under the same prefix
        elif getattr(tr, "currentfspath", None) == -2:
            tw.write("\n" + line)  # pytest's next node id starts with the line break that ends this one
        else:
            return False
        tw.flush()
        return True

    return write
