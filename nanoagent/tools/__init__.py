from nanoagent.tools.base import Tool, ToolArgumentError, ToolContext, ToolError, tool
from nanoagent.tools.registry import ToolRegistry, default_tools

__all__ = ["Tool", "ToolArgumentError", "ToolContext", "ToolError", "ToolRegistry", "default_tools", "tool"]
