"""nanoagent: a personal AI agent for the terminal."""

__version__ = "0.1.0"
