"""What a chat message meets: the handler, the selector and its actions, diagnostics, `command_invoke` functions, tool
approvals asked and answered in chat."""
