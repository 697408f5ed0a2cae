"""The config files a preset writes for a CLI pointed at a custom model endpoint, in the provider's private folder."""

from __future__ import annotations

import os
from pathlib import Path

from gateway.home import atomic_write


def write_private(path: Path, text: str) -> None:
    """Writes a config file the CLI reads, in folders only its user may enter (0700); unchanged files are
    left alone, so calls running at once never rewrite each other's."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    atomic_write(path, text.encode(), fsync=False)

