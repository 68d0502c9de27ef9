"""A stored traceback as the job page shows it: the user's own frames and the exception, with awa's
frames (those in the ``awa_django`` package: the executor, the worker) folded away below, and the
traceback as written a click away."""

from __future__ import annotations

import re

from django.utils.html import format_html
from django.utils.safestring import SafeString

_FRAME = re.compile(r'^  File "(?P<path>[^"]*)", line \d+')
AWA_PATH = re.compile(r"[/\\]awa_django[/\\]")


def split_frames(text: str) -> tuple[list[str], list[str], str]:
    """(the user's frames, awa's frames, the exception's last line), each frame its lines joined."""
    user: list[str] = []
    awa: list[str] = []
    frame: list[str] = []
    path = ""
    last = ""

    def close() -> None:
        if frame:
            (awa if AWA_PATH.search(path) else user).append("\n".join(frame))
            frame.clear()

    for line in text.splitlines():
        match = _FRAME.match(line)
        if match is not None:
            close()
            path = match["path"]
            frame.append(line)
        elif frame and line.startswith("    "):
            frame.append(line)
        else:
            close()
            if line.strip() and not line.startswith("Traceback (most recent call last)"):
                last = line.strip()
    close()
    return user, awa, last


def fold_traceback(text: str) -> SafeString:
    """The user's frames and the exception, as a traceback without awa's frames; awa's frames and
    the traceback as written (chained exceptions included) folded below it."""
    user, awa, last = split_frames(text)
    if not user and not awa:  # not a Python traceback: show it as it is
        return format_html('<pre class="awa-pre awa-traceback">{}</pre>', text)
    shown = "\n".join(["Traceback (most recent call last):", *user, last])
    folded = (
        format_html(
            '<details class="awa-awa-frames"><summary>{} frame{} of awa_django, folded</summary>{}</details>',
            len(awa),
            "" if len(awa) == 1 else "s",
            format_html('<pre class="awa-pre awa-frame">{}</pre>', "\n".join(awa)),
        )
        if awa
        else ""
    )
    return format_html(
        '<pre class="awa-pre awa-traceback">{}</pre>{}'
        '<details class="awa-raw-traceback"><summary>the traceback as written</summary>'
        '<pre class="awa-pre">{}</pre></details>',
        shown,
        folded,
        text,
    )
