"""`switchyard doctor`: each provider found on PATH, its version, its ACP adapter, the sandbox, and with `--probe`
one tiny request each."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.settings import Settings


def add_doctor_command(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `doctor`."""
    doctor = commands.add_parser("doctor", help="check the providers: found on PATH, version, and with "
                                                "--probe one tiny request each")
    doctor.add_argument("--probe", action="store_true", help="send each provider one tiny request")
    doctor.add_argument("--json", action="store_true", help="print JSON for scripts")
    doctor.set_defaults(run=cmd_doctor)


def cmd_doctor(args: argparse.Namespace, home: Home, settings: Settings) -> int:
    """Prints one row per provider; exits 1 when a provider an orchestrator uses has a problem."""
    import asyncio

    from gateway.cli.tables import print_table
    from orchestrator.agents.doctor import (
        check_adapters,
        check_providers,
        check_sandbox,
        fill_versions,
        probe,
        provider_uses,
    )

    checks = check_providers(home, settings)
    sandbox = check_sandbox(home, settings)
    _, broken = provider_uses(home, settings)

    async def gather() -> None:
        await fill_versions(checks)
        await check_adapters(home, settings, checks)
        if args.probe:
            await probe(home, settings, checks)

    asyncio.run(gather())
    if args.json:
        print(json.dumps({"providers": [{**vars(c), "ok": c.ok} for c in checks], "problems": broken,
                          "sandbox": {"works": not sandbox.problem, "problem": sandbox.problem,
                                      "used_by": sandbox.used_by}}, indent=2))
    else:
        rows = [[c.name, c.kind, c.path or c.binary or "-", c.version or "-", ", ".join(c.used_by) or "-",
                 c.problem or (f"ok: {c.probe}" if c.probe else "ok")] for c in checks]
        print_table(["provider", "kind", "program", "version", "used by", "status"], rows)
        for check in checks:
            if check.adapter:
                print(f"provider {check.name} (transport: acp): adapter {check.adapter}")
        for line in broken:
            print(line)
        print(sandbox.line())
    sandbox_broken = bool(sandbox.problem and sandbox.used_by)
    return 1 if broken or sandbox_broken or any(c.problem and c.used_by for c in checks) else 0
