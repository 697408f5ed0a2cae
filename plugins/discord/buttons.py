"""A reply's buttons as Discord message components."""

from __future__ import annotations

from collections.abc import Sequence

import discord

from gateway import Button

MAX_BUTTONS = 25  # five action rows of five; a reply with more shows them as a numbered list
LABEL_LIMIT = 80


def buttons_view(buttons: Sequence[Button]) -> discord.ui.View:
    """The buttons as components (custom_id = the button id). The view is stopped before it is sent, so
    discord.py keeps no callbacks for it: taps are dispatched by custom_id (plugins.discord.inbound
    Intake.tap), which works for messages sent before a restart too."""
    view = discord.ui.View(timeout=None)
    for button in buttons:
        view.add_item(discord.ui.Button(label=button.label[:LABEL_LIMIT], custom_id=button.id,
                                        style=discord.ButtonStyle.secondary))
    view.stop()
    return view
