"""Agent task queues of spec 000: `inbox/<agent>/`, `processed/{timestamp}/`, `failed/{timestamp}/`."""

# The orchestrator never moves task files by itself (a for_each may opt in with `on_item_complete`);
# these helpers write tasks the safe way and clean or archive whole processed partitions only.

from __future__ import annotations

import os
import shutil
import tarfile
import time
from pathlib import Path

from gateway.home import safe_name
from orchestrator.config.loading import LoadedConfig

ARCHIVE_DIR = "archive"


def ensure_queue_dirs(loaded: LoadedConfig) -> list[Path]:
    """Creates `inbox/<agent>/` for every agent, `processed/` and `failed/` in the workspace."""
    dirs = loaded.config.queues
    workspace = loaded.workspace
    folders = [workspace / dirs.inbox_dir / safe_name(agent) for agent in loaded.config.agents]
    folders += [workspace / dirs.processed_dir, workspace / dirs.failed_dir]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return folders


def write_task(loaded: LoadedConfig, agent: str, name: str, content: str) -> Path:
    """Writes `inbox/<agent>/<name>.task` as `<name>.tmp` first, then renames it (atomic for readers)."""
    dirs = loaded.config.queues
    folder = loaded.workspace / dirs.inbox_dir / safe_name(agent)
    folder.mkdir(parents=True, exist_ok=True)
    stem = safe_name(name.removesuffix(dirs.task_extension))
    tmp = folder / f"{stem}.tmp"
    final = folder / f"{stem}{dirs.task_extension}"
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())
    os.rename(tmp, final)
    return final


def _newest_mtime(folder: Path) -> float:
    newest = folder.stat().st_mtime
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                newest = max(newest, (Path(root) / name).stat().st_mtime)
            except FileNotFoundError:
                continue
    return newest


def old_partitions(loaded: LoadedConfig, older_than_days: float) -> list[Path]:
    """The `processed/{timestamp}/` folders whose newest file is older than the cutoff (oldest first)."""
    processed = loaded.workspace / loaded.config.queues.processed_dir
    if not processed.is_dir():
        return []
    cutoff = time.time() - older_than_days * 86400
    folders = sorted(p for p in processed.iterdir() if p.is_dir() and not p.is_symlink())
    return [p for p in folders if _newest_mtime(p) <= cutoff]


def clean_processed(loaded: LoadedConfig, older_than_days: float, *, dry_run: bool = False) -> list[Path]:
    """Deletes whole old processed partitions (never single items); returns the folders removed."""
    removed = old_partitions(loaded, older_than_days)
    if not dry_run:
        for folder in removed:
            shutil.rmtree(folder)
    return removed


def archive_processed(loaded: LoadedConfig, older_than_days: float, *, dry_run: bool = False) -> list[Path]:
    """Packs each old processed partition into `archive/processed/<partition>.tar.gz`, then removes it."""
    target = loaded.workspace / ARCHIVE_DIR / loaded.config.queues.processed_dir
    archives = []
    for folder in old_partitions(loaded, older_than_days):
        archive = target / f"{folder.name}.tar.gz"
        archives.append(archive)
        if dry_run:
            continue
        target.mkdir(parents=True, exist_ok=True)
        partial = archive.with_name(archive.name + ".tmp")
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(folder, arcname=folder.name)
        os.replace(partial, archive)
        shutil.rmtree(folder)
    return archives
