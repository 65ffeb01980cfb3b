"""One check for every object of the profile format: it is an object, with known keys."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from waitbound._base._errors import ProfileError

__all__ = ["checked_section"]


def checked_section(
    where: str, name: str, data: object, known: Collection[str]
) -> Mapping[str, object]:
    """Return *data* when it is an object whose keys are all in *known*.

    Args:
        where: names the profile in messages (``profile azure``).
        name: the object's place in the profile (``submit``, ``url_kinds.location``,
            ``submit.polling_url[0]``).
        data: the value found there.
        known: the keys the object may hold.

    Raises:
        ProfileError: one line: not an object, or the first unknown key and the known ones.
    """
    if not isinstance(data, Mapping):
        raise ProfileError(f"{where}: {name} must be an object")
    unknown = sorted(str(key) for key in set(data) - set(known))
    if unknown:
        raise ProfileError(
            f"{where}: {name} has unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
        )
    return data
