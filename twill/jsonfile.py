"""Reading a JSON file so that every way it can be unreadable becomes one line naming the file.

Graph files (front end) and schedule files (``twill.schedule``) both come from users, so both read
through here; the module sits at the bottom of the package and imports only the error tree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from twill.errors import TwillError

__all__ = ["read_json"]


def read_json(path: Path, what: str, error: type[TwillError]) -> Any:
    """Parse a JSON file, turning every way it can be unreadable into one ``error`` line: missing,
    a directory, not UTF-8, malformed, an integer literal too long to convert, nested too deep."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise error(f"{path}: cannot read {what} ({err.strerror or err})") from err
    except json.JSONDecodeError as err:
        raise error(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from err
    except UnicodeDecodeError as err:
        raise error(f"{path}: not a UTF-8 text file (byte {err.start}: {err.reason})") from err
    except ValueError as err:  # Python refuses integer literals of more than 4300 digits
        raise error(f"{path}: not valid JSON ({str(err).split(':')[0]})") from err
    except RecursionError as err:
        raise error(f"{path}: not valid JSON (nested too deeply to read)") from err
    bad = _invalid_text(data)
    if bad is not None:
        raise error(f"{path}: the string {bad!r} is not valid Unicode text (a lone surrogate escape such as \\ud800)")
    return data


def _invalid_text(data: Any) -> str | None:
    """The first string (key or value) of a parsed JSON document that cannot be written as UTF-8:
    JSON lets "\\ud800" through, and it would fail only when printed. Iterative, as the document
    may nest as deeply as the parser allowed."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return item[:40]
    return None
