"""The `for_each` step: one sub-step per item, sequential or `parallel: N`, each item checkpointed."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

from gateway.telemetry.events import utc_now_iso
from orchestrator.config.workflows import ForEachConfig
from orchestrator.execution.steps.base import StepFailed, StepJob, StepOutcome
from orchestrator.execution.steps.process import BodyRunner
from orchestrator.execution.steps.values import parse_json, run_stamp, template_values
from orchestrator.execution.steps.wait import matching_files
from orchestrator.execution.templates import render
from orchestrator.runs.state import cap_text

ITEM_OUTPUT_CAP = 16384


def resolve_items(job: StepJob) -> list[Any]:
    """The items: glob matches, a YAML list, or a template rendered to a JSON list (else its lines)."""
    config = job.step.for_each
    assert config is not None
    values = template_values(job.run, str(job.loaded.workspace))
    if config.glob is not None:
        return matching_files(job.loaded.workspace, render(config.glob, values))
    if isinstance(config.items, list):
        return [render(item, values) if isinstance(item, str) else item for item in config.items]
    text = render(config.items or "", values)
    parsed = parse_json(text)
    if isinstance(parsed, dict) and isinstance(parsed.get("items"), list):
        parsed = parsed["items"]
    if isinstance(parsed, list):
        return parsed
    if parsed is not None and not isinstance(parsed, str):
        return [parsed]
    return [line.strip() for line in text.splitlines() if line.strip()]


def _initial_results(job: StepJob) -> list[dict[str, Any]]:
    """Item results kept from an earlier attempt (the item list is fixed once resolved), else fresh ones."""
    earlier = (job.run.steps[job.step.id].model_extra or {}).get("items")
    if isinstance(earlier, list) and earlier and all(isinstance(r, dict) and "item" in r for r in earlier):
        return [dict(r) for r in earlier]
    return [{"index": i, "item": item, "status": "pending"} for i, item in enumerate(resolve_items(job))]


def move_item(workspace: Path, item: str, target: str, stamp: str) -> str:
    """Moves one item file into `target` (`{timestamp}` filled) inside the workspace; returns the new path."""
    folder = (workspace / target.replace("{timestamp}", stamp)).resolve()
    if not folder.is_relative_to(workspace.resolve()):
        raise StepFailed(f"on_item_complete target {target!r} is outside the workspace", category="fatal")
    folder.mkdir(parents=True, exist_ok=True)
    source = workspace / item
    destination = folder / source.name
    counter = 1
    while destination.exists():
        destination = folder / f"{source.stem}.{counter}{source.suffix}"
        counter += 1
    shutil.move(str(source), str(destination))
    return str(destination.relative_to(workspace.resolve()))


class ForEach:
    """Runs the `do` body once per item and records each item's result in the step state."""

    def __init__(self, bodies: BodyRunner):
        self._bodies = bodies

    async def run(self, job: StepJob) -> StepOutcome:
        """Runs every item not yet completed; fails (after all ran) when any item failed."""
        config = job.step.for_each
        assert config is not None
        started = time.monotonic()
        results = _initial_results(job)
        job.progress({"items": results, "item_count": len(results)})
        slots = asyncio.Semaphore(config.parallel)

        async def one(index: int) -> None:
            result = results[index]
            if result["status"] == "completed" or result.get("moved_to"):
                return
            async with slots:
                results[index] = await self._item(job, config, result)
                job.progress({"items": results})

        await asyncio.gather(*(one(i) for i in range(len(results))))
        return self._outcome(job, results, int((time.monotonic() - started) * 1000))

    async def _item(self, job: StepJob, config: ForEachConfig, result: dict[str, Any]) -> dict[str, Any]:
        index, item = result["index"], result["item"]
        label = f"{job.step.id}[{index}]"
        values = template_values(job.run, str(job.loaded.workspace), item=item, item_index=index)
        env = {**job.env, "SWITCHYARD_STEP_ID": label,
               "SWITCHYARD_ITEM": item if isinstance(item, str) else json.dumps(item)}
        body = job.step.do
        assert body is not None
        begun = time.monotonic()
        record: dict[str, Any] = {"index": index, "item": item, "startedAt": utc_now_iso()}
        try:
            done = await self._bodies.run(job, body, label, values, env, {"item": item, "itemIndex": index})
            record.update(status="completed", exitCode=done.exit_code,
                          output=cap_text(done.stdout.rstrip(), ITEM_OUTPUT_CAP))
        except StepFailed as exc:
            record.update(status="failed", exitCode=exc.exit_code, error=str(exc), category=exc.category,
                          output=cap_text(exc.result.stdout, ITEM_OUTPUT_CAP) if exc.result else None)
        record.update(durationMs=int((time.monotonic() - begun) * 1000), finishedAt=utc_now_iso())
        if config.on_item_complete is not None and isinstance(item, str):
            target = config.on_item_complete.success if record["status"] == "completed" else \
                config.on_item_complete.failure
            record["moved_to"] = move_item(job.loaded.workspace, item, target, run_stamp(job.run))
        return record

    @staticmethod
    def _outcome(job: StepJob, results: list[dict[str, Any]], duration_ms: int) -> StepOutcome:
        output = json.dumps([r.get("output") for r in results], ensure_ascii=False)
        fields = {"items": results, "item_count": len(results)}
        failed = [r for r in results if r["status"] == "failed"]
        if not failed:
            return StepOutcome(output, 0, duration_ms, fields=fields)
        final = job.step.on_failure == "fatal" or all(
            r.get("category") == "fatal" or r.get("moved_to") for r in failed)
        first = failed[0]
        raise StepFailed(f"{len(failed)} of {len(results)} item(s) failed; item {first['item']!r}: "
                         f"{first.get('error')}", category="fatal" if final else "retryable",
                         fields={**fields, "output": output}, exit_code=1)
