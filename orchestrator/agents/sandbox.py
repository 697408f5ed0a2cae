"""`sandbox: bwrap`: an agent CLI, ACP adapter or command step run by bubblewrap in a namespace of its own.

What the process sees (docs/sandbox.md has the threat model): the system folders read-only (`/usr`, `/etc`,
`/opt`, …, the merged-usr links as links), its own workspace writable and its working directory, a private
`/tmp`, an empty `$HOME` holding only its CLI's own login and config folder, that folder's session history
replaced by its workspace owner's own (no other conversation's transcripts), its conversation's uploads, nothing else:
not the Switchyard home (settings.yaml, queue/, other workspaces, files/), not another process (`--unshare-pid`
with its own `/proc`). Environment variables stay as the provider runner filtered them (no `*_env` secret).

`network`: `full` shares the host's network; `none` gives it a network namespace with only loopback
(`--unshare-net`; an empty resolv.conf, so a lookup fails at once); `model-only` does the same and relays
each of the provider's API hosts (its `base_url`, else the preset's own hosts) into it
(orchestrator/agents/relay.py).

Nested sandboxes: codex's own `--sandbox` runs bubblewrap inside ours; bwrap inside bwrap works (the real codex's
sandboxed commands run in tests/integration/sandbox/), so codex's sandbox is kept, nested, not replaced. It
refuses a CODEX_HOME under /tmp (orchestrator/agents/acp/specs.py temp_home_problem), outside ours too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from gateway.api import PermanentError
from orchestrator.agents.relay import INNER_RELAY, RELAY_DIR, ModelRelay, listeners

BWRAP = "bwrap"
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix")
INNER_PYTHON = "/usr/bin/python3"  # the relay inside runs on the system's python (the venv is not bound)
RESOLV_CONF = "/etc/resolv.conf"
NETWORKS = ("model-only", "full", "none")

# The hosts each preset's CLI calls when no `base_url` names one (its API, and the login it refreshes).
PRESET_HOSTS: dict[str, tuple[str, ...]] = {
    "claude": ("api.anthropic.com:443", "console.anthropic.com:443", "claude.ai:443"),
    "codex": ("api.openai.com:443", "chatgpt.com:443", "auth.openai.com:443"),
    "gemini": ("generativelanguage.googleapis.com:443", "oauth2.googleapis.com:443",
               "cloudcode-pa.googleapis.com:443"),
    "ollama": ("127.0.0.1:11434",),
}


class SandboxUnavailable(PermanentError):
    """`sandbox: bwrap` is configured and bubblewrap cannot run here: nothing runs unsandboxed instead."""

    def __init__(self, message: str):
        super().__init__(message, reply=f"Sorry, the agent cannot run: {message}.")


@dataclass(frozen=True)
class Sandbox:
    """How one process is confined: its writable workspace, what else it sees, and its network."""

    workspace: Path
    network: str = "model-only"
    hidden: tuple[Path, ...] = ()  # masked with an empty tmpfs even under a system folder (the Switchyard home)
    writable: tuple[Path, ...] = ()  # bound read-write at their own path (uploads, a worktree's git folder)
    readable: tuple[Path, ...] = ()  # bound read-only at their own path (`sandbox_paths`)
    state: Path | None = None  # its workspace owner's session history folder (the CLI's is replaced by it)
    home: Path | None = None  # $HOME: an empty tmpfs, then the CLI's config folders
    mounts: tuple[tuple[Path, Path], ...] = ()  # (source, target) read-write: a CLI's config, its sessions
    targets: tuple[tuple[str, int], ...] = ()  # model-only: the (host, port) pairs relayed in
    protected: tuple[Path, ...] = ()  # read-only even inside a writable folder (a shared workspace's orchestrator.yaml)
    binary: str = BWRAP

    def for_provider(self, preset: str | None, env: Mapping[str, str], *, base_url: str | None = None,
                     network: str | None = None, readable: Sequence[str] = (), also: Sequence[str] = ()) -> Sandbox:
        """This sandbox for one provider's process: its CLI's config folders bound in (their session history
        replaced by its owner's), its `network` and `sandbox_paths`, and for `model-only` its API hosts (its
        `base_url`, else the preset's) as the relay's targets, with the gateway's own endpoints a turn is
        given (`also`: the chat tools' URL). A `command` provider (no preset) reaches none."""
        home = Path(env["HOME"]) if env.get("HOME") else None
        mounts = list(self.mounts) + (_config_mounts(preset, env, home, self.state) if preset else [])
        hosts = [_host_port(base_url)] if base_url else [_parse_target(t) for t in PRESET_HOSTS.get(preset or "", ())]
        hosts += [_host_port(url) for url in also if preset]
        network = network or self.network
        return replace(self, home=home, mounts=tuple(mounts), network=network,
                       readable=self.readable + tuple(Path(path) for path in readable),
                       targets=tuple(hosts) if network == "model-only" else ())

    def argv(self, argv: Sequence[str], relay: Path | None = None) -> list[str]:
        """The bwrap argv that runs `argv` confined; `relay`: the folder of the relay's sockets (model-only)."""
        args = [self.binary, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        if self.network != "full":
            args.append("--unshare-net")
        if relay is not None and self.targets:
            # The relay inside listens on the API's port (443) and answers DNS on 53 in its own namespace. Not
            # run as root, only uid 0 of a user namespace of its own keeps that one capability past exec (bwrap
            # drops every other): the CLI then sees itself as uid 0 there, its files stay the user's outside.
            userns = [] if os.geteuid() == 0 else ["--unshare-user", "--uid", "0", "--gid", "0"]
            args += [*userns, "--cap-add", "CAP_NET_BIND_SERVICE"]
        for system in SYSTEM_PATHS:
            if os.path.islink(system):
                args += ["--symlink", os.readlink(system), system]
            elif os.path.isdir(system):
                args += ["--ro-bind", system, system]
        hidden = [path for path in self.hidden if path.exists()]
        masked = ([self.home] if self.home is not None and not _under_system(self.home) else []) + hidden
        for path in sorted(masked, key=lambda each: len(each.parts)):
            args += ["--tmpfs", str(path)]
        for path in self.readable:
            if path.exists():
                args += ["--ro-bind", str(path), str(path)]
        binds = [(p, p) for p in (self.workspace, *self.writable)] + list(self.mounts)
        for source, target in sorted(binds, key=lambda pair: len(pair[1].parts)):  # parents before children
            if source.exists():
                args += ["--bind", str(source), str(target)]
        for path in self.protected:
            if path.exists():
                args += ["--ro-bind", str(path), str(path)]
        if self.network != "full" and os.path.isfile(RESOLV_CONF) and not os.path.islink(RESOLV_CONF):
            args += ["--ro-bind", "/dev/null", RESOLV_CONF]  # no name server: a lookup fails at once, not in 5 s
        if relay is not None:
            args += ["--ro-bind", str(relay), RELAY_DIR, "--ro-bind", str(relay / "hosts"), "/etc/hosts"]
        for path in hidden:  # what is bound inside stays writable; the rest of the home is an empty read-only folder
            args += ["--remount-ro", str(path)]
        args += ["--chdir", str(self.workspace), "--"]
        if relay is not None and self.targets:
            args += [INNER_PYTHON, "-I", "-S", "-c", INNER_RELAY, json.dumps(listeners(self.targets))]
        return args + list(argv)

    def host_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` as the gateway must read it to find this sandbox's session files on the host: claude's transcripts
        live under its owner's `<state>/claude/projects/` (what `Claude.superseded` removes)."""
        if self.state is None or not any(target.name == "projects" for _, target in self.mounts):
            return dict(env)
        return {**env, "CLAUDE_CONFIG_DIR": str(self.state / "claude")}

    @contextlib.asynccontextmanager
    async def launched(self, argv: Sequence[str]) -> AsyncIterator[list[str]]:
        """The confined argv, with the relay of a `model-only` sandbox serving while it runs; raises
        SandboxUnavailable when bwrap is missing (never a run without it)."""
        if shutil.which(self.binary) is None:
            raise SandboxUnavailable(f"sandbox: bwrap is set but `{self.binary}` is not on PATH: install bubblewrap "
                                     "(apt-get install bubblewrap); nothing runs unsandboxed instead")
        if self.network != "model-only" or not self.targets:
            yield self.argv(argv)
            return
        if not os.access(INNER_PYTHON, os.X_OK):
            raise SandboxUnavailable(f"network: model-only needs {INNER_PYTHON} for its relay inside the sandbox")
        async with ModelRelay(self.targets) as relay:
            yield self.argv(argv, relay.folder)


def _config_mounts(preset: str, env: Mapping[str, str], home: Path | None,
                   state: Path | None) -> list[tuple[Path, Path]]:
    """The CLI's login and config folder (read-write: it refreshes tokens there) and, over its session history,
    the owner's own folder for it."""
    config, sessions, files = _config_of(preset, env, home)
    mounts: list[tuple[Path, Path]] = []
    if config is not None:
        config.mkdir(parents=True, exist_ok=True)
        mounts.append((config, config))
        if state is not None and sessions:
            own = state / preset / sessions  # named as in the CLI's folder: see `host_env`
            own.mkdir(parents=True, exist_ok=True)
            (config / sessions).mkdir(parents=True, exist_ok=True)
            mounts.append((own, config / sessions))
    mounts += [(path, path) for path in files if path.is_file()]
    return mounts


def _config_of(preset: str, env: Mapping[str, str], home: Path | None) -> tuple[Path | None, str, list[Path]]:
    """(config folder, its session subfolder, extra files) as each preset's CLI finds them (CLIS.md)."""
    if preset == "claude":
        own = env.get("CLAUDE_CONFIG_DIR")
        if own:
            return Path(own), "projects", []
        return (home / ".claude", "projects", [home / ".claude.json"]) if home else (None, "", [])
    if preset == "codex":
        own = env.get("CODEX_HOME")
        return (Path(own) if own else home / ".codex" if home else None), "sessions", []
    if preset == "gemini":
        base = env.get("GEMINI_CLI_HOME") or (str(home) if home else None)
        return (Path(base) / ".gemini" if base else None), "tmp", []
    return None, "", []


def _under_system(path: Path) -> bool:
    return any(_within(path, Path(system)) for system in SYSTEM_PATHS)


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def _parse_target(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def works(binary: str = BWRAP) -> str | None:
    """None when bwrap confines a process here (pid and network namespaces, its own /proc), else why not."""
    import subprocess

    if shutil.which(binary) is None:
        return f"`{binary}` is not on PATH (apt-get install bubblewrap)"
    if not os.access(INNER_PYTHON, os.X_OK):
        return f"{INNER_PYTHON} is missing: `network: model-only` runs its relay inside the sandbox on it"
    with tempfile.TemporaryDirectory(prefix="switchyard-probe-") as folder:
        probe = Sandbox(Path(folder), network="none", binary=binary).argv(
            ["/bin/sh", "-c", f"test ! -e /proc/{os.getpid()}/environ && touch probed"])
        try:
            done = subprocess.run(probe, capture_output=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"`{binary}` did not run: {exc}"
        if done.returncode == 0 and not (Path(folder) / "probed").exists():
            return f"`{binary}` ran, but its workspace was not writable"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[-300:]
        return f"`{binary}` cannot create namespaces here (exit {done.returncode}: {said or 'no words'})"
    return None
