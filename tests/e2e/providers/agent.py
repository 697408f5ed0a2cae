"""A fake agent CLI: answers with its step and prompt; `SLEEP_<STEP>` env sleeps first; logs each call."""

import json
import os
import sys
import time

prompt = sys.stdin.read()
step = os.environ.get("SWITCHYARD_STEP_ID", "?")
log = os.environ.get("FAKE_LOG")
if log:
    with open(log, "a") as handle:
        handle.write(json.dumps({"kind": "agent", "step": step, "run": os.environ.get("SWITCHYARD_RUN_ID"),
                                 "t": time.time()}) + "\n")
time.sleep(float(os.environ.get(f"SLEEP_{step.upper()}", "0")))
print(f"agent {step} answered: {prompt.strip()}")
