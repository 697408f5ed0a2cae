"""A fake `transcribe:` command: prints the text of an audio file it knows (by the SHA-256 of its bytes).

Usage: transcriber.py --table transcripts.json [--fail | --sleep PIDFILE] FILE. It refuses a file that is
not OGG/Opus (as ffprobe reads it) or whose bytes it does not know, so a test sees the exact file the
platform carried reach it. `--fail` fails the way a missing model does; `--sleep` writes its pid and
sleeps a minute. With $FAKE_TRANSCRIBER_ENV set, it writes the names of its environment variables there.
"""

import hashlib
import json
import os
import subprocess
import sys
import time

args = sys.argv[1:]
with open(args[args.index("--table") + 1]) as source:
    table = json.load(source)
path = args[-1]
if os.environ.get("FAKE_TRANSCRIBER_ENV"):
    with open(os.environ["FAKE_TRANSCRIBER_ENV"], "w") as handle:
        handle.write("\n".join(sorted(os.environ)))
if "--sleep" in args:  # a slow model: its pid written first, so a test knows it runs
    with open(args[args.index("--sleep") + 1], "w") as handle:
        handle.write(str(os.getpid()))
    time.sleep(60)
if "--fail" in args:
    print("whisper: failed to load model 'ggml-base.en.bin'", file=sys.stderr)
    sys.exit(2)
codec = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries", "stream=codec_name",
                        "-of", "default=nw=1:nk=1", path], capture_output=True, text=True, timeout=30).stdout.strip()
if codec != "opus":
    print(f"not an Opus voice note: {path} ({codec or 'unreadable'})", file=sys.stderr)
    sys.exit(1)
with open(path, "rb") as handle:
    text = table.get(hashlib.sha256(handle.read()).hexdigest())
if text is None:
    print(f"unknown audio: {path}", file=sys.stderr)
    sys.exit(1)
print(text)
