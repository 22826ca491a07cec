// The chat page: the sessions list, one conversation following its live stream, and the composer (text, images by
// picker, paste or drop, a voice note). A new chat has no key on the server until its first message: the page makes
// one, and the address becomes #/chat/<key> when the message is sent.
//
// Hooks for other modules (chats.js, devices.js), also on window.nanoagent:
//   openSession(key)      show a session ("" or no key: a new chat with an empty composer)
//   addMessage(view)      add a message view ({role: "user", text} / {role: "assistant", parts, text}) to the log
//   refreshSessions()     read the sessions list again
//   sessionRow            a function (session row from /api/sessions, current key) -> <li>: replace it to draw rows
//   document events       "nanoagent:chat-opened" {key, fresh}, "nanoagent:sessions" {sessions, current},
//                         "nanoagent:conversation" {key, fresh, data, head}: the conversation on the page was read
//                         (data is what /api/sessions/{key} gave; head its `.conv-head`), as it opened and after turns
// The conversation's head (`.conv-head`: its h1, `.model`) and the side (`#sidebar`: the buttons, `.sessions`) are
// where a title, rename, search or model picker go; a session row's `title` and a conversation's `title` are shown
// when /api/sessions and /api/sessions/{key} give them.
import { alertBox, api, closeStream, diffLines, el, rendered, state, stream, when } from "./util.js";

const NEAR_END = 48;  // px from the bottom within which the view counts as following the stream
const hooks = { sessionRow: defaultRow };
let current = null;  // the open conversation's controller: {key, add(view)}

const ICONS = {  // 24-unit outline paths: drawn as SVG, so no icon font or emoji font is needed
  image: "M4 5h16v14H4z M4 16l5-5 4 4 3-3 4 4 M15.5 9.5a1.5 1.5 0 1 0 0-.01",
  mic: "M9 5a3 3 0 0 1 6 0v6a3 3 0 0 1-6 0z M6 11a6 6 0 0 0 12 0 M12 17v4 M9 21h6",
};

function icon(path) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("class", "icon");
  svg.setAttribute("aria-hidden", "true");
  const line = document.createElementNS(ns, "path");
  line.setAttribute("d", path);
  svg.append(line);
  return svg;
}

function newKey(prefix) {
  const bytes = new Uint8Array(4);
  crypto.getRandomValues(bytes);
  return `web:${prefix}${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

export function openSession(key) {
  const target = key ? `#/chat/${encodeURIComponent(key)}` : "#/chat";
  if (location.hash !== target) location.hash = target;  // the router draws it
  else chatPage(document.querySelector("#main .page") || document.getElementById("main"), key || "");
}

export function addMessage(view) { if (current) current.add(view); }

export function refreshSessions() {
  const list = document.querySelector(".sessions");
  if (list) loadSessions(list, current ? current.key : "");
}

export async function chatPage(root, key) {
  const list = el("ul", { class: "sessions", "aria-label": "Sessions" });
  const narrow = window.matchMedia("(max-width: 720px)").matches;
  const side = el("aside", { class: "side", id: "sidebar", "aria-label": "Sessions" },
    el("div", { class: "row" },
      el("button", { class: "primary", type: "button", id: "new-chat", onclick: () => openSession("") }, "New chat"),
      el("button", { type: "button", id: "incognito", onclick: () => startIncognito() }, "Incognito chat")),
    el("details", { class: "session-list", open: !narrow },
      el("summary", {}, el("h2", { class: "inline", text: "Chats" })), list));
  const view = el("section", { class: "conversation", "aria-label": "Conversation" });
  root.replaceChildren(el("div", { class: "chat" }, side, view));
  loadSessions(list, key);
  await conversation(view, key);
}

function startIncognito() {
  const key = newKey("incognito-");
  state.pendingCommand = { key, text: "/incognito" };
  openSession(key);
}

