"""Chat apps nanoagent talks through: the contract (`base.py`), the registry (`registry.py`), the parts every
channel shares, and one subpackage per channel."""
