"""Fake `ollama run`: cobra-style flags, stdin prepended to the prompt, plain-text answer, `Error: …` rc 1."""

from __future__ import annotations

import time

import _common as c

VERSION = "ollama version is 0.13.0"
NOT_RUNNING = "could not connect to ollama server, run 'ollama serve' to start it"
_RUN_SPEC = {"--keepalive": ("keepalive", "value"), "--verbose": ("verbose", "bool"),
             "--insecure": ("insecure", "bool"), "--nowordwrap": ("nowordwrap", "bool"),
             "--format": ("format", "value"), "--think": ("think", "optional"),
             "--hidethinking": ("hidethinking", "bool"), "--truncate": ("truncate", "bool"),
             "--dimensions": ("dimensions", "value"), "-h": ("help", "bool"), "--help": ("help", "bool")}
THINK = ("true", "false", "high", "medium", "low", "max")


def main(argv: list[str]) -> int:
    """Runs the fake; returns the exit code."""
    if argv[:1] in (["--version"], ["-v"]):
        c.out(VERSION + "\n")
        return 0
    if argv[:1] != ["run"]:
        c.fail("Error: fake ollama: only `ollama run` is faked", 1)
    try:
        opts, positionals, unknown = c.Options(_RUN_SPEC).parse(argv[1:])
    except c.MissingValue as missing:
        c.fail(f"Error: flag needs an argument: {missing}", 1)
    if unknown:
        c.fail(f"Error: unknown flag: {unknown[0].partition('=')[0]}", 1)
    if not positionals:
        c.fail("Error: requires at least 1 arg(s), only received 0", 1)
    think = opts.get("think")
    if isinstance(think, str) and think not in THINK:
        c.fail(f'Error: invalid value for --think: "{think}" (must be true, false, high, medium, low, or max)', 1)
    model, prompts = positionals[0], positionals[1:]
    stdin = c.read_stdin()
    prompt = " ".join(([stdin] if stdin else []) + prompts)
    c.log_call("ollama", argv, prompt, model=model)
    name, seconds = c.scenario("ollama")
    if name in ("not_running", "network"):
        c.fail(f"Error: {NOT_RUNNING}", 1)
    if name == "model_missing":
        c.err("pulling manifest \n")
        c.fail("Error: pull model manifest: file does not exist", 1)
    if name in ("hang", "network_hang"):
        c.hang_forever()
    if name == "crash":
        c.fail("Error: an error was encountered while running the model: unexpected EOF", 1)
    c.sleep_if_slow(name, seconds)
    if name not in ("ok", "slow"):
        c.fail(f"fake ollama: scenario {name!r} does not apply", 99)
    started = time.monotonic()
    reply = c.answer("ollama", prompt)
    if think not in (None, "false") and not opts.get("hidethinking"):
        c.out("Thinking...\nfake thoughts\n...done thinking.\n\n")
    c.out(reply + "\n\n")
    if opts.get("verbose"):  # api/types.go Metrics.Summary, on stderr after the answer
        took = time.monotonic() - started
        c.err(f"total duration:       {took:.6f}s\nload duration:        {took / 4:.6f}s\n"
              f"prompt eval count:    {c.FRESH_IN} token(s)\nprompt eval duration: {took / 4:.6f}s\n"
              f"prompt eval rate:     {c.FRESH_IN / max(took / 4, 1e-6):.2f} tokens/s\n"
              f"eval count:           {c.OUT} token(s)\neval duration:        {took / 2:.6f}s\n"
              f"eval rate:            {c.OUT / max(took / 2, 1e-6):.2f} tokens/s\n")
    return 0
