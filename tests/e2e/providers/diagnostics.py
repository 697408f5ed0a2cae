"""A fake diagnostics CLI: reports how much context it got and offers next steps."""

import json
import os
from pathlib import Path

request = json.loads(Path(os.environ["SWITCHYARD_REQUEST"]).read_text())
context = json.dumps(request.get("context", {}))
print(f"Findings: got {len(context)} bytes of context about: {request.get('question')}\n"
      "Next steps: 1) retry the run 2) check the provider logs")
