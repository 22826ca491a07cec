"""`nanoagent usage`: tokens and cost per day, session and model from the session files, with the spend ledger's total
under them; `--by source|channel|session`, the ledger's calls summed by the kind of work and its model, by channel or
by session (`spend/sources.py`). Every table is laid out to the terminal before rich sees it (`fit_table`): no figure
is ever cut."""

from __future__ import annotations

import json
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

    from nanoagent.config.schema import Config
    from nanoagent.paths import Paths
    from nanoagent.spend.sources import Call, Spent
    from nanoagent.spend.view import SpendView
    from nanoagent.usage import Total

UNKNOWN_COST = "—"
# the columns a narrow terminal drops first, in order; numbers are never cut, session and model names shrink instead
_DROP_ORDER = ("cache write", "cache read", "calls", "day")
_NAMES_MIN = 8  # the least width session and model names shrink to before another column goes
_SAME = 0.00005  # USD: two totals closer than this show the same figure


def show_usage(paths: Paths, config: Config, session: str | None, days: int | None, by: str | None,
               json_output: bool) -> None:
    """What `nanoagent usage` prints: the session files' table (or with `by`, the ledger's), the ledger's total, the
    caps."""
    from nanoagent.spend.caps import ledger_for
    from nanoagent.spend.sources import read_calls
    from nanoagent.spend.view import spend_view

    ledger = ledger_for(paths, config.defaults.timezone)
    calls = read_calls(ledger.file, ledger.calendar, days, session)
    view = spend_view(config, paths)
    if by is not None:
        show_by(calls, by, view, json_output)
    else:
        show_sessions(paths, session, days, calls, view, json_output)


def show_sessions(paths: Paths, session: str | None, days: int | None, calls: list[Call], view: SpendView,
                  json_output: bool) -> None:
    """The table of the session files (day, session, model), then the ledger's total for the same days."""
    from nanoagent.agent.subagents import usage_records
    from nanoagent.cli.logs import warn
    from nanoagent.cli.render import table_console
    from nanoagent.session.store import SessionStore
    from nanoagent.spend.sources import total
    from nanoagent.usage import Total, rows_json, summarize

    store = SessionStore(paths.sessions_dir, warn=warn)
    rows = summarize(usage_records(store, session), days=days)
    ledger = total(calls)
    if json_output:
        print(json.dumps({**rows_json(rows), "ledger": ledger.to_json(), "budget": view.to_json()},
                         ensure_ascii=False, indent=1))
        return
    console = table_console()
    columns = console.width
    grand = Total()
    for *_, row_total in rows:
        grand.merge(row_total)
    if not rows:
        print("No usage recorded in the session files" + (f" for session {_key(session)}" if session else "") + ".")
    else:
        table, dropped, table_width = usage_table(rows, columns)
        console.width = max(columns, table_width)  # the figures alone are wider: the terminal wraps, never a number
        console.print(table)
        console.width = columns
        _unpriced_note([(model, row_total) for _, _, model, row_total in rows])
        if dropped:
            print(f"Not shown at {columns} columns: {', '.join(dropped)} (a wider terminal, or piped, shows every "
                  "column).")
    if ledger.calls or ledger.held:
        _say(ledger_line(grand, ledger), console.is_terminal, columns)
    if view.caps:
        print(view.short())


def ledger_line(sessions: Total, ledger: Spent) -> str:
    """The ledger's total under the session files' table, and why the two may differ."""
    from nanoagent.pricing import format_cost

    held = f" (+ {format_cost(ledger.held)} held by calls not settled)" if ledger.held >= _SAME else ""
    spent = f"{format_cost(ledger.usd)}{held} in {ledger.calls:,} call{'' if ledger.calls == 1 else 's'}"
    if abs(ledger.usd - sessions.cost) < _SAME and not sessions.unpriced:
        return f"Spend ledger: {spent}, the same as the session files (`nanoagent usage --by source` splits it)."
    return (f"Spend ledger: {spent} (`nanoagent usage --by source` splits it). It counts every call the caps count, "
            "deleted sessions, transcriptions, embeddings and failed attempts included, each at the price the caps "
            "use (providers.<name>.prices first); the table above holds only what the session files record.")


def show_by(calls: list[Call], by: str, view: SpendView, json_output: bool) -> None:
    """The ledger's calls summed by `by`: a table, or JSON `{"by", "rows": [{<group>, calls, tokens, cost,
    unpriced, reserved}], "total"}`."""
    from nanoagent.cli.render import table_console
    from nanoagent.spend.sources import by_json, grouped, total

    if json_output:
        print(json.dumps({**by_json(calls, by), "budget": view.to_json()}, ensure_ascii=False, indent=1))
        return
    groups = [(key, spent) for key, spent in grouped(calls, by) if spent.calls]  # what is only held: the note
    names = ["source", "model"] if by == "source" else [by]
    grand = total(calls)
    if not groups:
        print("No call settled in the spend ledger" + (" for these days or this session." if calls else "."))
        return
    console = table_console()
    columns = console.width
    lines = [[*key, *_figures(spent)] for key, spent in groups]
    lines.append(["total", *[""] * (len(names) - 1), *_figures(grand)])
    headers = [*names, "calls", "input", "output", "cache read", "cache write", "cost"]
    table, dropped, table_width = fit_table(headers, lines, names=tuple(range(1, len(names)) if by == "source" else (0,)),
                                            left=len(names), width=columns)
    console.width = max(columns, table_width)
    console.print(table)
    console.width = columns
    notes = []
    if grand.held >= _SAME:
        from nanoagent.pricing import format_cost

        notes.append(f"{format_cost(grand.held)} more is held by calls not settled (under way, or whose process "
                     "died): the caps count it at its worst case; it is not in the total.")
    if grand.unpriced:
        notes.append(f"{UNKNOWN_COST} calls recorded at no cost: their model has no known price.")
    if dropped:
        notes.append(f"Not shown at {columns} columns: {', '.join(dropped)} (a wider terminal, or piped, shows "
                     "every column).")
    for note in notes:
        _say(note, console.is_terminal, columns)


