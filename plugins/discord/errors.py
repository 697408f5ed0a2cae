"""What Discord's failures mean for Switchyard: the error a delivery raises, a one-line reason for a
failed connection (never a secret)."""

from __future__ import annotations

import aiohttp
import discord

from gateway import DeliveryError, PermanentError

FAILURES = (discord.RateLimited, discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError)
CLOSE_CODES = {
    4004: "authentication failed",
    4013: "invalid intents",
    4014: "disallowed intents: enable the Message Content intent (developer portal → Bot)",
}


def failure(exc: Exception) -> Exception:
    """The error a failed post or edit raises: DeliveryError (with retry_after on 429), or
    PermanentError for a refusal retrying cannot change (403, 404)."""
    if isinstance(exc, discord.RateLimited):
        return DeliveryError(f"Discord rate limit: retry in {exc.retry_after:.1f}s", retry_after=exc.retry_after)
    if isinstance(exc, discord.Forbidden | discord.NotFound):
        return PermanentError(f"Discord refused the message: {refusal(exc)}")
    if isinstance(exc, discord.HTTPException):
        return DeliveryError(f"Discord answered HTTP {exc.status}: {exc.text or exc.response.reason}",
                             retry_after=_retry_after(exc))
    return DeliveryError(f"cannot reach Discord: {exc or type(exc).__name__}")


def refusal(exc: discord.HTTPException) -> str:
    """Discord's status, error code and wording, e.g. `HTTP 403 (code 50007): Cannot send messages…`."""
    return f"HTTP {exc.status} (code {exc.code}): {exc.text or exc.response.reason}"


def _retry_after(exc: discord.HTTPException) -> float | None:
    """The Retry-After of a 429 that discord.py stopped retrying."""
    if exc.status != 429:
        return None
    try:
        return float(exc.response.headers.get("Retry-After", ""))
    except ValueError:
        return None


def describe(exc: BaseException | None, token_env: str) -> str:
    """A one-line reason for a failed connection, without any secret."""
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        return "the Message Content intent is not enabled for this bot (developer portal → Bot)"
    if isinstance(exc, discord.ConnectionClosed):
        meaning = CLOSE_CODES.get(exc.code or 0, "")
        if exc.code == 4004:
            meaning = f"{meaning}: check the token in {token_env}"
        return f"gateway closed the connection with code {exc.code}" + (f" ({meaning})" if meaning else "")
    if isinstance(exc, discord.HTTPException):
        return f"HTTP {exc.status}: {exc.text or exc.response.reason}"
    if exc is None:
        return "the gateway connection ended"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