function defaultRow(s, currentKey) {
  return el("li", { "data-key": s.key },
    el("a", { href: `#/chat/${encodeURIComponent(s.key)}`, "aria-current": s.key === currentKey ? "true" : null },
      el("div", { class: "title", text: s.title || s.key }),
      el("div", { class: "small muted" }, el("span", { class: "badge", text: s.channel }),
        s.incognito ? el("span", { class: "badge", text: "incognito" }) : null, el("span", { class: "key", text: s.key }),
        when(s.last_active)),
      el("div", { class: "small preview", text: s.preview })));
}

async function loadSessions(list, currentKey) {
  let data;
  try { data = await api("/api/sessions"); } catch (e) { list.replaceChildren(el("li", {}, alertBox(e.message))); return; }
  const items = data.sessions.map((s) => hooks.sessionRow(s, currentKey));
  list.replaceChildren(...(items.length ? items : [el("li", { class: "muted", text: "No sessions yet." })]));
  document.dispatchEvent(new CustomEvent("nanoagent:sessions", { detail: { sessions: data.sessions, current: currentKey } }));
}

// --- copying ---------------------------------------------------------------------------------------------------

async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {  // no clipboard API (not a secure context): the old way, through a selection
    const area = el("textarea", { class: "offscreen", "aria-hidden": "true" });
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  const label = button.textContent;
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = label; }, 1200);
}

function copyButton(what, label) {
  const button = el("button", { type: "button", class: "copy", "aria-label": label || "Copy" }, "Copy");
  button.addEventListener("click", () => copyText(typeof what === "function" ? what() : what, button));
  return button;
}

function withCodeCopy(node) {  // a copy button on each code block the renderer made
  for (const pre of node.querySelectorAll("pre")) {
    if (pre.parentElement.classList.contains("code")) continue;
    const box = el("div", { class: "code" });
    pre.replaceWith(box);
    box.append(pre, copyButton(() => pre.textContent, "Copy the code"));
  }
  return node;
}

// --- messages --------------------------------------------------------------------------------------------------

function toolView(t) {
  const summary = el("summary", {}, `${t.ok ? "✓" : "✗"} ${t.name} ${t.args}`);
  const body = t.diff ? diffLines(t.output) : el("pre", { class: "out", text: t.error || t.output || "(no output)" });
  return el("details", { class: "tool" + (t.ok ? "" : " failed") }, summary, body);
}

function messageView(m) {
  if (m.role === "user") {
    const node = el("div", { class: "msg user" }, m.voice ? el("div", { class: "small muted voice-note" },
      icon(ICONS.mic), "Voice note, transcribed") : null, el("div", { class: "text", text: m.text }));
    for (const image of m.images || []) {
      const name = image.path.split("/").pop();
      node.append(el("img", { src: `/api/media/${encodeURIComponent(name)}`, alt: image.name || "attached image" }));
    }
    if (m.text) node.append(el("div", { class: "actions" }, copyButton(m.text, "Copy the message")));
    return node;
  }
  if (m.role === "system") return el("pre", { class: "msg system reply", text: m.text });
  const node = el("div", { class: "msg assistant" });
  for (const part of m.parts || []) {
    node.append(part.kind === "tool" ? toolView(part) : withCodeCopy(rendered(part.html)));
  }
  if (m.text) node.append(el("div", { class: "actions" }, copyButton(m.text, "Copy the reply")));
  return node;
}

// --- the conversation ------------------------------------------------------------------------------------------

