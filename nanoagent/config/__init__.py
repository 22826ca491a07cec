from nanoagent.config.loader import load_config, save_config
from nanoagent.config.schema import AgentDefaults, Config, ExecConfig, ProviderConfig, ToolsConfig

__all__ = [
    "AgentDefaults",
    "Config",
    "ExecConfig",
    "ProviderConfig",
    "ToolsConfig",
    "load_config",
    "save_config",
]
