"""The web app's home-screen icons, drawn here without an image library: a rounded square in the app's accent blue
with a white speech bubble. Writes nanoagent/web/static/icon.svg, icon-192.png and icon-512.png (run from the repo
root: `python scripts/icons.py`; the files are committed, so this runs only when the icon changes)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

STATIC = Path(__file__).resolve().parent.parent / "nanoagent" / "web" / "static"
ACCENT = (11, 92, 173)
WHITE = (255, 255, 255)
# in a 100-unit square: the bubble's box and corner radius, its tail (a triangle), the square's corner radius
BUBBLE, BUBBLE_R, TAIL, CORNER = (22, 26, 78, 66), 12, ((32, 64), (32, 80), (48, 64)), 22

SVG = f"""<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">
<rect width="100" height="100" rx="{CORNER}" fill="rgb{ACCENT}"/>
<rect x="{BUBBLE[0]}" y="{BUBBLE[1]}" width="{BUBBLE[2] - BUBBLE[0]}" height="{BUBBLE[3] - BUBBLE[1]}" rx="{BUBBLE_R}"
 fill="#fff"/>
<path d="M{TAIL[0][0]} {TAIL[0][1]} L{TAIL[1][0]} {TAIL[1][1]} L{TAIL[2][0]} {TAIL[2][1]} Z" fill="#fff"/>
</svg>
"""


def in_rounded(x: float, y: float, box: tuple[float, float, float, float], r: float) -> bool:
    left, top, right, bottom = box
    if not (left <= x <= right and top <= y <= bottom):
        return False
    cx = min(max(x, left + r), right - r)
    cy = min(max(y, top + r), bottom - r)
    return (x - cx) ** 2 + (y - cy) ** 2 <= r * r


def in_tail(x: float, y: float) -> bool:
    (ax, ay), (bx, by), (cx, cy) = TAIL
    def side(px: float, py: float, qx: float, qy: float) -> float:
        return (x - qx) * (py - qy) - (px - qx) * (y - qy)
    d1, d2, d3 = side(ax, ay, bx, by), side(bx, by, cx, cy), side(cx, cy, ax, ay)
    return not ((d1 < 0 or d2 < 0 or d3 < 0) and (d1 > 0 or d2 > 0 or d3 > 0))


def png(size: int) -> bytes:
    rows = []
    for j in range(size):
        row = bytearray([0])
        for i in range(size):
            x, y = (i + 0.5) * 100 / size, (j + 0.5) * 100 / size
            if not in_rounded(x, y, (0, 0, 100, 100), CORNER):
                row += bytes((0, 0, 0, 0))
            elif in_rounded(x, y, BUBBLE, BUBBLE_R) or in_tail(x, y):
                row += bytes((*WHITE, 255))
            else:
                row += bytes((*ACCENT, 255))
        rows.append(bytes(row))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
            + chunk(b"IEND", b""))


def main() -> None:
    (STATIC / "icon.svg").write_text(SVG)
    for size in (192, 512):
        (STATIC / f"icon-{size}.png").write_bytes(png(size))


if __name__ == "__main__":
    main()
