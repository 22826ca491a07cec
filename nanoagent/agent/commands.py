"""Slash commands, shared by `agent -m`, interactive sessions and every gateway channel (the chat apps, HTTP).

A command is declared once, with its help line and whether it may run while a turn is
running in the same session (read-only). `Commands` gets only what the commands need,
from `build_agent`; it never sees the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nanoagent.agent import events as ev
from nanoagent.errors import NanoagentError
from nanoagent.messages import ImageBlock, images_of, is_user, strip_runtime_context
from nanoagent.pricing import context_window, unknown_model_hint
from nanoagent.usage import UsageRecord, session_total

if TYPE_CHECKING:
    from nanoagent.agent.budget import PromptBudget
    from nanoagent.agent.subagents import Subagents
    from nanoagent.memory.consolidator import Consolidator
    from nanoagent.memory.dream import Dream
    from nanoagent.memory.gitlog import MemoryGit
    from nanoagent.providers.base import Providers
    from nanoagent.session.store import Session, SessionStore
    from nanoagent.skills import SkillsLoader
    from nanoagent.spend.view import SpendView
    from nanoagent.tools import ToolRegistry

INCOGNITO_NOTICE = ("Temporary chat (incognito): nothing said here is archived to memory, Dreamed or searchable, and "
                    "it is deleted when it ends (/new, leaving, an idle hour, or the gateway stopping). What it costs "
                    "still counts in `nanoagent usage`.")
NO_MEMORY_GIT = "Memory history is not kept here (this agent was built without a memory git log)."
MIN_SHA = 4  # git never abbreviates below 4 hex digits, so a shorter number is a count


@dataclass(frozen=True)
class ModelChoice:
    """Which model a session's turns use: its own (/model) unless --model on the command line pins one."""

    default: str
    pinned: bool = False

    def for_session(self, session: Session) -> str:
        return self.default if self.pinned else session.meta.model or self.default


@dataclass(frozen=True)
class Resend:
    """A command's answer that is not text but a message to run as a turn (/retry)."""

    text: str
    images: tuple[ImageBlock, ...] = ()


@dataclass(frozen=True)
class Call:
    session: Session
    args: str
    sink: ev.EventSink  # where the command's own events go (Dream's tool calls and usage)
    workdir: str = ""  # the folder the person works in (`agent -C DIR`); "" = the workspace


@dataclass(frozen=True)
class Refused:
    """A command's answer when it could not do what was asked: shown like any answer, and `agent -m` exits 1."""

    text: str


Handler = Callable[["Commands", Call], Awaitable[str | Resend | Refused]]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    handler: Handler
    read_only: bool  # may run while a turn of the same session is running


COMMANDS: dict[str, Command] = {}
# how to talk to the agent, by where /help was asked (a session key's first part): the keys of each place
HELP_TAILS = {
    "": "Type a message to talk to the agent.",
    "cli": "Type a message to talk to the agent. Alt-Enter (or Esc Enter) adds a new line.",
    "web": "Type a message to talk to the agent: Enter sends it, Shift-Enter adds a new line, Esc or Stop ends a "
           "running reply. Attach images with the image button, by pasting or by dropping them on the page; the "
           "microphone records a voice note where transcription is set up. Copy a reply or a code block with its "
           "copy button.",
}
STOP_COMMANDS = ("/stop", "/cancel")  # what a person types to stop the running turn; each channel acts on it first


def command(name: str, help: str, read_only: bool = False) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        COMMANDS[name] = Command(name, help, handler, read_only)
        return handler

    return register


