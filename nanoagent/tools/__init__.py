from nanoagent.tools.base import (
    FunctionTool,
    SchemaTool,
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolError,
    TurnScope,
    current_turn,
    tool,
)
from nanoagent.tools.registry import ToolRegistry, file_tools

__all__ = ["FunctionTool", "SchemaTool", "Tool", "ToolArgumentError", "ToolContext", "ToolError", "ToolRegistry",
           "TurnScope", "current_turn", "file_tools", "tool"]
