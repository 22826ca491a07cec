"""A QR code reader for the tests, written from the QR standard (ISO/IEC 18004) and independent of the encoder: a clean
matrix (rows of 1 = dark) of versions 1 to 6 holding one byte-mode segment, read back to its text. It finds the mask
and error level by trying each and keeping the reading whose padding is what the standard prescribes; it does not
correct errors (a matrix drawn by a program has none). `read_terminal` first turns half-block text into a matrix."""

from __future__ import annotations

# (version, level) -> (error codewords per block, [data codewords of each block])
BLOCKS = {
    (1, "L"): (7, [19]), (1, "M"): (10, [16]), (1, "Q"): (13, [13]), (1, "H"): (17, [9]),
    (2, "L"): (10, [34]), (2, "M"): (16, [28]), (2, "Q"): (22, [22]), (2, "H"): (28, [16]),
    (3, "L"): (15, [55]), (3, "M"): (26, [44]), (3, "Q"): (18, [17] * 2), (3, "H"): (22, [13] * 2),
    (4, "L"): (20, [80]), (4, "M"): (18, [32] * 2), (4, "Q"): (26, [24] * 2), (4, "H"): (16, [9] * 4),
    (5, "L"): (26, [108]), (5, "M"): (24, [43] * 2), (5, "Q"): (18, [15, 15, 16, 16]),
    (5, "H"): (22, [11, 11, 12, 12]),
    (6, "L"): (18, [68] * 2), (6, "M"): (16, [27] * 4), (6, "Q"): (24, [19] * 4), (6, "H"): (28, [15] * 4),
}
ALIGNMENT = {1: [], 2: [6, 18], 3: [6, 22], 4: [6, 26], 5: [6, 30], 6: [6, 34]}
MASKS = [
    lambda i, j: (i + j) % 2 == 0,
    lambda i, j: i % 2 == 0,
    lambda i, j: j % 3 == 0,
    lambda i, j: (i + j) % 3 == 0,
    lambda i, j: (i // 2 + j // 3) % 2 == 0,
    lambda i, j: (i * j) % 2 + (i * j) % 3 == 0,
    lambda i, j: ((i * j) % 2 + (i * j) % 3) % 2 == 0,
    lambda i, j: ((i + j) % 2 + (i * j) % 3) % 2 == 0,
]


def _reserved(n: int, version: int) -> set[tuple[int, int]]:
    """The modules that carry no data: finders with separators and format areas, timing, alignment patterns."""
    taken = set()
    for i in range(n):
        for j in range(n):
            if (i <= 8 and j <= 8) or (i <= 8 and j >= n - 8) or (i >= n - 8 and j <= 8) or i == 6 or j == 6:
                taken.add((i, j))
    centres = ALIGNMENT[version]
    for cy in centres:
        for cx in centres:
            if (cy, cx) in ((6, 6), (6, centres[-1]), (centres[-1], 6)):
                continue
            taken.update((cy + di, cx + dj) for di in range(-2, 3) for dj in range(-2, 3))
    return taken


def _bits(rows: list[str], version: int, mask: int) -> list[int]:
    """The data modules in the standard's order (two columns at a time from the right, up then down), unmasked."""
    n = len(rows)
    reserved = _reserved(n, version)
    out = []
    upward = True
    x = n - 1
    while x > 0:
        if x == 6:
            x = 5
        for step in range(n):
            i = n - 1 - step if upward else step
            for j in (x, x - 1):
                if (i, j) not in reserved:
                    out.append((rows[i][j] == "1") ^ MASKS[mask](i, j))
        upward = not upward
        x -= 2
    return [int(b) for b in out]


def _data(codewords: list[int], blocks: list[int]) -> list[int]:
    """The data codewords in order, from the interleaved stream (block i's k-th codeword, for each k, for each i)."""
    parts: list[list[int]] = [[] for _ in blocks]
    it = iter(codewords)
    for k in range(max(blocks)):
        for b, size in enumerate(blocks):
            if k < size:
                parts[b].append(next(it))
    return [c for part in parts for c in part]


def _parse(data: list[int]) -> bytes | None:
    bits = "".join(f"{c:08b}" for c in data)
    if bits[:4] != "0100":  # byte mode
        return None
    length = int(bits[4:12], 2)
    end = 12 + 8 * length
    if end > len(bits):
        return None
    payload = bytes(int(bits[12 + 8 * k:20 + 8 * k], 2) for k in range(length))
    rest = bits[end:]
    terminator = rest[:4]
    if terminator.strip("0"):
        return None
    padded = end + len(terminator)
    padded += -padded % 8
    pads = [int(bits[p:p + 8], 2) for p in range(padded, len(bits), 8)]
    if pads[:1] == [0]:  # segno pads a stream that ends on a byte with one zero byte more: readers skip it
        pads = pads[1:]
    if any(pad != (0xEC, 0x11)[k % 2] for k, pad in enumerate(pads)) or bits[end:padded].strip("0"):
        return None
    return payload


def read_matrix(rows: list[str]) -> str:
    """The text of a QR code given as rows of "1" (dark) and "0", without its quiet zone."""
    n = len(rows)
    version = (n - 17) // 4
    assert 1 <= version <= 6 and n == 17 + 4 * version and all(len(r) == n for r in rows), f"{n} x {len(rows[0])}"
    found = set()
    for mask in range(8):
        bits = _bits(rows, version, mask)
        codewords = [int("".join(map(str, bits[k:k + 8])), 2) for k in range(0, len(bits) - 7, 8)]
        for level in "LMQH":
            _, blocks = BLOCKS[(version, level)]
            payload = _parse(_data(codewords, blocks))
            if payload is not None:
                found.add(payload.decode("utf-8", "replace"))
    assert len(found) == 1, f"not one reading: {found}"
    return found.pop()


# a terminal cell is two modules, the top and the bottom; drawn (a block) means light
CELLS = {"█": ("0", "0"), "▀": ("0", "1"), "▄": ("1", "0"), " ": ("1", "1")}


def read_terminal(text: str, border: int) -> str:
    """The text of a QR code printed in half blocks (light modules drawn) with a quiet zone of `border` modules."""
    lines = [line for line in text.splitlines() if line and set(line) <= set(CELLS)]
    rows: list[str] = []
    for line in lines:
        top, bottom = zip(*(CELLS[c] for c in line), strict=True)
        rows += ["".join(top), "".join(bottom)]
    size = len(lines[0])
    rows = [row[border:size - border] for row in rows[border:size - border]]
    return read_matrix(rows)


__all__ = ["read_matrix", "read_terminal"]