@dataclass
class Commands:
    store: SessionStore
    models: ModelChoice
    providers: Providers
    budget: PromptBudget  # the window and the prompt's size, as a turn measures them
    skills: SkillsLoader | None = None
    memory_git: MemoryGit | None = None
    dream_factory: Callable[[ev.EventSink], Dream] | None = None  # builds Dream for /dream, sending to a sink
    subagents: Subagents | None = None  # the sub-agent runs, for /tasks
    tools_for: Callable[[str], ToolRegistry] | None = None  # the tools a session is offered, for /status
    tool_policy: Callable[[], list[str]] | None = None  # the tool policy in lines (`ToolPolicy.summary`), for /status
    spending: Callable[[], SpendView] | None = None  # the spend caps and what is spent, for /budget

    @property
    def consolidator(self) -> Consolidator | None:  # archives old turns to memory/history.jsonl (None: never)
        return self.budget.consolidator

    def names(self) -> list[str]:
        return sorted(COMMANDS)

    def check_model(self, session: Session) -> None:
        """ConfigError, naming the session as where the model came from and /model as the fix, when the session's
        own model cannot be used (an unknown name, a provider without a key). The default was checked at build."""
        from nanoagent.providers.registry import session_model_error

        model = self.models.for_session(session)
        if model != session.meta.model or model == self.models.default:
            return
        try:
            self.providers.get(model)
        except NanoagentError as e:
            raise session_model_error(model, self.models.default, e) from e

    def read_only(self, name: str) -> bool:
        found = COMMANDS.get(name)
        return found is not None and found.read_only

    async def run(self, session: Session, text: str, sink: ev.EventSink = ev.discard,
                  workdir: str = "") -> str | Resend | Refused:
        name, _, args = text.partition(" ")
        found = COMMANDS.get(name)
        if found is None:
            return Refused(f"Unknown command {name}. Type /help to see the commands.")
        return await found.handler(self, Call(session, args.strip(), sink, workdir))

    # --- the commands ------------------------------------------------------------------------

    @command("/help", "show this help", read_only=True)
    async def help(self, call: Call) -> str:
        width = max(map(len, COMMANDS))
        lines = [f"{c.name:<{width}}  {c.help}" for c in sorted(COMMANDS.values(), key=lambda c: c.name)]
        return "\n".join(lines + ["", HELP_TAILS.get(call.session.key.split(":", 1)[0], HELP_TAILS[""])])

    @command("/stop", "cancel the running turn (at the terminal Esc or Ctrl-C does it too)", read_only=True)
    @command("/cancel", "the same as /stop", read_only=True)
    async def stop(self, call: Call) -> str:
        return "Nothing is running."  # a running turn is stopped before it gets here: by the terminal or the gateway

    @command("/incognito", "start a temporary chat: never archived, Dreamed or searchable, deleted when it ends")
    async def incognito(self, call: Call) -> str:
        if call.session.meta.incognito:
            return "This is already a temporary chat; /new ends it and deletes it."
        self.store.start_incognito(call.session.key)
        return (INCOGNITO_NOTICE + "\nYour saved conversation is left as it was; /new ends the temporary chat and "
                "goes back to it.")

    @command("/new", "start a fresh conversation (the old one is archived to memory first)")
    async def new(self, call: Call) -> str:
        session = call.session
        if session.meta.incognito:  # nothing of it is archived: it is deleted, and the key's saved session is back
            from nanoagent.agent.subagents import root_key

            async with self.store.lock_async(session):
                self.store.end_incognito(session)
            runs = self.subagents.runs(session.key) if self.subagents is not None else []
            if all(run.finished for run in runs):  # its sub-agents' sessions go too (running ones: at the idle hour)
                for key, child in list(self.store.temporary.items()):
                    if root_key(key) == session.key:
                        self.store.end_incognito(child)
            return "Ended the temporary chat and deleted it; back to your saved conversation."
        model, unusable = self.models.for_session(session), ""
        try:
            self.check_model(session)
        except NanoagentError as e:  # the session's model is broken: archive with the default, and say so
            model, unusable = self.models.default, f"\n{e}"
        async with self.store.lock_async(session):
            pending = len(session.messages) - session.last_consolidated
            if pending <= 0:
                return "Already a fresh conversation." + unusable
            calls_before = len(session.usage)
            if self.consolidator is not None:  # history is written before anything is hidden from the model
                call.sink(ev.Progress(f"archiving {pending} messages to memory (notes first, then a summary)",
                                      session=session.key))
                await self.consolidator.archive_all(session, model)
            if session.last_consolidated < len(session.messages):
                self.store.set_consolidated(session, len(session.messages))
            spent = session_total(session.usage[calls_before:])
        kept = " and were archived to memory" if self.consolidator else ""
        price = f"no listed price for {model}" if spent.unpriced and not spent.cost else spent.cost_text()
        cost = f" Archiving took {spent.calls} model call{'' if spent.calls == 1 else 's'} ({price})." if spent.calls else ""
        return (f"Started a fresh conversation. The previous {pending} messages stay in {session.path.name}{kept}."
                + cost + unusable)

    @command("/status", "model, session, context used, tokens and cost so far", read_only=True)
    async def status(self, call: Call) -> str:
        session = call.session
        model = self.models.for_session(session)
        window = self.budget.window(model)
        which = "; the model's window, smaller than contextWindowTokens" if window.from_model else ""
        used = self.budget.used(session, model)
        delegated = self._subagent_usage(session)
        total = session_total(session.usage + delegated)
        u = total.usage
        return "\n".join([
            f"model:    {model}",
            *([f"folder:   {call.workdir} (file tools and exec work here; memory stays in the workspace)"]
              if call.workdir else []),
            f"session:  {session.key} ({len(session.messages)} messages, {session.last_consolidated} consolidated"
            + ("; a temporary chat, deleted when it ends)" if session.meta.incognito else ")"),
            f"context:  {used:,} of {window.tokens:,} tokens ({used / window.tokens:.0%}{which})",
            f"tokens:   {u.input_tokens:,} in, {u.output_tokens:,} out, {u.cache_read_tokens:,} cache read, "
            f"{u.cache_write_tokens:,} cache write",
            f"cost:     {total.cost_text()} over {total.calls} model call{'' if total.calls == 1 else 's'}"
            + (f" ({len(delegated)} by sub-agents)" if delegated else ""),
            *self._tool_lines(session.key),
        ])

    def _tool_lines(self, key: str) -> list[str]:
        """/status's lines on tools: the session's, whether MCP tools are off here as exec is, then the policy."""
        lines = []
        if self.tools_for is not None:
            names = self.tools_for(key).names()
            lines.append(f"tools:    {', '.join(names) or 'none'}")
            if "exec" not in names:
                lines.append("          no exec here, so no MCP tools but those a tools.allow or tools.policies "
                             "rule names (`mcp__<server>__*`)")
        if self.tool_policy is not None:
            lines += [f"{'policy:' if i == 0 else '':<10}{line}" for i, line in enumerate(self.tool_policy())]
        return lines

    def _subagent_usage(self, session: Session) -> list[UsageRecord]:
        from nanoagent.agent.subagents import subagent_usage

        return subagent_usage(self.store, session.key) if self.subagents is not None else []

    @command("/model", "show or switch the model for this session: /model anthropic/claude-sonnet-4-5")
    async def model(self, call: Call) -> str | Refused:
        session, name = call.session, call.args
        current = self.models.for_session(session)
        if not name:
            window = context_window(current)
            extra = f" (context window {window:,} tokens)" if window else ""
            return f"Model: {current}{extra}. Switch with /model <provider/model>."
        try:
            self.providers.get(name)  # fails now, not at the next turn, on an unknown model or missing key
        except NanoagentError as e:
            return Refused(f"Cannot switch: {e}")
        async with self.store.lock_async(session):
            self.store.set_model(session, name)
        note = " (but --model on the command line takes precedence)" if self.models.pinned else ""
        hint = unknown_model_hint(name)
        return f"This session now uses {name}{note}." + (f"\n{hint}" if hint else "")

    @command("/retry", "send the message of a turn that failed once more")
    async def retry(self, call: Call) -> str | Resend | Refused:
        session = call.session
        last = _last_user(session)
        turn = next((t for t in reversed(session.failed_turns) if t[0] <= last < t[1]), None)
        if turn is None or not is_user(session.messages[turn[0]]):
            return Refused("Nothing to retry: the last turn did not fail.")
        message = session.messages[turn[0]]
        return Resend(strip_runtime_context(message["content"]), tuple(images_of(message)))

    @command("/usage", "tokens and cost of this session, by model", read_only=True)
    async def usage(self, call: Call) -> str:
        by_model: dict[str, list[UsageRecord]] = {}
        for record in call.session.usage + self._subagent_usage(call.session):  # sub-agents' calls count here
            by_model.setdefault(record.model, []).append(record)
        if not by_model:
            return "No model calls in this session yet."
        lines = []
        for model, records in sorted(by_model.items()):
            t = session_total(records)
            lines.append(f"{model}: {t.calls} calls, {t.usage.input_tokens:,} in, {t.usage.output_tokens:,} out, "
                         f"{t.usage.cache_read_tokens:,} cache read, {t.usage.cache_write_tokens:,} cache write, "
                         f"{t.cost_text()}")
        return "\n".join(lines)

    @command("/budget", "spend caps: what each allows, what is spent, when it resets, the forecast", read_only=True)
    async def budget_caps(self, call: Call) -> str:
        if self.spending is None:
            return "Spend is not tracked by this agent."
        view = await asyncio.to_thread(self.spending)  # the ledger's totals: a file read at most
        return "\n".join(view.lines())

    @command("/skills", "list the skills the agent knows", read_only=True)
    async def skills_list(self, call: Call) -> str:
        loader = self.skills
        skills = loader.skills() if loader else []
        if loader is None or not skills:
            return "No skills found."
        lines = []
        for s in skills:
            origin = "builtin" if s.source == "builtin" else f"workspace, {loader.trust_state(s)}"
            loaded = loader.loads_always(s)
            lines.append(f"{s.name} ({origin}{', always loaded' if loaded else ''}): {s.description}"
                         + ("" if loaded or not s.always or not s.available else f" [{loader.always_note(s)}]")
                         + ("" if s.available else f" [unavailable: {'; '.join(s.missing)}]"))
        return "\n".join(lines)

    @command("/sessions", "list saved sessions", read_only=True)
    async def sessions(self, call: Call) -> str:
        keys = self.store.keys()
        return "\n".join(f"{'*' if k == call.session.key else ' '} {k}" for k in keys) or "No saved sessions yet."

    @command("/dream", "fold new history into long-term memory now (/dream --dry-run to preview)")
    async def dream(self, call: Call) -> str | Refused:
        from nanoagent.memory.dream import describe

        if self.dream_factory is None:
            return Refused("Dream is not available here.")
        dream = self.dream_factory(call.sink)
        flags = call.args.split()
        try:
            results = await dream.run(dry_run="--dry-run" in flags, all_entries="--all" in flags)
        except NanoagentError as e:
            return Refused(f"Dream failed: {e}")
        return describe(results, dream.history.dream_cursor)

    @command("/dream-log", "list the edits made to memory, or show one: /dream-log [N | SHA]", read_only=True)
    async def dream_log(self, call: Call) -> str | Refused:
        memory, arg = self.memory_git, call.args
        if memory is None:
            return Refused(NO_MEMORY_GIT)
        try:
            if arg and not (arg.isdigit() and len(arg) < MIN_SHA):
                return await asyncio.to_thread(memory.show, arg)
            commits = await asyncio.to_thread(memory.log, int(arg) if arg else 20)
        except NanoagentError as e:
            return Refused(f"Cannot read the memory history: {e}")
        if not commits:
            return "No memory edits recorded yet."
        lines = [f"{c.short}  {c.time:%Y-%m-%d %H:%M}  {', '.join(c.files) or '-'}  {c.summary}" for c in commits]
        return "\n".join(lines + ["", "Show one with /dream-log SHA; undo one with /dream-restore SHA."])

    @command("/dream-restore", "undo one memory edit, keeping every later change: /dream-restore SHA")
    async def dream_restore(self, call: Call) -> str | Refused:
        memory = self.memory_git
        if memory is None:
            return Refused(NO_MEMORY_GIT)
        if not call.args:
            return Refused("Which edit? Give its sha: /dream-restore SHA (see /dream-log).")
        try:
            made = await asyncio.to_thread(memory.restore, call.args)
        except NanoagentError as e:
            return Refused(f"Cannot restore: {e}")
        return f"{made.summary}\nChanged {', '.join(made.files)}; recorded as {made.short}."


    @command("/tasks", "list this session's sub-agent runs; /tasks cancel ID stops one", read_only=True)
    async def tasks(self, call: Call) -> str:
        if self.subagents is None:
            return "Sub-agents are off here (agents.defaults.subagents.maxDepth is 0)."
        runs = self.subagents.runs(call.session.key)
        verb, _, run_id = call.args.partition(" ")
        if verb == "cancel":
            run = self.subagents.get(run_id, call.session.key)
            if run is None:
                return f"No sub-agent run {run_id.strip()!r} in this session; /tasks lists them." if run_id.strip() \
                    else "Which run? /tasks cancel ID (see /tasks)."
            if run.finished:
                return f"Sub-agent {run.id} already ended ({run.status.value})."
            await self.subagents.cancel(run)
            return f"Cancelled sub-agent {run.id}; its session {run.key} records how far it got."
        if verb:
            return "Use /tasks to list the runs, or /tasks cancel ID to stop one."
        if not runs:
            return "No sub-agent runs in this session since nanoagent started."
        lines = [f"{'id':<6}  {'status':<9}  {'time':>7}  {'tools':>5}  {'mode':<10}  task"]
        for r in runs:
            task = " ".join(r.task.split())
            lines.append(f"{r.id:<6}  {r.status.value:<9}  {r.elapsed():>6.1f}s  {r.tool_calls:>5}  "
                         f"{'background' if r.background else 'foreground':<10}  {task[:60] + ('…' if len(task) > 60 else '')}")
        return "\n".join(lines + ["", "Stop one with /tasks cancel ID."])


def _last_user(session: Session) -> int:
    return max((i for i, m in enumerate(session.messages) if is_user(m)), default=-1)
