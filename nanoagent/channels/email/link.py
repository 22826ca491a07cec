"""The email channel's connection: IMAP (aioimaplib) to read the mailbox, SMTP (aiosmtplib) to answer.

Reading: new unseen mail in the folder, found with IDLE where the server offers it, else by looking every
`pollSeconds`. A mail from an allowed sender becomes an `Incoming` in its thread's session; automatic mail, lists,
our own mail and strangers' mail are passed over and left unseen (the mailbox may be the user's own). A mail is
marked `\\Seen` only once the engine has it on disk (`acknowledge`); the state's cursor `uid` is the highest UID
below which every mail was passed over or acknowledged, so a restart looks only at what came after it.

Writing: a reply goes by SMTP to the thread's correspondent with In-Reply-To and References; what a thread's reply
needs (correspondent, subject, last Message-ID, references) is kept in the state's cursor under
`thread:<chat>:<hash>` (`mail.thread_id`; older state's `thread:<hash>` is still read).
Mail has no edits: the engine sends finished replies only. A reply's SMTP exchange waits `Timing.send_timeout`; one
that timed out may have been taken, so it is sent once more at most, with the same Message-ID (clients show one). A place `email:<address>` (a scheduled message to a
person) starts a new thread, whose answers come back in the session of that new thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import ipaddress
import json
import logging
import re
import ssl
from collections.abc import AsyncIterator
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any

import nanoagent.channels.email.format as fmt
import nanoagent.channels.email.mail as mail
from nanoagent import keys
from nanoagent.channels.base import Chunk, DeliveryError, FileIn, Incoming, Timing, record
from nanoagent.channels.state import ChannelState, state_file
from nanoagent.errors import NanoagentError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nanoagent.channels.email.settings import EmailConfig, MailServerConfig
    from nanoagent.paths import Paths

log = logging.getLogger("nanoagent.channels.email")
IDLE_RENEW = 25 * 60.0  # seconds before IDLE is renewed (servers end it after 30 minutes)
TIMEOUT = 30.0  # seconds for one IMAP command or SMTP exchange
RESENDS = 1  # a reply whose SMTP exchange timed out (the server may have taken it) is sent once more at most
MAX_THREADS = 500  # threads remembered for replies, the least recent dropped
FETCH = re.compile(rb"^\d+ FETCH \(.*\bUID (\d+)\b.*\{(\d+)\}$")


def own_address(settings: EmailConfig) -> str:
    return (settings.address or settings.imap.user).strip()


def loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


class Refused(NanoagentError):
    """The server refused the credentials or the setup: retrying does not help."""


class Answered(ConnectionError):
    """The SMTP server answered with a temporary refusal (4xx): trying later may help."""

    def __init__(self, code: int):
        super().__init__(f"SMTP {code}")
        self.code = code


class TimedOut(ConnectionError):
    """The SMTP server did not answer in time: the mail may have been taken (a timeout after DATA)."""


# --- SMTP ------------------------------------------------------------------------------------------------------------


async def smtp_send(settings: EmailConfig, msg: EmailMessage | None, timeout: float = TIMEOUT) -> None:
    """One SMTP session: connect (TLS or STARTTLS unless `none`), log in, send `msg` (None: only check that the server
    takes the login). Without `smtp.user` it logs in with the mailbox's login when the server offers a login, and sends
    without one when it offers none (a relay). Refused for a refused login or a permanent (5xx) refusal; OSError for
    what may pass (a connection refused, a 4xx answer)."""
    import aiosmtplib

    server = settings.smtp
    user, password = (server.user, server.password) if server.user else (settings.imap.user, settings.imap.password)
    port = server.port or (465 if server.security == "tls" else 587)
    client = aiosmtplib.SMTP(hostname=server.host, port=port, use_tls=server.security == "tls",
                             start_tls=server.security == "starttls", timeout=timeout)
    try:
        await client.connect()
        try:
            if client.is_ehlo_or_helo_needed:
                await client.ehlo()  # what the server offers, a login among it
            if server.user or (user and client.supports_extension("auth")):
                await client.login(user, password or "")
            if msg is not None:
                await client.send_message(msg)
        finally:
            with contextlib.suppress(aiosmtplib.SMTPException, OSError, asyncio.TimeoutError):
                await client.quit()
    except aiosmtplib.SMTPAuthenticationError:
        where = "smtp" if server.user else "imap"  # without smtp.user, the mailbox's login is the one refused
        raise Refused(f"The SMTP server {server.host} refused the login for {user!r}; check "
                      f"channels.email.{where}.user and password (or EMAIL_PASSWORD).") from None
    except aiosmtplib.SMTPConnectTimeoutError:
        raise ConnectionError("SMTPConnectTimeoutError") from None  # nothing went out
    except aiosmtplib.SMTPTimeoutError:
        raise TimedOut("SMTP timeout") from None
    except aiosmtplib.SMTPResponseException as e:
        if 400 <= e.code < 500:
            raise Answered(e.code) from None
        raise Refused(f"The SMTP server {server.host} refused the mail ({e.code}); check channels.email.smtp and "
                      "the recipient's address.") from None
    except aiosmtplib.SMTPException as e:
        if "AUTH" in str(e):  # no login offered on this connection (many servers offer it only after STARTTLS)
            raise Refused(f"The SMTP server {server.host} offers no login on this connection; check "
                          "channels.email.smtp.security and port.") from None
        raise ConnectionError(type(e).__name__) from None
    except TimeoutError:
        raise TimedOut("SMTP timeout") from None


def smtp_problem(error: OSError) -> str:
    """What went wrong with the SMTP server, in words that say whether it answered at all."""
    if isinstance(error, Answered):
        return f"the SMTP server answered {error.code}"
    if isinstance(error, TimedOut):
        return "the SMTP server did not answer in time"
    return f"the SMTP server unreachable: {error if isinstance(error, ConnectionError) and str(error) else type(error).__name__}"


# --- IMAP ------------------------------------------------------------------------------------------------------------


class Imap:
    """One logged-in IMAP connection with the folder selected; `lost` is set when the server goes away."""

    def __init__(self, client: Any, lost: asyncio.Event, validity: str):
        self.client = client
        self.lost = lost
        self.validity = validity
        self.idle_refused = False

    @classmethod
    async def open(cls, server: MailServerConfig, folder: str, timeout: float = TIMEOUT) -> Imap:
        import aioimaplib

        logging.getLogger("aioimaplib").setLevel(logging.WARNING)  # its debug lines hold whole mails and logins
        port = server.port or (993 if server.security == "tls" else 143)
        lost = asyncio.Event()
        if server.security == "tls":
            client = aioimaplib.IMAP4_SSL(server.host, port, timeout=timeout, ssl_context=ssl.create_default_context())
        else:
            client = aioimaplib.IMAP4(server.host, port, timeout=timeout)
        imap = cls(client, lost, "")

        def gone(exc: Exception | None) -> None:
            lost.set()
            client.protocol.idle_queue.put_nowait(aioimaplib.STOP_WAIT_SERVER_PUSH)

        client.protocol.conn_lost_cb = gone
        try:
            await client.wait_hello_from_server()
            if server.security == "starttls":
                await imap._starttls(server.host)
            response = await client.login(server.user, server.password or "")
            if response.result != "OK":
                raise Refused(f"The IMAP server {server.host} refused the login for {server.user!r}; check "
                              "channels.email.imap.user and password (or EMAIL_PASSWORD).")
            response = await client.select(folder)
            if response.result != "OK":
                raise Refused(f"The IMAP server {server.host} has no folder {folder!r}; check channels.email.folder.")
        except BaseException:
            await imap.close()
            raise
        for line in response.lines:
            found = re.search(rb"UIDVALIDITY (\d+)", bytes(line))
            if found:
                imap.validity = found.group(1).decode()
        return imap

    async def _starttls(self, host: str) -> None:
        import aioimaplib

        protocol = self.client.protocol
        if "STARTTLS" not in protocol.capabilities:
            raise Refused(f"The IMAP server {host} does not offer STARTTLS; set channels.email.imap.security to "
                          '"tls" (port 993).')
        response = await asyncio.wait_for(protocol.execute(aioimaplib.Command("STARTTLS", protocol.new_tag())),
                                          self.client.timeout)
        if response.result != "OK":
            raise Refused(f"The IMAP server {host} refused STARTTLS; set channels.email.imap.security to \"tls\".")
        loop = asyncio.get_running_loop()
        protocol.transport = await loop.start_tls(protocol.transport, protocol, ssl.create_default_context(),
                                                  server_hostname=host)
        await asyncio.wait_for(protocol.capability(), self.client.timeout)

    @property
    def idle(self) -> bool:
        return bool(self.client.has_capability("IDLE")) and not self.idle_refused

    async def unseen(self, after: int) -> list[int]:
        response = await self.client.uid_search("UID", f"{after + 1}:*", "UNSEEN", charset=None)
        self._check(response, "SEARCH")
        words = b" ".join(bytes(line) for line in response.lines[:-1]).split()
        return sorted(int(w) for w in words if w.isdigit() and int(w) > after)

    async def fetch(self, uids: list[int]) -> dict[int, bytes]:
        """The raw bytes of these mails, without marking them seen."""
        if not uids:
            return {}
        response = await self.client.uid("fetch", ",".join(map(str, uids)), "(UID FLAGS BODY.PEEK[])")
        self._check(response, "FETCH")
        found: dict[int, bytes] = {}
        lines = response.lines
        for i, line in enumerate(lines[:-1]):
            match = FETCH.match(bytes(line)) if isinstance(line, bytes) else None
            if match and i + 1 < len(lines) and isinstance(lines[i + 1], bytearray):
                found[int(match.group(1))] = bytes(lines[i + 1])
        return found

    async def mark_seen(self, uids: list[int]) -> None:
        response = await self.client.uid("store", ",".join(map(str, uids)), "+FLAGS.SILENT", "(\\Seen)")
        self._check(response, "STORE")

    async def wait(self, poll: float, wake: asyncio.Event) -> None:
        """Until the server says new mail came (IDLE), `poll` seconds passed (no IDLE), or `wake` is set."""
        waits = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(self.lost.wait())}
        idle = None
        try:
            if self.idle:
                idle = await self._idle_start()
            if idle is not None:
                waits.add(asyncio.ensure_future(self.client.wait_server_push(timeout=IDLE_RENEW + 60)))
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.wait(waits, timeout=poll, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
            if idle is not None and not self.lost.is_set():
                self.client.idle_done()
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(idle, self.client.timeout)
        if self.lost.is_set():
            raise ConnectionError("IMAP connection lost")

    async def _idle_start(self) -> Any:
        """IDLE begun; None when the server refused it after offering it: this connection polls from then on."""
        import aioimaplib

        try:
            return await self.client.idle_start(timeout=IDLE_RENEW)
        except aioimaplib.Abort:
            if self.lost.is_set():
                raise ConnectionError("IMAP connection lost") from None
            self.idle_refused = True
            log.warning(record("email_idle_refused"))
            return None

    def _check(self, response: Any, what: str) -> None:
        if self.lost.is_set():
            raise ConnectionError("IMAP connection lost")
        if response.result != "OK":
            raise ConnectionError(f"IMAP {what} {response.result}")

    async def close(self) -> None:
        protocol = self.client.protocol
        busy = protocol.pending_sync_command is not None or any(protocol.pending_async_commands.values())
        with contextlib.suppress(Exception):  # a polite LOGOUT when the connection is free; else it is just closed
            if not busy and not self.lost.is_set() and self.client.get_state() in ("AUTH", "SELECTED"):
                await asyncio.wait_for(self.client.logout(), 2)
        transport = getattr(self.client.protocol, "transport", None)
        if transport is not None:
            transport.close()


# --- the link --------------------------------------------------------------------------------------------------------

IMAP_ERRORS: tuple[type[BaseException], ...] = (OSError, asyncio.TimeoutError, ConnectionError)


def _imap_errors() -> tuple[type[BaseException], ...]:
    import aioimaplib

    return (*IMAP_ERRORS, aioimaplib.AioImapException)


class EmailLink:
    """The `Link` of the email channel."""

    def __init__(self, settings: EmailConfig, paths: Paths, timing: Timing | None = None):
        self.settings = settings
        self.timing = timing or Timing()
        self.own = own_address(settings)
        self.state = state_file(paths, mail.NAME)
        self.imap: Imap | None = None
        self.after = 0  # the cursor: every UID up to it was passed over or acknowledged
        self.validity = ""
        self.pending: set[int] = set()  # UIDs handed to the engine, not acknowledged yet
        self.passed: set[int] = set()  # UIDs passed over but above the cursor (a lower one is still pending)
        self.to_mark: set[int] = set()  # acknowledged UIDs still to be marked \Seen
        self.top = 0  # the highest UID looked at
        self.wake = asyncio.Event()
        self.closed = False
        self.cache: dict[int, bytes] = {}  # recent mails with attachments, for `download`
        self.threads: dict[str, mail.Thread] = {}
        self.roots: dict[str, str] = {}  # Message-ID in a known thread -> the thread's root
        self.problems: dict[str, str] = {}  # "imap" | "smtp" -> what fails there, until a call there succeeds

    # --- connecting ---------------------------------------------------------------------------------------------

    async def connect(self) -> str:
        data = self.state.update(_migrate)
        self.validity = data.cursor.get("uidvalidity", "")
        self.after = int(data.cursor.get("uid", "0") or 0)
        self.threads = {k.removeprefix("thread:"): t for k, v in data.cursor.items()
                        if k.startswith("thread:") and (t := _thread(v)) is not None}
        self.roots = {msgid: t.references[0] for t in self.threads.values() for msgid in t.references}
        try:
            self.imap = await self._open()
            await smtp_send(self.settings, None, TIMEOUT)
        except Refused:
            raise
        except _imap_errors() as e:
            raise NanoagentError(f"Cannot reach the mail servers ({type(e).__name__}); check channels.email.imap "
                                 "and smtp (host, port, security).") from None
        log.info(record("email_mailbox_open", idle=self.imap.idle))
        return self.own

    async def _open(self) -> Imap:
        imap = await Imap.open(self.settings.imap, self.settings.folder, TIMEOUT)
        if imap.validity != self.validity:  # a new mailbox, or the server renumbered it: start over
            self.validity, self.after, self.top = imap.validity, 0, 0
            self.pending, self.to_mark, self.passed = set(), set(), set()
            self._save_cursor()
        return imap

    # --- reading -----------------------------------------------------------------------------------------------

    async def receive(self) -> AsyncIterator[list[Incoming]]:
        failures = 0
        while not self.closed:
            try:
                if self.imap is None:
                    self.imap = await self._open()
                    log.info(record("email_reconnected"))
                await self._mark()
                batch = await self._check(self.imap)
                self._health("imap", None)
                failures = 0
                if batch:
                    yield batch
                    continue
                _raise_if_cancelled()
                if not self.closed:
                    self.wake.clear()
                    await self.imap.wait(float(self.settings.poll_seconds), self.wake)
            except Refused as e:
                log.error(record("email_refused", error=str(e)))
                self._health("imap", str(e))
                await self._drop()
                await asyncio.sleep(self.timing.pause(len(self.timing.backoff)))
            except _imap_errors() as e:
                log.warning(record("email_imap_failed", error=type(e).__name__))
                self._health("imap", f"the IMAP server unreachable: {type(e).__name__}")
                await self._drop()
                await asyncio.sleep(self.timing.pause(failures))
                failures += 1

    def _health(self, server: str, problem: str | None) -> None:
        """IMAP and SMTP fail apart: the link is failing while either does (a mailbox read well does not hide a
        failing SMTP server), with the first failure's reason."""
        if problem:
            self.problems[server] = problem
        else:
            self.problems.pop(server, None)
        self.timing.report(next(iter(self.problems.values()), None))

    async def _drop(self) -> None:
        if self.imap is not None:
            imap, self.imap = self.imap, None
            await imap.close()

    async def _check(self, imap: Imap) -> list[Incoming]:
        known = self.pending | self.to_mark | self.passed
        uids = [u for u in await imap.unseen(self.after) if u not in known]
        if not uids:
            self._settle(imap_top=self.top)
            return []
        fetched = await imap.fetch(uids)
        batch = []
        for uid in uids:
            self.top = max(self.top, uid)
            data = fetched.get(uid)
            incoming = self._read(uid, data) if data is not None else None
            if incoming is not None:
                self.pending.add(uid)
                batch.append(incoming)
            else:
                self.passed.add(uid)
        self._settle(imap_top=self.top)
        return batch

    def _read(self, uid: int, data: bytes) -> Incoming | None:
        msg: EmailMessage = email.message_from_bytes(data, policy=email.policy.default)
        why = mail.ignored(msg, self.own)
        address, name = mail.sender(msg)
        if why is None and not mail.allowed(self.settings.allow_from, address):
            why = "not_allowed"
        if why is not None:
            log.info(record("email_passed_over", uid=uid, reason=why))
            return None
        msgid = mail.message_id(msg, data)
        root = mail.root_of(msg, msgid, self.roots)
        place = mail.place_of(address, root)
        refs = mail.MSGID.findall(str(msg.get("References") or ""))
        subject = mail.header_value(str(msg.get("Subject") or ""))
        text = mail.text_of(msg)
        first_line = text.strip().split("\n", 1)[0].strip()
        if root == msgid and subject.strip() not in ("", first_line) and not first_line.startswith("/"):
            # a thread's first mail: its subject says what it is about (a command, though, is sent as it is)
            text = f"Subject: {subject.strip()}\n\n{text}"
        others = [a for a in mail.recipients(msg) if a.lower() not in (self.own.lower(), address)]
        files = mail.files_of(msg, uid)
        if files:
            self.cache[uid] = data
            while len(self.cache) > 20:
                self.cache.pop(next(iter(self.cache)))
        raw = {"id": msgid, "uid": uid, "validity": self.validity, "place": place.key, "user": address,
               "private": not others,
               "name": name or address, "text": text, "subject": subject, "references": [*refs, msgid],
               "files": [{"kind": f.kind, "name": f.name, "size": f.size, "ref": f.ref, "media_type": f.media_type}
                         for f in files]}
        return self.rebuild(raw)

    def rebuild(self, raw: dict[str, Any]) -> Incoming | None:
        place = keys.parse(str(raw.get("place", "")))
        if place is None or not isinstance(raw.get("user"), str) or not isinstance(raw.get("id"), str):
            return None
        files = [FileIn(str(f.get("kind", "file")), f.get("name"), f.get("size"), str(f.get("ref", "")),
                        f.get("media_type")) for f in raw.get("files", []) if isinstance(f, dict)]
        refs = [r for r in raw.get("references", []) if isinstance(r, str)]
        self._remember(place, raw["user"], str(raw.get("subject", "")), raw["id"], refs)
        return Incoming(id=raw["id"], place=place, user=raw["user"], name=str(raw.get("name") or raw["user"]),
                        text=str(raw.get("text", "")), raw=raw, private=raw.get("private") is not False,
                        addressed=True, files=files)

    def _remember(self, place: keys.Place, to: str, subject: str, last: str, refs: list[str]) -> None:
        """The thread as a reply to `last` needs it, kept in memory and in the state's cursor."""
        thread, known = self._known(place)
        if known is not None and last in known.references:  # seen in this thread already (a replay after a restart)
            return
        if known is None:
            known = mail.Thread(to, subject, last, refs)
        else:
            known.to = to
            known.references = refs or known.references
            known.answered(last)
        self.threads[thread] = known
        self._save_thread(thread, known)

    def _known(self, place: keys.Place) -> tuple[str, mail.Thread | None]:
        """The id `place`'s thread is kept under, and the thread when it is known."""
        found = mail.find_thread(self.threads, place)
        return found if found is not None else (mail.thread_id(place), None)

    def _save_thread(self, thread: str, info: mail.Thread) -> None:
        for msgid in info.references:
            self.roots[msgid] = info.references[0]

        def change(state: ChannelState) -> None:
            state.cursor[f"thread:{thread}"] = json.dumps(info.to_json())
            threads = sorted((k for k in state.cursor if k.startswith("thread:")),
                             key=lambda k: (_thread(state.cursor[k]) or mail.Thread("", "", "", at=0)).at)
            for old in threads[:-MAX_THREADS]:
                del state.cursor[old]

        self.state.update(change)

    def _settle(self, imap_top: int) -> None:
        """Move the cursor up to just below the lowest UID the engine has not acknowledged."""
        low = min([*self.pending, *self.to_mark], default=imap_top + 1) - 1
        if low > self.after:
            self.after = low
            self.passed = {uid for uid in self.passed if uid > low}
            self._save_cursor()

    def _save_cursor(self) -> None:
        after, validity = str(self.after), self.validity

        def change(state: ChannelState) -> None:
            state.cursor["uid"] = after
            state.cursor["uidvalidity"] = validity

        self.state.update(change)

    async def acknowledge(self, items: list[Incoming]) -> None:
        uids = {int(i.raw["uid"]) for i in items if isinstance(i.raw.get("uid"), int)
                and i.raw.get("validity") == self.validity}
        self.to_mark |= uids
        self.pending -= uids
        if self.imap is not None and not self.imap.client.has_pending_idle():
            with contextlib.suppress(*_imap_errors()):
                await self._mark()
                return
        self.wake.set()  # the reading loop marks them when it next runs

    async def _mark(self) -> None:
        if self.to_mark and self.imap is not None:
            uids = sorted(self.to_mark)
            await self.imap.mark_seen(uids)
            self.to_mark -= set(uids)
            log.info(record("email_marked_seen", uids=len(uids)))
            self._settle(imap_top=self.top)

    # --- writing -----------------------------------------------------------------------------------------------

    async def send(self, place: keys.Place, chunk: Chunk, persistent: bool) -> str | None:
        thread_id, thread = self._known(place)
        if thread is None and not mail.starts_thread(place):
            log.warning(record("email_unknown_thread", place=place.key))
            return None
        to = thread.to if thread is not None else place.chat
        msg = mail.compose(self.own, to, fmt.new_subject(chunk.plain), chunk.plain, chunk.body, thread)
        msgid = str(msg["Message-ID"])
        failures, resends = 0, RESENDS
        while True:
            try:
                await smtp_send(self.settings, msg, self.timing.send_timeout)
                self._health("smtp", None)
                break
            except Refused as e:
                log.error(record("email_send_refused", error=str(e)))
                return None
            except OSError as e:
                log.warning(record("email_smtp_failed", error=smtp_problem(e), persistent=persistent))
                self._health("smtp", smtp_problem(e))
                if isinstance(e, TimedOut):  # it may have taken the mail: once more at most, the same Message-ID
                    resends -= 1
                if not persistent or resends < 0:
                    return None
                await asyncio.sleep(self.timing.pause(failures))
                failures += 1
        if thread is not None:
            thread.answered(msgid)
            self._save_thread(thread_id, thread)
        else:  # a new thread: the person's answer comes back in its session
            started = mail.Thread(to, str(msg["Subject"]), msgid, [msgid])
            self.threads[mail.thread_id(mail.place_of(to, msgid))] = started
            self._save_thread(mail.thread_id(mail.place_of(to, msgid)), started)
        log.info(record("email_sent", place=place.key))
        return msgid

    async def edit(self, place: keys.Place, message_id: str, chunk: Chunk, persistent: bool) -> bool:
        return False

    async def delete(self, place: keys.Place, message_id: str) -> None:
        return None

    async def typing(self, place: keys.Place) -> None:
        return None

    async def download(self, file: FileIn) -> bytes | None:
        uid_text, _, index = file.ref.partition(":")
        if not uid_text.isdigit() or not index.isdigit():
            return None
        uid = int(uid_text)
        data = self.cache.get(uid)
        if data is None:
            imap = None
            failures: tuple[type[BaseException], ...] = (*_imap_errors(), Refused)
            try:
                imap = await Imap.open(self.settings.imap, self.settings.folder, TIMEOUT)
                data = (await imap.fetch([uid])).get(uid)
            except failures as e:
                log.warning(record("email_download_failed", error=type(e).__name__))
                return None
            finally:
                if imap is not None:
                    await imap.close()
        if data is None:
            return None
        return mail.part_bytes(email.message_from_bytes(data, policy=email.policy.default), int(index))

    async def close(self) -> None:
        self.closed = True
        self.wake.set()
        await self._drop()