def _figures(spent: Spent) -> list[str]:
    from nanoagent.pricing import format_cost

    u = spent.usage
    cost = format_cost(spent.usd) if not spent.unpriced else \
        UNKNOWN_COST if spent.usd == 0 else f"{format_cost(spent.usd)} + {UNKNOWN_COST}"
    return [f"{spent.calls:,}", f"{u.input_tokens:,}", f"{u.output_tokens:,}", f"{u.cache_read_tokens:,}",
            f"{u.cache_write_tokens:,}", cost]


def _say(text: str, terminal: bool, columns: int) -> None:
    """A line of prose: wrapped between words on a terminal, whole when piped."""
    print("\n".join(textwrap.wrap(text, max(20, columns))) if terminal else text)


def _key(session: str) -> str:
    return session if ":" in session else "cli:" + session


def _unpriced_note(rows: list[tuple[str, Total]]) -> None:
    unpriced: dict[str, int] = {}
    for model, row_total in rows:
        if row_total.unpriced:
            unpriced[model] = unpriced.get(model, 0) + row_total.calls
    if unpriced:
        named = ", ".join(f"{model} ({calls:,} call{'' if calls == 1 else 's'})" for model, calls in unpriced.items())
        print(f"{UNKNOWN_COST} no known price for {named}: the cost of these calls is unknown and not in the total.")


def _cost_cell(total: Total) -> str:
    from nanoagent.pricing import format_cost

    if not total.unpriced:
        return format_cost(total.cost)
    return UNKNOWN_COST if total.cost == 0 else f"{format_cost(total.cost)} + {UNKNOWN_COST}"


def usage_table(rows: list[tuple[str, str, str, Total]], width: int) -> tuple[Table, list[str], int]:
    """The session files' table (day, session, model and the figures, then the total) fitted to `width`."""
    from nanoagent.usage import Total

    grand = Total()
    lines = []
    for day, key, model, total in rows:
        u = total.usage
        lines.append([day, key, model, f"{total.calls:,}", f"{u.input_tokens:,}", f"{u.output_tokens:,}",
                      f"{u.cache_read_tokens:,}", f"{u.cache_write_tokens:,}", _cost_cell(total)])
        grand.merge(total)
    g = grand.usage
    lines.append(["total", "", "", f"{grand.calls:,}", f"{g.input_tokens:,}", f"{g.output_tokens:,}",
                  f"{g.cache_read_tokens:,}", f"{g.cache_write_tokens:,}", _cost_cell(grand)])
    headers = ["day", "session", "model", "calls", "input", "output", "cache read", "cache write", "cost"]
    return fit_table(headers, lines, names=(1, 2), left=3, width=width)


def fit_table(headers: list[str], lines: list[list[str]], names: tuple[int, ...], left: int,
              width: int) -> tuple[Table, list[str], int]:
    """A table of `lines` (the last one the total, in bold, its label in its first cell) fitted to `width`
    columns, the columns left out to fit, and its own width (wider than `width` only when the figures alone do not
    fit: the terminal then wraps the lines, never a number). Every figure is shown whole: each column but the
    `names` (one or two) is as wide as its widest value; names are cut with an ellipsis; when even that does not
    fit, whole columns go (`_DROP_ORDER`). The first `left` columns are text, the rest numbers."""
    from rich.table import Table

    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    shown = list(range(len(headers)))

    def needed() -> int:  # a box line each side and between columns, one space of padding each side of a cell
        fixed = sum(widths[i] for i in shown if i not in names)
        return fixed + sum(min(widths[i], _NAMES_MIN) for i in names) + 3 * len(shown) + 1

    dropped = []
    for name in _DROP_ORDER:
        if needed() <= width:
            break
        if name in headers:
            shown.remove(headers.index(name))
            dropped.append(name)
    _share(widths, names, width - needed() + sum(min(widths[i], _NAMES_MIN) for i in names))
    table = Table()
    for i in shown:
        table.add_column(headers[i], width=widths[i], no_wrap=True,
                         overflow="ellipsis" if i in names else "fold", justify="left" if i < left else "right")
    if shown[0] != 0:  # the total's label moves to the first column left
        lines[-1][shown[0]] = lines[-1][0]
    for n, line in enumerate(lines):
        table.add_row(*(line[i] for i in shown), style="bold" if n == len(lines) - 1 else None)
    return table, dropped, sum(widths[i] for i in shown) + 3 * len(shown) + 1


def _share(widths: list[int], names: tuple[int, ...], room: int) -> None:
    """Give the name columns `room` between them: the second (a model) gets its share first, the first takes the
    rest; neither less than `_NAMES_MIN` (or its whole width when narrower)."""
    if len(names) == 1:
        i = names[0]
        widths[i] = max(min(widths[i], room), min(widths[i], _NAMES_MIN))
        return
    first, second = names
    second_w = min(widths[second], max(room // 2, room - widths[first]))
    widths[first], widths[second] = (max(min(widths[first], room - second_w), min(widths[first], _NAMES_MIN)),
                                     max(second_w, min(widths[second], _NAMES_MIN)))
