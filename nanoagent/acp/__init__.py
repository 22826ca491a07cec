"""`nanoagent acp`: nanoagent as an Agent Client Protocol agent for editors (Zed, JetBrains IDEs, any ACP client).

An integration, outside the core: it runs turns as `nanoagent agent -C DIR` does (through a running gateway, else in
this process) and speaks ACP over stdio with the `agent-client-protocol` SDK (the `acp` extra).
- `wire.py`: the stdio line reader, the JSON-RPC errors the SDK leaves unsaid, and `initialize` (answered before the
  SDK has loaded: it takes longer to import than an editor should wait);
- `updates.py`: the runner's events as ACP session updates (message and thought chunks, tool calls with diffs);
- `turns.py`: where a session's turns run (the gateway or this process) and the editor's buffers as the file tools' files;
- `agent.py`: the ACP agent itself: sessions, prompts, cancel, modes (a tool profile) and the model;
- `serve.py`: the process: stdio, the SDK's connection, the agent.
"""
