"""The file backend (`queue.backend: files`, the default): its stores are folders and files in the home,
its runtime the Worker of queue/incoming/ and the Dispatcher of queue/outgoing/."""
