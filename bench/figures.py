"""What each bench prints: its figures as they come, each against its budget, and whether every budget held."""

from __future__ import annotations


class Figures:
    def __init__(self, name_width: int = 52, value_width: int = 18):
        self.results: list[bool] = []
        self.name_width = name_width
        self.value_width = value_width

    def record(self, name: str, value: str, budget: str, ok: bool | None) -> None:
        """ok None: a figure reported, no budget."""
        if ok is not None:
            self.results.append(ok)
        mark = "    " if ok is None else ("ok  " if ok else "MISS")
        print(f"{mark} {name:<{self.name_width}} {value:>{self.value_width}}   budget {budget}", flush=True)


def free_port() -> int:
    """A loopback port free now, for a listener a bench starts."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
