"""JMESPath expressions, compiled when a profile loads and evaluated without raising."""

from __future__ import annotations

import jmespath
import jmespath.exceptions
import jmespath.parser

from waitbound._errors import ProfileError
from waitbound._json import JSON

__all__ = ["Expression", "compile_expression", "search"]

Expression = jmespath.parser.ParsedResult


def search(expression: jmespath.parser.ParsedResult, body: JSON) -> JSON:
    """Evaluate *expression*; a JMESPath type error (e.g. a function on null) reads as null."""
    try:
        value: JSON = expression.search(body)
    except jmespath.exceptions.JMESPathError:
        return None
    return value


def compile_expression(where: str, key: str, expression: object) -> Expression:
    """Compile *expression* for the profile key *key*.

    Raises:
        ProfileError: not a string, or not valid JMESPath (the message names the key).
    """
    if not isinstance(expression, str) or not expression.strip():
        raise ProfileError(f"{where}: {key} must be a JMESPath expression string")
    try:
        return jmespath.compile(expression)
    except jmespath.exceptions.JMESPathError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ProfileError(
            f"{where}: {key} = {expression!r} is not a valid JMESPath expression ({first_line})"
        ) from None