def _raise_if_cancelled() -> None:
    """Python 3.11's `asyncio.wait_for` (which aioimaplib uses for every command) drops a cancellation that comes as
    the command's answer does; the task still counts it, so it is raised here, before waiting for new mail."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _migrate(state: ChannelState) -> ChannelState:
    """Threads an older version kept under their hash alone (`thread:<hash>`) moved to `thread:<chat>:<hash>`."""
    for key in [k for k in state.cursor if k.startswith("thread:") and ":" not in k.removeprefix("thread:")]:
        value = state.cursor.pop(key)
        info = _thread(value)
        if info is not None:
            state.cursor.setdefault(f"thread:{mail.chat_of(info.to)}:{key.removeprefix('thread:')}", value)
    return state


def _thread(value: str) -> mail.Thread | None:
    try:
        return mail.Thread.from_json(json.loads(value))
    except ValueError:
        return None


async def deliver(settings: EmailConfig, paths: Paths, place: keys.Place, text: str,
                  files: Sequence[Path] = ()) -> None:
    """One mail from a process without a gateway: to `email:<address>` as a new thread, or into a known thread;
    `files` attached to its last part."""
    own = own_address(settings)
    data = state_file(paths, mail.NAME).read()
    threads = {k.removeprefix("thread:"): t for k, v in data.cursor.items()
               if k.startswith("thread:") and (t := _thread(v)) is not None}
    key, thread = mail.find_thread(threads, place) or (mail.thread_id(place), None)
    if thread is None and not mail.starts_thread(place):
        raise DeliveryError(f"No mail thread {place.key} is known here; deliver to email:<address> instead.")
    chunks = fmt.split(text) or (fmt.split("Files: " + ", ".join(path.name for path in files)) if files else [])
    for chunk in chunks:
        to = thread.to if thread else place.chat
        msg = mail.compose(own, to, fmt.new_subject(chunk.plain), chunk.plain, chunk.body, thread)
        if chunk is chunks[-1]:
            _attach(msg, files)
        try:
            await smtp_send(settings, msg, TIMEOUT)
        except Refused as e:
            raise DeliveryError(str(e)) from None
        except OSError as e:
            raise DeliveryError(f"The SMTP server {settings.smtp.host} did not take the mail ({smtp_problem(e)}); "
                                "it is tried again at the next run.") from None
        msgid = str(msg["Message-ID"])
        if thread is not None:
            thread.answered(msgid)
        else:
            thread = mail.Thread(to, str(msg["Subject"]), msgid, [msgid])
            key = mail.thread_id(mail.place_of(to, msgid))
        _keep_thread(paths, key, thread)


def _attach(msg: EmailMessage, files: Sequence[Path]) -> None:
    """Each file as an attachment under its name: an image's type told by its bytes, others' by their name."""
    import mimetypes

    from nanoagent.attachments import outgoing

    for path in files:
        name, data, image = outgoing(path)
        kind = image or mimetypes.guess_type(name)[0] or "application/octet-stream"
        maintype, _, subtype = kind.partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)


def _keep_thread(paths: Paths, key: str, thread: mail.Thread) -> None:
    saved = json.dumps(thread.to_json())

    def change(state: ChannelState) -> None:
        state.cursor[f"thread:{key}"] = saved

    state_file(paths, mail.NAME).update(change)
