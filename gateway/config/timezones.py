"""A settings field holding an IANA time zone name, checked when the settings load."""

from __future__ import annotations

from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator


def known_zone(value: str) -> str:
    """`value` when it names a time zone; else a ValueError naming it."""
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {value!r} (an IANA name such as UTC or Europe/Paris)") from exc
    return value


TimeZoneName = Annotated[str, AfterValidator(known_zone)]