async function conversation(view, given) {
  const key = given || newKey("");
  let fresh = !given;  // no message yet: the stream opens and the address changes when the first one is sent
  const log = el("div", { class: "log", id: "log", "aria-live": "polite", tabindex: "0", "aria-label": "Messages" });
  const jump = el("button", { type: "button", class: "jump hidden", id: "jump" }, "↓ Jump to latest");
  const marker = el("p", { class: "banner hidden", id: "incognito-marker", role: "status",
    text: "Incognito: this chat is temporary. Nothing said here is archived, Dreamed or searchable; /new ends it." });
  const status = el("div", { class: "status", role: "status" });
  const questions = el("div", { class: "questions" });
  const text = el("textarea", { id: "message", "aria-label": "Message", rows: "2",
    placeholder: "Message, or /help (Enter sends, Shift-Enter a new line)" });
  const file = el("input", { type: "file", accept: "image/png,image/jpeg,image/gif,image/webp", id: "attach",
    class: "offscreen", multiple: true, "aria-label": "Attach an image" });
  const picker = el("label", { for: "attach", class: "button", id: "attach-button", title: "Attach an image" },
    icon(ICONS.image), "Image");
  const tray = el("div", { class: "tray", id: "attached", "aria-live": "polite" });
  const mic = el("button", { type: "button", id: "voice", class: "hidden", title: "Record a voice note" },
    icon(ICONS.mic), el("span", { text: "Voice" }));
  const send = el("button", { class: "primary", type: "submit", id: "send" }, "Send");
  const stop = el("button", { type: "button", id: "stop", class: "danger", disabled: true }, "Stop");
  const note = el("p", { class: "small muted secure-note hidden", id: "secure-note" });
  const form = el("form", { class: "composer" }, tray, text,
    el("div", { class: "row" }, file, picker, mic, el("span", { class: "grow" }), stop, send), note);
  const heading = el("h1", { text: fresh ? "New chat" : key });
  const model = el("span", { class: "small muted model" });
  const head = el("div", { class: "conv-head" }, heading, model);
  view.replaceChildren(head, marker,
    el("div", { class: "log-wrap" }, log, jump), questions, status, form);
  let images = [];
  let live = null;
  let hellos = 0;
  let follow = true;  // the view keeps to the newest message until the person scrolls up
  const sent = new Set();  // what this tab showed when it sent, so its own MessageAdded is not shown twice
  let tools = {};
  let segments = {};
  const tails = new Map();  // segment node -> its latest tail HTML, drawn once per frame
  let drawing = 0;
  let opened = null;  // resolves when the stream said hello
  let sends = 0;

  const nearEnd = () => log.scrollHeight - log.scrollTop - log.clientHeight <= NEAR_END;
  let lastTop = 0;
  function toEnd() { log.scrollTop = log.scrollHeight; lastTop = log.scrollTop; jump.classList.add("hidden"); }
  function grew() { if (follow) toEnd(); else jump.classList.remove("hidden"); }
  // only a move up is the person's: content that grew before the view caught up is not a reason to stop following
  log.addEventListener("scroll", () => {
    if (nearEnd()) { follow = true; jump.classList.add("hidden"); } else if (log.scrollTop < lastTop) follow = false;
    lastTop = log.scrollTop;
  });
  jump.addEventListener("click", () => { follow = true; toEnd(); text.focus(); });

  function busy(on) { stop.disabled = !on; }
  function add(v) { log.querySelector(".empty")?.remove(); log.append(messageView(v)); live = null; grew(); }

  async function reload(keepLive) {  // keepLive: a reply streaming as the tab opened stays below the stored messages
    const asked = sends;
    let data;
    try {
      data = await api(`/api/sessions/${encodeURIComponent(key)}`);
    } catch (e) { log.replaceChildren(alertBox(e.message)); return; }
    model.textContent = `model ${data.model}`;
    if (asked !== sends) return;  // a message was sent meanwhile: this read is older than the page (the turn's end reads again)
    heading.textContent = data.title || (fresh ? "New chat" : key);  // a chat's title where the gateway gives one
    marker.classList.toggle("hidden", !data.incognito);
    busy(data.busy);
    const kept = keepLive && live ? [live] : [];
    if (!kept.length) {
      live = null;
      tools = {};
      segments = {};
      tails.clear();
    }
    log.replaceChildren(...data.messages.map(messageView), ...kept);
    grew();
    if (!view.isConnected) return;  // another page or chat replaced it while this read was on its way
    document.dispatchEvent(new CustomEvent("nanoagent:conversation", { detail: { key, fresh, data, head } }));
  }

  function liveNode() {
    if (!live) {
      live = el("div", { class: "msg assistant live", "data-live": "1" });
      log.append(live);
      segments = {};
    }
    return live;
  }

  function segment(md) {  // the node of one stretch of streamed text, made when its first words come
    const reply = liveNode();
    let node = segments[md.seg];
    if (!node) {
      node = segments[md.seg] = el("div", { class: "md", "data-seg": String(md.seg) },
        el("div", { class: "done" }), el("div", { class: "tail" }));
      reply.append(node);
    }
    return node;
  }

  function draw() {
    drawing = 0;
    for (const [node, html] of tails) node.lastChild.innerHTML = html;  // the renderer's HTML (raw HTML off)
    tails.clear();
    grew();
  }

  function streamed(e) {
    if (!e.md) {  // no render came with it: plain text
      const node = liveNode();
      let plain = node.lastChild;
      if (!plain || !plain.classList.contains("plain")) { plain = el("div", { class: "plain" }); node.append(plain); }
      plain.append(e.text);
      grew();
      return;
    }
    const node = segment(e.md);
    if (e.md.done.length) {  // finished blocks: added once, never drawn again
      const done = rendered(e.md.done.join(""), "done-part");
      node.firstChild.append(withCodeCopy(done));
      node.lastChild.replaceChildren();
    }
    if (e.md.tail === null) return;  // a long block the gateway renders a few times a second: the last one stands
    tails.set(node, e.md.tail);
    if (!drawing) drawing = requestAnimationFrame(draw);
  }

  function onEvent(e) {
    if (e.agent) return;  // a sub-agent's own steps stay in its session
    if (e.md && e.kind !== "TextDelta") streamed({ md: e.md });  // a long block's last render, as its text ends
    switch (e.kind) {
      case "TurnStarted": busy(true); status.textContent = "Thinking…"; break;
      case "TextDelta": streamed(e); status.textContent = "Writing…"; break;
      case "ToolStarted": {
        const line = el("details", { class: "tool" }, el("summary", {}, `… ${e.name}`), el("pre", { class: "out", text: "running" }));
        tools[e.call_id] = line;
        liveNode().append(line);
        status.textContent = `Running ${e.name}…`;
        grew();
        break;
      }
      case "ToolFinished": {
        const line = tools[e.call_id];
        if (!line) break;
        line.querySelector("summary").textContent = `${e.error ? "✗" : "✓"} ${e.name} (${e.elapsed.toFixed(1)} s)`;
        line.querySelector("pre").textContent = e.error || "done: its output shows when the reply ends";
        break;
      }
      case "MessageAdded":  // the person's message, also when another tab or device sent it
        if (e.view && e.view.role === "user" && !sent.delete(e.view.text)) add(e.view);
        break;
      case "Progress": status.textContent = e.text; break;
      case "Notice": add({ role: "system", text: e.text }); break;
      case "Retrying": status.textContent = `Retrying: ${e.reason}`; break;
      case "TurnEnded":
        busy(false);
        status.textContent = e.reason === "cancelled" ? "Stopped." : e.error ? `Failed: ${e.error}` : "";
        reload();
        break;
      default: break;
    }
  }

  function askView(q) {
    if (questions.querySelector(`[data-id="${CSS.escape(q.id)}"]`)) return;
    const answer = (value) => api(`/api/sessions/${encodeURIComponent(key)}/answer`,
      { method: "POST", json: { id: q.id, answer: value } }).catch((e) => card.append(alertBox(e.message)));
    const card = el("div", { class: "ask", role: "alertdialog", "aria-label": "Approval", "data-id": q.id },
      el("p", {}, el("strong", { text: "Approve this command?" })), el("pre", { text: q.question.replace(/\n\[y\]es .*$/s, "") }),
      el("div", { class: "row" },
        el("button", { type: "button", class: "primary", onclick: () => answer("yes") }, "Approve"),
        el("button", { type: "button", onclick: () => answer("always") }, "Always this session"),
        el("button", { type: "button", onclick: () => answer("no") }, "Decline")));
    questions.append(card);
    card.querySelector("button").focus();
  }

  function listen() {
    let said;
    opened = new Promise((resolve) => { said = resolve; });
    stream(key, (m) => {
      if (m.type === "event") onEvent(m.event);
      else if (m.type === "hello") {  // after a dropped stream reconnects: catch up with what was missed
        busy(m.busy);
        if (hellos++ > 0) reload();
        else if (m.live) streamed({ md: m.live });  // a reply streaming as this tab opened
        said();
      }
      else if (m.type === "joined" && !sent.has(m.text)) {  // another tab's message joined the running turn
        add({ role: "user", text: m.text });
        sent.add(m.text);  // its MessageAdded, when the turn takes it in, is not shown twice
      }
      else if (m.type === "sessions") refreshSessions();  // a new chat somewhere
      else if (m.type === "ask") askView(m);
      else if (m.type === "answered") questions.querySelector(`[data-id="${CSS.escape(m.id)}"]`)?.remove();
      else if (m.type === "result" && m.command) {
        reload().then(() => add({ role: "system", text: m.text }));
        refreshSessions();
      } else if (m.type === "result") refreshSessions();
      else if (m.type === "error") { log.append(alertBox(m.message)); busy(false); grew(); }
    });
  }

  function hello() {  // the stream's first word, or after a while without it (a send still goes; a reload catches up)
    return Promise.race([opened, new Promise((resolve) => setTimeout(resolve, 5000))]);
  }

  async function begin() {  // a new chat becomes a session: its address, its stream
    if (!fresh) return;
    fresh = false;
    history.replaceState(null, "", `#/chat/${encodeURIComponent(key)}`);
    heading.textContent = key;
    listen();
    await hello();
    document.dispatchEvent(new CustomEvent("nanoagent:chat-opened", { detail: { key, fresh: false } }));
  }

  // --- images ---------------------------------------------------------------------------------------------------

  function showTray() {
    tray.replaceChildren(...images.map((image, i) => el("span", { class: "chip" },
      image.preview ? el("img", { src: image.preview, alt: "" }) : null, el("span", { class: "small", text: image.label }),
      el("button", { type: "button", class: "remove", "aria-label": `Remove ${image.label}`,
        onclick: () => { URL.revokeObjectURL(image.preview); images.splice(i, 1); showTray(); } }, "×"))));
  }

  async function attach(chosen) {
    for (const blob of chosen) {
      if (!/^image\/(png|jpeg|gif|webp)$/.test(blob.type)) {
        view.insertBefore(alertBox(`${blob.name || "That file"} is not a PNG, JPEG, GIF or WebP image.`), form);
        continue;
      }
      const label = blob.name || "pasted image";
      const waiting = { label: `${label} (uploading…)`, preview: URL.createObjectURL(blob) };
      images.push(waiting);
      showTray();
      try {
        const data = await api("/api/uploads", { method: "POST", body: blob,
          headers: { "Content-Type": blob.type, "X-File-Name": label.replace(/[^\x20-\x7e]/g, "_") } });
        Object.assign(waiting, { label, attachment: data.attachment });
      } catch (e) {
        images.splice(images.indexOf(waiting), 1);
        view.insertBefore(alertBox(e.message), form);
      }
      showTray();
    }
  }

  file.addEventListener("change", () => { attach(Array.from(file.files)); file.value = ""; });
  text.addEventListener("paste", (event) => {
    const pasted = Array.from(event.clipboardData?.files || []).filter((f) => f.type.startsWith("image/"));
    if (pasted.length) { event.preventDefault(); attach(pasted); }
  });
  view.addEventListener("dragover", (event) => {
    if (Array.from(event.dataTransfer?.types || []).includes("Files")) { event.preventDefault(); view.classList.add("dropping"); }
  });
  view.addEventListener("dragleave", (event) => { if (event.target === view) view.classList.remove("dropping"); });
  view.addEventListener("drop", (event) => {
    view.classList.remove("dropping");
    if (!event.dataTransfer?.files?.length) return;
    event.preventDefault();
    attach(Array.from(event.dataTransfer.files));
  });

  // --- voice ----------------------------------------------------------------------------------------------------

  let recorder = null;
  async function voice() {
    if (recorder) { recorder.stop(); return; }
    let media;
    try { media = await navigator.mediaDevices.getUserMedia({ audio: true }); } catch (e) {
      status.textContent = `No microphone: ${e.message}`;
      return;
    }
    const chunks = [];
    recorder = new MediaRecorder(media);
    recorder.addEventListener("dataavailable", (event) => chunks.push(event.data));
    recorder.addEventListener("stop", async () => {
      media.getTracks().forEach((track) => track.stop());
      const type = recorder.mimeType || "audio/webm";
      recorder = null;
      mic.lastChild.textContent = "Voice";
      mic.classList.remove("recording");
      status.textContent = "Transcribing the voice note…";
      await begin();
      try {
        const made = await api(`/api/sessions/${encodeURIComponent(key)}/voice`, { method: "POST",
          body: new Blob(chunks, { type }), headers: { "Content-Type": type.split(";")[0] } });
        status.textContent = made.note || "";
      } catch (e) { status.textContent = ""; log.append(alertBox(e.message)); grew(); }
    });
    recorder.start();
    mic.lastChild.textContent = "Stop and send";
    mic.classList.add("recording");
    status.textContent = "Recording… press again to send.";
  }
  mic.addEventListener("click", voice);

  async function features() {
    let offered = { voice: false };
    try { offered = await api("/api/chat/features"); } catch (e) { /* no microphone then */ }
    const secure = window.isSecureContext;
    const canRecord = secure && navigator.mediaDevices && window.MediaRecorder;
    mic.classList.toggle("hidden", !(offered.voice && canRecord));
    if (!secure) {
      note.textContent = "This page is not on a secure connection (HTTPS or localhost): voice notes, copying by the " +
        "clipboard and installing the app to a home screen need one.";
      note.classList.remove("hidden");
    }
  }

  // --- sending --------------------------------------------------------------------------------------------------

  async function submit(message) {
    sends += 1;
    const ready = images.filter((image) => image.attachment);
    const body = { text: message };
    if (ready.length) body.attachments = ready.map((image) => image.attachment);
    if (!message.startsWith("/")) {
      add({ role: "user", text: message || "(image)", images: ready.map((image) => image.attachment) });
      sent.add(message);
    }
    follow = true;
    toEnd();
    await begin();
    try {
      await api(`/api/sessions/${encodeURIComponent(key)}/messages`, { method: "POST", json: body });
      for (const image of ready) URL.revokeObjectURL(image.preview);
      images = images.filter((image) => !ready.includes(image));
      showTray();
    } catch (e) { log.append(alertBox(e.message)); grew(); }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const message = text.value.trim();
    if (!message && !images.some((image) => image.attachment)) return;
    text.value = "";
    submit(message);
  });
  text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); form.requestSubmit(); }
    if (event.key === "Escape" && !stop.disabled) { event.preventDefault(); stop.click(); }  // as at the terminal
  });
  stop.addEventListener("click", () => api(`/api/sessions/${encodeURIComponent(key)}/stop`, { method: "POST", json: {} })
    .catch((e) => { log.append(alertBox(e.message)); grew(); }));

  current = { get key() { return key; }, add };
  features();
  if (!fresh) listen();
  await reload(true);  // a new chat's too: the model it will talk to
  if (fresh && !log.querySelector(".msg")) {
    log.append(el("p", { class: "muted empty", text: "A new chat: say something to start it." }));
  }
  toEnd();
  document.dispatchEvent(new CustomEvent("nanoagent:chat-opened", { detail: { key, fresh } }));
  if (state.pendingCommand && state.pendingCommand.key === key) {
    const pending = state.pendingCommand.text;
    state.pendingCommand = null;
    await hello();  // its reply comes on the stream
    await submit(pending);
  }
  text.focus();
}

window.nanoagent = Object.assign(window.nanoagent || {}, { openSession, addMessage, refreshSessions, hooks, closeStream });
export { hooks };
