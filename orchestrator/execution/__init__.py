"""Running workflows: the executor, its claims, its watchdog, each state change with its events and coordination
files, results delivered once, step kinds, prompt templates."""
