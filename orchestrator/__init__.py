"""The orchestrator: selector, actions, providers, workflow runs and diagnostics behind one handler."""

from orchestrator.handler import Orchestrator

__all__ = ["Orchestrator"]
