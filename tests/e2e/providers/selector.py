"""A fake selector CLI for end-to-end tests: decides from keywords in the message.

Reads the request JSON named by $SWITCHYARD_REQUEST. Appends a line per call to
$FAKE_LOG (start/end with times) so tests can check ordering and concurrency.
  "start <workflow> ..."    -> workflow_start
  "how is it going"         -> workflow_status
  "diagnose ..."            -> diagnostics_investigate
  "call <fn> <json args>"   -> command_invoke
  "fail-until <n>"          -> exit 1 until this message was seen n times, then chat
  "always-fail"             -> exit 1
  "garbage"                 -> prose without a decision
  "sleep <seconds> ..."     -> prints a line, writes its pid to $FAKE_STATE/selector-<messageId>.pid,
                               sleeps, then chat
  anything else             -> workflow_start chat
"""

import json
import os
import sys
import time
from pathlib import Path

request = json.loads(Path(os.environ["SWITCHYARD_REQUEST"]).read_text())
message = request["message"]
text = message["message"]
words = text.split()
log = os.environ.get("FAKE_LOG")


def record(kind: str) -> None:
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"kind": kind, "text": text, "t": time.time(),
                                     "conversation": message.get("conversationId")}) + "\n")


record("start")
decision: dict = {"action": "workflow_start", "workflowId": "chat", "input": {}}
if words and words[0] == "sleep":
    print("Thinking...", flush=True)
    pid_file = Path(os.environ["FAKE_STATE"]) / f"selector-{message['messageId']}.pid"
    pid_file.with_suffix(".tmp").write_text(str(os.getpid()))
    pid_file.with_suffix(".tmp").rename(pid_file)
    time.sleep(float(words[1]))
if words and words[0] == "start":
    decision = {"action": "workflow_start", "workflowId": words[1], "input": {}}
elif text.startswith("how is it going"):
    decision = {"action": "workflow_status"}
elif words and words[0] == "diagnose":
    decision = {"action": "diagnostics_investigate", "question": text}
elif words and words[0] == "call":
    arguments = json.loads(" ".join(words[2:]) or "{}")
    decision = {"action": "command_invoke", "function": words[1], "arguments": arguments}
elif words and words[0] == "fail-until":
    counter = Path(os.environ["FAKE_STATE"]) / f"count-{message['messageId']}"
    seen = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(seen))
    if seen < int(words[1]):
        print("selector crashed on purpose", file=sys.stderr)
        record("fail")
        sys.exit(1)
elif text == "always-fail":
    print("selector always fails", file=sys.stderr)
    record("fail")
    sys.exit(1)
elif text == "garbage":
    print("I think the user wants something, but I will not say what.")
    record("end")
    sys.exit(0)
record("end")
print("Thinking about it...\n```json\n" + json.dumps(decision) + "\n```")
