"""How each real ACP adapter is started against a model API on 127.0.0.1: argv, environment, private config
(offline: telemetry, auto-update and error reporting off). Used by record.py; FINDINGS.md quotes it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

ACP = Path(os.environ.get("ACP_PREFIX", "/opt/acp")) / "node_modules" / ".bin"
CLIS = Path(os.environ.get("AGENT_CLIS_PREFIX", "/opt/agent-clis")) / "node_modules" / ".bin"
PATH = os.environ.get("ACP_PATH", "/usr/local/bin:/usr/bin:/bin")  # ACP_PATH: e.g. one without bwrap


@dataclass(frozen=True)
class Adapter:
    """One adapter: its argv and how to build its environment for a scratch root and a model URL."""

    name: str
    argv: list[str]

    def environment(self, root: Path, model_url: str) -> dict[str, str]:
        """The whole environment (nothing inherited): HOME in `root`, the model at `model_url`."""
        home = root / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = {"PATH": PATH, "HOME": str(home), "TERM": "dumb", "LANG": "C.UTF-8"}
        return env | _SPECIFIC[self.name](root, model_url)


def _claude(root: Path, model_url: str) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": f"{model_url}/anthropic", "ANTHROPIC_API_KEY": "sk-ant-fake-acp",
            "CLAUDE_CODE_EXECUTABLE": str(CLIS / "claude"), "CLAUDE_CONFIG_DIR": str(root / "claude"),
            "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def _codex(root: Path, model_url: str) -> dict[str, str]:
    home = root / "codex"
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    model = os.environ.get("ACP_CODEX_MODEL", "gpt-5.4")  # a model codex knows: else a warning opens every answer
    (home / "config.toml").write_text("\n".join([
        'model_provider = "switchyard"', f'model = "{model}"', "check_for_update_on_startup = false",
        "[analytics]", "enabled = false", "[feedback]", "enabled = false",
        "[model_providers.switchyard]", 'name = "switchyard"', f'base_url = "{model_url}/openai/v1"',
        'wire_api = "responses"', 'env_key = "OPENAI_API_KEY"', ""]))
    return {"CODEX_HOME": str(home), "OPENAI_API_KEY": "sk-fake-acp"}


def _gemini(root: Path, model_url: str) -> dict[str, str]:
    settings = root / "gemini" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}))
    return {"GEMINI_CLI_HOME": str(root / "gemini"), "GOOGLE_GEMINI_BASE_URL": f"{model_url}/google",
            "GEMINI_API_KEY": "gemini-fake-acp", "GEMINI_CLI_TRUST_WORKSPACE": "true"} | (
        {} if os.environ.get("GEMINI_RELAUNCH") else {"GEMINI_CLI_NO_RELAUNCH": "true"})


_SPECIFIC = {"claude": _claude, "codex": _codex, "gemini": _gemini}

ADAPTERS = {
    "claude": Adapter("claude", [str(ACP / "claude-agent-acp")]),
    "codex": Adapter("codex", [str(ACP / "codex-acp")]),
    "gemini": Adapter("gemini", [str(CLIS / "gemini"), "--acp", "--model", "gemini-fake"]),
}
