"""The names the chat tools are known by to the CLIs and their processes: the server's, its tools', the
variables a turn's process finds them in. Apart from the server so that a CLI preset naming them imports
nothing else (`switchyard status` imports the presets and must stay without asyncio)."""

SERVER_NAME = "switchyard"  # what each CLI calls the server: claude names the tools mcp__switchyard__send_message
PATH = "/mcp"
TOOL_NAMES = ("send_message", "send_file", "ask", "conversation_info", "remind")
URL_ENV = "SWITCHYARD_CHAT_TOOLS_URL"  # a turn's process finds its tools here (and a CLI's MCP config reads them)
TOKEN_ENV = "SWITCHYARD_CHAT_TOOLS_TOKEN"  # the token is in the environment, never on a command line (`ps`)
