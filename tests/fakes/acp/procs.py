"""What /proc says about a process group: its members and their resident memory (for the ACP recordings)."""

from __future__ import annotations

from pathlib import Path


def group_members(pgid: int) -> list[dict[str, object]]:
    """The processes whose process group is `pgid`: pid, name and argv (shortened)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid:
            members.append({"pid": int(entry.name), "argv": " ".join(a.decode(errors="replace") for a in argv)[:160]})
    return members


def group_rss_mb(pgid: int) -> float:
    """The summed VmRSS of the group's processes, in MB."""
    total_kb = 0
    for member in group_members(pgid):
        try:
            status = Path(f"/proc/{member['pid']}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total_kb += int(line.split()[1])
    return round(total_kb / 1024, 1)


def live_children(pid: int) -> list[int]:
    """The processes (not zombies) whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def open_files(pgid: int, containing: str) -> list[str]:
    """The files the group's processes hold open whose path contains `containing` (one entry per descriptor)."""
    held = []
    for member in group_members(pgid):
        folder = Path(f"/proc/{member['pid']}/fd")
        try:
            descriptors = list(folder.iterdir())
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                target = str(descriptor.readlink())
            except OSError:
                continue
            if containing in target:
                held.append(target)
    return held
