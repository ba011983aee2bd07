"""How code-env words a pydantic ``ValidationError`` for a person: one line, the first error.

>>> from pydantic import BaseModel, ValidationError
>>> class Options(BaseModel):
...     max_turns: int
>>> try:
...     Options(max_turns="many")
... except ValidationError as exc:
...     print(first_error(exc, prefix="config."))
config.max_turns: Input should be a valid integer, unable to parse string as an integer (got 'many')
"""

from __future__ import annotations

import re

from pydantic import ValidationError

_SCALARS = (str, int, float, bool, type(None))


def first_error(exc: ValidationError, prefix: str = "") -> str:
    """The first error of ``exc`` as ``field.path: message (got value)``, with ``prefix`` before
    the path (``"config."``, ``"task."``). The message of a ``ValueError`` raised by a validator
    comes without pydantic's "Value error, " in front; the offending value is shown when it is a
    short scalar (for a missing field pydantic holds the whole parent object: not shown); "(and N
    more)" counts the errors not shown."""
    errors = exc.errors(include_url=False)
    if not errors:  # pydantic never raises an empty one, but a message must not depend on that
        return f"{prefix.rstrip('.')}: {exc}" if prefix else str(exc)
    err = errors[0]
    cause = (err.get("ctx") or {}).get("error")
    message = str(cause) if err["type"] == "value_error" and isinstance(cause, Exception) else err["msg"]
    where = prefix + ".".join(str(part) for part in err["loc"])
    text = f"{where.rstrip('.')}: {message}" if where else message
    value = err.get("input")
    if err["type"] != "missing" and isinstance(value, _SCALARS) and f"{value!r}" not in message:
        text += f" (got {value!r:.80})"
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more)"
    return re.sub(r"\s*\n\s*", " ", text)  # one line, whatever the message holds
