from nanoagent.tools.base import (
    Ask,
    FunctionTool,
    SchemaTool,
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolError,
    ToolResult,
    TurnScope,
    current_turn,
    tool,
)
from nanoagent.tools.registry import ToolRegistry, file_tools

__all__ = ["Ask", "FunctionTool", "SchemaTool", "Tool", "ToolArgumentError", "ToolContext", "ToolError", "ToolRegistry",
           "ToolResult", "TurnScope", "current_turn", "file_tools", "tool"]
