"""The gateway component that runs a channel: the engine, its replies, the exactly-once inbox, saved media."""
