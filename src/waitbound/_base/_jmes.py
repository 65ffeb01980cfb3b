"""JMESPath expressions, compiled when a profile loads and evaluated without raising.

Compiling also checks every function an expression calls: its name must be one of
JMESPath's built-in functions and its argument count must fit the function's
signature. (The jmespath library only looks a function up when it is evaluated, and
evaluation turns that error into null: a typo in ``error`` would silently switch off
failure detection.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import jmespath
import jmespath.exceptions
import jmespath.functions
import jmespath.parser

from waitbound._base._errors import ProfileError
from waitbound._base._json_types import JSON

__all__ = ["Expression", "compile_expression", "search"]

Expression = jmespath.parser.ParsedResult

_FUNCTIONS: Final[Mapping[str, Any]] = jmespath.functions.Functions().FUNCTION_TABLE


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
        compiled = jmespath.compile(expression)
    except jmespath.exceptions.JMESPathError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ProfileError(
            f"{where}: {key} = {expression!r} is not a valid JMESPath expression ({first_line})"
        ) from None
    problem = _function_problem(compiled.parsed)
    if problem is not None:
        raise ProfileError(f"{where}: {key} = {expression!r}: {problem}")
    return compiled


def _function_problem(node: Mapping[str, Any]) -> str | None:
    """The first call in the syntax tree *node* to an unknown function, or with the
    wrong number of arguments; ``None`` when every call fits."""
    if node.get("type") == "function_expression":
        name, arguments = node["value"], node["children"]
        if name not in _FUNCTIONS:
            return f"unknown function {name}() (JMESPath's functions: {', '.join(_FUNCTIONS)})"
        signature = _FUNCTIONS[name]["signature"]
        variadic = bool(signature) and signature[-1].get("variadic", False)
        if len(arguments) < len(signature) or (not variadic and len(arguments) > len(signature)):
            expected = f"{'at least ' if variadic else ''}{len(signature)}"
            return f"{name}() takes {expected} argument(s), got {len(arguments)}"
    for child in node.get("children", ()):
        if isinstance(child, Mapping):
            problem = _function_problem(child)
            if problem is not None:
                return problem
    return None
