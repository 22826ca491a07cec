"""The long connection's frames: the open platform's `pbbp2.Frame`, a protobuf (proto2) message of nine fields,
read and written here (the tests' stand-in uses lark-oapi's generated class for it, so the two are checked against
each other on every test):

    Header { required string key = 1; required string value = 2; }
    Frame { required uint64 SeqID = 1; required uint64 LogID = 2; required int32 service = 3;
            required int32 method = 4; repeated Header headers = 5; optional string payload_encoding = 6;
            optional string payload_type = 7; optional bytes payload = 8; optional string LogIDNew = 9; }

`method` 0 is a control frame (headers `type: ping|pong`), 1 a data frame (`type: event|card`, with `message_id`,
`sum`, `seq`, `trace_id`); a data frame is answered by sending it back with the answer as its payload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONTROL, DATA = 0, 1


@dataclass
class Frame:
    seq_id: int = 0
    log_id: int = 0
    service: int = 0
    method: int = CONTROL
    headers: list[tuple[str, str]] = field(default_factory=list)
    payload: bytes = b""
    strings: dict[int, str] = field(default_factory=dict)  # payload_encoding (6), payload_type (7), LogIDNew (9)

    def header(self, key: str, default: str = "") -> str:
        return next((value for name, value in self.headers if name == key), default)

    def encode(self) -> bytes:
        out = bytearray()
        for number, value in ((1, self.seq_id), (2, self.log_id), (3, self.service), (4, self.method)):
            out += _varint(number << 3) + _varint(value & 0xFFFFFFFFFFFFFFFF)
        for key, text in self.headers:
            out += _field(5, _field(1, key.encode()) + _field(2, text.encode()))
        for number, string in sorted(self.strings.items()):
            out += _field(number, string.encode())
        if self.payload:
            out += _field(8, self.payload)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> Frame:
        """ValueError when `data` is no frame."""
        frame = cls()
        for number, value in _fields(data):
            if number in (1, 2, 3, 4) and isinstance(value, int):
                signed = value - (1 << 64) if number in (3, 4) and value >= 1 << 63 else value
                setattr(frame, ("seq_id", "log_id", "service", "method")[number - 1], signed)
            elif number == 5 and isinstance(value, bytes):
                parts = {n: v for n, v in _fields(value) if isinstance(v, bytes)}
                frame.headers.append((parts.get(1, b"").decode(), parts.get(2, b"").decode()))
            elif number == 8 and isinstance(value, bytes):
                frame.payload = value
            elif number in (6, 7, 9) and isinstance(value, bytes):
                frame.strings[number] = value.decode()
        return frame


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(number, value) of each field: varints as ints, length-delimited as bytes; fixed-width ones skipped."""
    found: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _read_varint(data, at)
            found.append((number, value))
        elif wire == 2:
            size, at = _read_varint(data, at)
            if at + size > len(data):
                raise ValueError("a field runs past the frame")
            found.append((number, data[at:at + size]))
            at += size
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")
    return found


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a varint runs past the frame")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if not byte & 0x80:
            return value, at
