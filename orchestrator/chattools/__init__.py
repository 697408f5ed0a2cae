"""Chat tools: the MCP server that lets an agent act in its own conversation while its turn runs
(send a message, send a file, read who it talks to), reachable only with the turn's capability token."""
