// nanoagent's web app: a few pages drawn from the gateway's /api/ routes. Written by hand, no build step, nothing
// loaded from elsewhere. Anything a model, tool, skill or web page wrote is put in the page as text (textContent);
// the only HTML inserted is what the gateway's Markdown renderer made (`html` fields), which carries no raw HTML.
"use strict";

const state = { csrf: null, stream: null, streamKey: "", page: "" };
const main = () => document.getElementById("main");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function rendered(html, cls) {  // HTML the gateway's Markdown renderer made (raw HTML off, links checked)
  const node = el("div", { class: cls || "md" });
  node.innerHTML = html;
  return node;
}

async function csrf() {
  if (state.csrf === null) {
    const response = await fetch("/api/session", { credentials: "same-origin" });
    state.csrf = response.ok ? ((await response.json()).csrf || "") : "";
  }
  return state.csrf;
}

async function api(path, options) {
  const opts = Object.assign({ method: "GET", credentials: "same-origin", headers: {} }, options || {});
  if (opts.method !== "GET") opts.headers["X-CSRF-Token"] = await csrf();
  if (opts.json !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(opts.json);
  }
  const response = await fetch(path, opts);
  let data = {};
  try { data = await response.json(); } catch (e) { data = {}; }
  if (!response.ok) {
    const error = new Error(data.error || `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

function when(stamp) {
  const date = typeof stamp === "number" ? new Date(stamp * 1000) : new Date(stamp);
  return isNaN(date) ? "" : date.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
}

function money(cost) { return cost === null || cost === undefined ? "—" : "$" + Number(cost).toFixed(4); }
function num(n) { return Number(n || 0).toLocaleString(); }
function alertBox(text) { return el("p", { class: "alert", role: "alert", text }); }

function diffLines(text) {
  const pre = el("pre", { class: "out" });
  for (const line of String(text).split("\n")) {
    const cls = line.startsWith("+") && !line.startsWith("+++") ? "diff-add"
      : line.startsWith("-") && !line.startsWith("---") ? "diff-del" : line.startsWith("@@") ? "diff-hunk" : "";
    pre.append(cls ? el("span", { class: cls, text: line }) : document.createTextNode(line + "\n"));
  }
  return pre;
}

function closeStream() {
  if (state.stream) state.stream.close();
  state.stream = null;
  state.streamKey = "";
}

function stream(key, onMessage) {
  closeStream();
  const source = new EventSource(`/api/sessions/${encodeURIComponent(key)}/events`);
  source.onmessage = (message) => {
    let data;
    try { data = JSON.parse(message.data); } catch (e) { return; }
    onMessage(data);
  };
  state.stream = source;
  state.streamKey = key;
  return source;
}

// --- chat ------------------------------------------------------------------------------------------------------

function newKey(prefix) {
  const bytes = new Uint8Array(4);
  crypto.getRandomValues(bytes);
  return `web:${prefix}${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

async function chatPage(root, key) {
  const list = el("ul", { class: "sessions", "aria-label": "Sessions" });
  const side = el("section", { "aria-label": "Sessions" },
    el("div", { class: "row" },
      el("button", { class: "primary", type: "button", onclick: () => { location.hash = `#/chat/${newKey("")}`; } },
        "New chat"),
      el("button", { type: "button", id: "incognito", onclick: () => startIncognito() }, "Incognito chat")),
    el("details", { class: "session-list", open: !(key && window.matchMedia("(max-width: 720px)").matches) },
      el("summary", {}, el("h2", { class: "inline", text: "Sessions" })), list));
  const view = el("section", { class: "conversation", "aria-label": "Conversation" });
  root.replaceChildren(el("div", { class: "chat" }, side, view));
  loadSessions(list, key);
  if (key) await conversation(view, key);
  else view.append(el("p", { class: "muted", text: "Pick a session, or start a new chat." }));
}

async function startIncognito() {
  const key = newKey("incognito-");
  location.hash = `#/chat/${key}`;
  state.pendingCommand = { key, text: "/incognito" };
}

async function loadSessions(list, current) {
  let data;
  try { data = await api("/api/sessions"); } catch (e) { list.replaceChildren(el("li", {}, alertBox(e.message))); return; }
  const items = data.sessions.map((s) => el("li", { "data-key": s.key },
    el("a", { href: `#/chat/${encodeURIComponent(s.key)}`, "aria-current": s.key === current ? "true" : null },
      el("div", { class: "title", text: s.title || s.key }),
      el("div", { class: "small muted" }, el("span", { class: "badge", text: s.channel }),
        s.incognito ? el("span", { class: "badge", text: "incognito" }) : null, el("span", { class: "key", text: s.key }),
        when(s.last_active)),
      el("div", { class: "small", text: s.preview }))));
  list.replaceChildren(...(items.length ? items : [el("li", { class: "muted", text: "No sessions yet." })]));
  document.dispatchEvent(new CustomEvent("nanoagent:sessions", { detail: { list, sessions: data.sessions, current } }));  // chats.js
}

async function conversation(view, key) {
  const log = el("div", { class: "log", "aria-live": "polite" });
  const marker = el("p", { class: "banner hidden", id: "incognito-marker", role: "status",
    text: "Incognito: this chat is temporary. Nothing said here is archived, Dreamed or searchable; /new ends it." });
  const status = el("div", { class: "status", role: "status" });
  const questions = el("div", { class: "questions" });
  const text = el("textarea", { id: "message", "aria-label": "Message", placeholder: "Message, or /help" });
  const file = el("input", { type: "file", accept: "image/png,image/jpeg,image/gif,image/webp", id: "attach",
    "aria-label": "Attach an image" });
  const attached = el("span", { class: "small muted" });
  const send = el("button", { class: "primary", type: "submit", id: "send" }, "Send");
  const stop = el("button", { type: "button", id: "stop", class: "danger", disabled: true }, "Stop");
  const form = el("form", { class: "composer" }, text,
    el("div", { class: "row" }, el("label", { for: "attach", class: "small" }, "Image"), file, attached,
      el("span", { class: "grow" }), stop, send));
  const heading = el("h1", { text: key });
  const model = el("p", { class: "small muted" });
  view.replaceChildren(heading, model, marker, log, questions, status, form);
  let images = [];
  let live = null;
  let hellos = 0;
  const sent = new Set();  // what this tab showed when it sent, so its own MessageAdded is not shown twice
  let tools = {};

  function busy(on) { stop.disabled = !on; }

  async function reload() {
    let data;
    try {
      data = await api(`/api/sessions/${encodeURIComponent(key)}`);
    } catch (e) { log.replaceChildren(alertBox(e.message)); return; }
    model.textContent = `model ${data.model}`;
    marker.classList.toggle("hidden", !data.incognito);
    busy(data.busy);
    live = null;
    tools = {};
    log.replaceChildren(...data.messages.map(messageView));
    document.dispatchEvent(new CustomEvent("nanoagent:conversation", { detail: { key, view, heading, model, data } }));  // chats.js
  }

  function messageView(m) {
    if (m.role === "user") {
      const node = el("div", { class: "msg user" }, m.text);
      for (const image of m.images || []) {
        const name = image.path.split("/").pop();
        node.append(el("img", { src: `/api/media/${encodeURIComponent(name)}`, alt: image.name || "attached image" }));
      }
      return node;
    }
    const node = el("div", { class: "msg assistant" });
    for (const t of m.tools || []) node.append(toolView(t));
    if (m.html) node.append(rendered(m.html));
    return node;
  }

  function toolView(t) {
    const summary = el("summary", {}, `${t.ok ? "✓" : "✗"} ${t.name} ${t.args}`);
    const body = t.diff ? diffLines(t.output) : el("pre", { class: "out", text: t.error || t.output || "(no output)" });
    return el("details", { class: "tool" + (t.ok ? "" : " failed") }, summary, body);
  }

  function liveNode() {
    if (!live) {
      live = el("div", { class: "msg assistant live", "data-live": "1" });
      log.append(live);
    }
    return live;
  }

  function onEvent(e) {
    if (e.agent) return;  // a sub-agent's own steps stay in its session
    switch (e.kind) {
      case "TurnStarted": busy(true); status.textContent = "Thinking…"; break;
      case "TextDelta": {
        const node = liveNode();
        let textNode = node.lastChild;
        if (!textNode || textNode.nodeType !== Node.TEXT_NODE) { textNode = document.createTextNode(""); node.append(textNode); }
        textNode.data += e.text;
        status.textContent = "Writing…";
        break;
      }
      case "ToolStarted": {
        const line = el("details", { class: "tool" }, el("summary", {}, `… ${e.name}`), el("pre", { class: "out", text: "running" }));
        tools[e.call_id] = line;
        liveNode().append(line);
        status.textContent = `Running ${e.name}…`;
        break;
      }
      case "ToolFinished": {
        const line = tools[e.call_id];
        if (line) line.querySelector("summary").textContent = `${e.error ? "✗" : "✓"} ${e.name} (${e.elapsed.toFixed(1)} s)`;
        break;
      }
      case "MessageAdded":  // the person's message, also when another tab or device sent it
        if (e.view && e.view.role === "user" && !sent.delete(e.view.text)) {
          log.append(messageView(e.view));
          live = null;
        }
        break;
      case "Progress": status.textContent = e.text; break;
      case "Notice": log.append(el("div", { class: "msg system", text: e.text })); break;
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

  stream(key, (m) => {
    if (m.type === "event") onEvent(m.event);
    else if (m.type === "hello") {  // after a dropped stream reconnects: catch up with what was missed
      busy(m.busy);
      if (hellos++ > 0) reload();
    }
    else if (m.type === "joined" && !sent.has(m.text)) {  // another tab's message joined the running turn
      log.append(messageView({ role: "user", text: m.text }));
      sent.add(m.text);  // its MessageAdded, when the turn takes it in, is not shown twice
      live = null;
    }
    else if (m.type === "sessions") loadSessions(document.querySelector(".sessions"), key);  // a new chat elsewhere
    else if (m.type === "ask") askView(m);
    else if (m.type === "answered") questions.querySelector(`[data-id="${CSS.escape(m.id)}"]`)?.remove();
    else if (m.type === "result" && m.command) {
      reload().then(() => log.append(el("pre", { class: "msg system reply", text: m.text })));
      loadSessions(document.querySelector(".sessions"), key);
    } else if (m.type === "result") loadSessions(document.querySelector(".sessions"), key);
    else if (m.type === "error") { log.append(alertBox(m.message)); busy(false); }
  });

  file.addEventListener("change", async () => {
    const chosen = file.files[0];
    if (!chosen) return;
    attached.textContent = "uploading…";
    try {
      const data = await api("/api/uploads", { method: "POST", body: chosen,
        headers: { "Content-Type": chosen.type || "application/octet-stream", "X-File-Name": chosen.name.replace(/[^\x20-\x7e]/g, "_") } });
      images.push(data.attachment);
      attached.textContent = `${images.length} image(s) attached`;
    } catch (e) { attached.textContent = ""; view.insertBefore(alertBox(e.message), form); }
    file.value = "";
  });

  async function submit(message) {
    const body = { text: message };
    if (images.length) body.attachments = images;
    if (!message.startsWith("/")) {
      log.append(el("div", { class: "msg user" }, message || "(image)"));
      sent.add(message);
      live = null;
    }
    try {
      await api(`/api/sessions/${encodeURIComponent(key)}/messages`, { method: "POST", json: body });
      images = [];
      attached.textContent = "";
    } catch (e) { log.append(alertBox(e.message)); }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const message = text.value.trim();
    if (!message && !images.length) return;
    text.value = "";
    submit(message);
  });
  text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); form.requestSubmit(); }
    if (event.key === "Escape" && !stop.disabled) { event.preventDefault(); stop.click(); }  // as at the terminal
  });
  stop.addEventListener("click", () => api(`/api/sessions/${encodeURIComponent(key)}/stop`, { method: "POST", json: {} })
    .catch((e) => log.append(alertBox(e.message))));

  await reload();
  if (state.pendingCommand && state.pendingCommand.key === key) {
    const pending = state.pendingCommand.text;
    state.pendingCommand = null;
    await submit(pending);
  }
  text.focus();
}

// --- memory ----------------------------------------------------------------------------------------------------

async function memoryPage(root) {
  const files = el("div", {});
  const timeline = el("ol", { class: "timeline", "aria-label": "Dream log" });
  const dreamStatus = el("div", { class: "status", role: "status", id: "dream-status" });
  const dreamButton = el("button", { type: "button", class: "primary", id: "dream-now" }, "Dream now");
  const query = el("input", { type: "search", id: "memory-query", "aria-label": "Search memory", placeholder: "Search memory" });
  const hits = el("ul", { id: "hits" });
  const searchForm = el("form", { class: "row", role: "search" }, query, el("button", { type: "submit" }, "Search"));
  root.replaceChildren(el("h1", { text: "Memory" }), el("h2", { text: "Search" }), searchForm, hits,
    el("h2", { text: "Files" }), files,
    el("h2", { text: "Dream log" }), el("div", { class: "row" }, dreamButton, dreamStatus), timeline);

  searchForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const data = await api(`/api/memory/search?q=${encodeURIComponent(query.value)}`);
      hits.replaceChildren(...(data.hits.length ? data.hits.map((h) => el("li", {},
        h.link ? el("a", { href: h.link, text: h.source }) : el("span", { text: h.source }),
        el("div", { class: "small", text: h.snippet }))) : [el("li", { class: "muted", text: "No matches." })]));
    } catch (e) { hits.replaceChildren(el("li", {}, alertBox(e.message))); }
  });

  let data;
  try { data = await api("/api/memory"); } catch (e) { files.replaceChildren(alertBox(e.message)); return; }
  files.replaceChildren(...data.files.map((f) => el("details", { class: "card", open: f.path === "memory/MEMORY.md" },
    el("summary", {}, el("strong", { text: f.path })),
    f.exists ? rendered(f.html) : el("p", { class: "muted", text: "(not written yet)" }))));
  await loadTimeline(timeline);

  dreamButton.addEventListener("click", () => {
    dreamButton.disabled = true;
    dreamStatus.textContent = "Starting Dream…";
    const key = data.dream_session;
    const source = stream(key, (m) => {
      if (m.type === "event" && m.event.kind === "Progress") dreamStatus.textContent = m.event.text;
      else if (m.type === "result" || m.type === "error") {
        dreamStatus.replaceChildren(el("pre", { class: "reply", text: m.text || m.message || "Done." }));
        dreamButton.disabled = false;
        source.close();
        loadTimeline(timeline);
      }
    });
    source.onopen = () => api(`/api/sessions/${encodeURIComponent(key)}/messages`, { method: "POST", json: { text: "/dream" } })
      .catch((e) => { dreamStatus.textContent = e.message; dreamButton.disabled = false; });
  });
}

async function loadTimeline(timeline) {
  let data;
  try { data = await api("/api/dream-log?n=50"); } catch (e) { timeline.replaceChildren(alertBox(e.message)); return; }
  if (!data.commits.length) { timeline.replaceChildren(el("li", { class: "muted", text: "No memory edits yet." })); return; }
  timeline.replaceChildren(...data.commits.map((c) => {
    const diff = el("div", {});
    const note = el("div", {});
    const show = el("button", { type: "button", "aria-expanded": "false" }, "Show diff");
    show.addEventListener("click", async () => {
      if (show.getAttribute("aria-expanded") === "true") { diff.replaceChildren(); show.setAttribute("aria-expanded", "false"); show.textContent = "Show diff"; return; }
      try { diff.replaceChildren(diffLines((await api(`/api/dream-log/${c.sha}`)).diff)); } catch (e) { diff.replaceChildren(alertBox(e.message)); }
      show.setAttribute("aria-expanded", "true");
      show.textContent = "Hide diff";
    });
    const undo = el("button", { type: "button", class: "danger" }, "Undo this edit");
    undo.addEventListener("click", async () => {
      try {
        const made = await api(`/api/dream-log/${c.sha}/restore`, { method: "POST", json: {} });
        note.replaceChildren(el("p", { class: "ok", role: "status", text: made.message }));
        setTimeout(() => loadTimeline(timeline), 1500);
      } catch (e) { note.replaceChildren(alertBox(e.message)); }
    });
    return el("li", { class: "card", "data-sha": c.short },
      el("div", { class: "small muted" }, `${when(c.time)} · ${c.author} · ${c.short}`),
      el("div", { text: c.summary }), el("div", { class: "small", text: c.files.join(", ") }),
      el("div", { class: "row" }, show, c.author === "init" ? null : undo), note, diff);
  }));
}

async function memoryFilePage(root, path) {
  root.replaceChildren(el("p", { class: "muted", text: "Loading…" }));
  try {
    const f = await api(`/api/memory/file?path=${encodeURIComponent(path)}`);
    root.replaceChildren(el("p", {}, el("a", { href: "#/memory" }, "← Memory")), el("h1", { text: f.path }),
      f.exists ? rendered(f.html, "card") : el("p", { class: "muted", text: "(not written yet)" }));
  } catch (e) { root.replaceChildren(alertBox(e.message)); }
}

// --- schedules -------------------------------------------------------------------------------------------------

async function schedulesPage(root) {
  const jobs = el("div", { id: "jobs" });
  const system = el("div", {});
  const error = el("div", { id: "schedule-error" });
  const fields = {
    name: el("input", { id: "job-name" }), message: el("textarea", { id: "job-message", required: true }),
    kind: el("select", { id: "job-kind" }, el("option", { value: "every" }, "every (30m, 2h, 1d)"),
      el("option", { value: "cron" }, "cron (0 9 * * 1-5)"), el("option", { value: "at" }, "at (09:00, in 20 minutes)")),
    when: el("input", { id: "job-when", required: true, placeholder: "30m" }),
    to: el("input", { id: "job-to", value: "cli:direct" }),
  };
  const form = el("form", { class: "card", "aria-label": "Add a job" },
    el("label", { for: "job-name" }, "Name"), fields.name,
    el("label", { for: "job-message" }, "What the agent should do"), fields.message,
    el("label", { for: "job-kind" }, "When"), el("div", { class: "row" }, fields.kind, fields.when),
    el("label", { for: "job-to" }, "Replies go to"), fields.to, error,
    el("div", { class: "row" }, el("button", { type: "submit", class: "primary", id: "job-add" }, "Add job")));
  root.replaceChildren(el("h1", { text: "Schedules" }), jobs, el("h2", { text: "Heartbeat and Dream" }), system,
    el("h2", { text: "Add a job" }), form);

  async function load() {
    let data;
    try { data = await api("/api/schedules"); } catch (e) { jobs.replaceChildren(alertBox(e.message)); return; }
    const act = (path, method) => async () => {
      try { await api(path, { method: method || "POST", json: {} }); } catch (e) { jobs.prepend(alertBox(e.message)); }
      load();
    };
    jobs.replaceChildren(...(data.scheduler ? [] : [el("p", { class: "banner", text: "No scheduler has run lately: jobs run while the gateway's cron is on." })]),
      ...(data.jobs.length ? data.jobs.map((j) => el("div", { class: "card job", "data-id": j.id },
        el("div", {}, el("strong", { text: j.title }), " ", el("span", { class: "badge", text: j.enabled ? "on" : "paused" })),
        el("div", { class: "small", text: `${j.schedule} → ${j.target}` }),
        el("div", { class: "small muted", text: j.next_run ? `next ${when(j.next_run)}` : "no next run" }),
        el("div", { class: "small", text: j.last ? `last ${when(j.last.started)}: ${j.last.status}${j.last.error ? " — " + j.last.error : ""}` : "never ran" }),
        el("div", { class: "row" },
          el("button", { type: "button", onclick: act(`/api/schedules/${j.id}/${j.enabled ? "disable" : "enable"}`) }, j.enabled ? "Disable" : "Enable"),
          el("button", { type: "button", onclick: act(`/api/schedules/${j.id}/run`) }, "Run now"),
          el("button", { type: "button", class: "danger", onclick: act(`/api/schedules/${j.id}`, "DELETE") }, "Remove"))))
        : [el("p", { class: "muted", text: "No scheduled jobs." })]));
    system.replaceChildren(...(data.system.length ? data.system.map((s) => el("div", { class: "card" },
      el("strong", { text: s.name }), s.on ? null : el("span", { class: "badge", text: "off" }),
      el("div", { class: "small", text: s.schedule }),
      el("div", { class: "small muted", text: s.next_run ? `next ${when(s.next_run)}` : "" }),
      el("div", { class: "small", text: s.last ? `last ${when(s.last.started)}: ${s.last.status}` : "never ran" })))
      : [el("p", { class: "muted", text: "No heartbeat or scheduled Dream yet." })]));
  }

  fields.kind.addEventListener("change", () => {
    fields.when.placeholder = { every: "30m", cron: "0 9 * * 1-5", at: "in 20 minutes" }[fields.kind.value];
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.replaceChildren();
    try {
      await api("/api/schedules", { method: "POST", json: { name: fields.name.value, message: fields.message.value,
        kind: fields.kind.value, when: fields.when.value, to: fields.to.value } });
      fields.name.value = ""; fields.message.value = ""; fields.when.value = "";
      error.replaceChildren(el("p", { class: "ok", role: "status", text: "Added." }));
      load();
    } catch (e) { error.replaceChildren(alertBox(e.message)); }
  });
  await load();
}

// --- usage -----------------------------------------------------------------------------------------------------

function chart(days) {
  const ns = "http://www.w3.org/2000/svg";
  const width = 640, height = 220, pad = 28;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "Cost per day");
  const max = Math.max(...days.map((d) => d.cost || 0), 0.000001);
  const step = Math.min((width - pad * 2) / Math.max(days.length, 1), 60);
  days.forEach((d, i) => {
    const h = ((d.cost || 0) / max) * (height - pad * 2);
    const bar = document.createElementNS(ns, "rect");
    bar.setAttribute("class", "bar");
    bar.setAttribute("x", String(pad + i * step + step * 0.1));
    bar.setAttribute("y", String(height - pad - h));
    bar.setAttribute("width", String(Math.max(step * 0.8, 1)));
    bar.setAttribute("height", String(Math.max(h, 0.5)));
    bar.setAttribute("data-cost", String(d.cost || 0));
    bar.setAttribute("data-tokens", String((d.input_tokens || 0) + (d.output_tokens || 0)));
    const title = document.createElementNS(ns, "title");
    title.textContent = `${d.name}: ${money(d.cost)}, ${num(d.input_tokens)} in, ${num(d.output_tokens)} out`;
    bar.append(title);
    svg.append(bar);
    if (days.length <= 14 || i % Math.ceil(days.length / 7) === 0) {
      const label = document.createElementNS(ns, "text");
      label.setAttribute("x", String(pad + i * step + step / 2));
      label.setAttribute("y", String(height - 8));
      label.setAttribute("text-anchor", "middle");
      label.textContent = d.name.slice(5);
      svg.append(label);
    }
  });
  const top = document.createElementNS(ns, "text");
  top.setAttribute("x", "2"); top.setAttribute("y", "12");
  top.textContent = money(max);
  svg.append(top);
  return svg;
}

function totalsTable(title, rows) {
  return el("div", { class: "scroll" }, el("h2", { text: title }), el("table", { class: "data" },
    el("thead", {}, el("tr", {}, el("th", { text: title.replace(/^Per /, "") }), el("th", { class: "num", text: "calls" }),
      el("th", { class: "num", text: "in" }), el("th", { class: "num", text: "out" }),
      el("th", { class: "num hide-narrow", text: "cache read" }), el("th", { class: "num", text: "cost" }))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, el("td", { text: r.name }), el("td", { class: "num", text: num(r.calls) }),
      el("td", { class: "num", text: num(r.input_tokens) }), el("td", { class: "num", text: num(r.output_tokens) }),
      el("td", { class: "num hide-narrow", text: num(r.cache_read_tokens) }),
      el("td", { class: "num", text: money(r.cost) + (r.unpriced ? " + —" : "") }))))));
}

function sourcesTable(ledger) {  // the spend ledger by kind of work and model: `nanoagent usage --by source`
  const rows = ledger.rows.filter((r) => r.calls > 0);
  const t = ledger.total;
  return el("section", { id: "usage-sources", "data-cost": String(t.cost || 0), "data-calls": String(t.calls) },
    el("h2", { text: "Per source (spend ledger)" }),
    el("p", { class: "small muted", text: `${money(t.cost)} over ${num(t.calls)} calls: every call the spend caps count, ` +
      "deleted sessions, transcriptions and embeddings included" + (t.reserved ? `; ${money(t.reserved)} held by calls not settled` : "") }),
    rows.length ? el("div", { class: "scroll" }, el("table", { class: "data" },
      el("thead", {}, el("tr", {}, el("th", { text: "source" }), el("th", { text: "model" }),
        el("th", { class: "num", text: "calls" }), el("th", { class: "num", text: "in" }),
        el("th", { class: "num", text: "out" }), el("th", { class: "num", text: "cost" }))),
      el("tbody", {}, ...rows.map((r) => el("tr", { class: "source", "data-source": r.source, "data-model": r.model },
        el("td", { text: r.source }), el("td", { text: r.model }), el("td", { class: "num", text: num(r.calls) }),
        el("td", { class: "num", text: num(r.input_tokens) }), el("td", { class: "num", text: num(r.output_tokens) }),
        el("td", { class: "num", text: money(r.cost) + (r.unpriced ? " + —" : "") }))))))
      : el("p", { class: "muted", text: "No call in the spend ledger." }));
}

function budgetPanel(budget) {  // the budgets as `nanoagent budget` shows them: spent, cap, reset, forecast
  const rows = Array.isArray(budget.caps) ? budget.caps : [];
  const zone = budget.timezone || "";
  const resets = (at) => at ? `${at.slice(0, 16).replace("T", " ")} (${zone})` : "each run";  // the user's time zone
  const spent = (p) => el("p", { class: "small", "data-period": p.name, "data-spent": String(p.spent) },
    `Spent ${p.name.length > 7 ? "today" : "this month"} (${p.name}): ${money(p.spent)}` + (p.reserved ? ` (+${money(p.reserved)} held)` : ""));
  return el("section", { class: "card", id: "budget", "aria-label": "Budgets" }, el("h2", { text: "Budgets" }),
    rows.length ? el("div", { class: "scroll" }, el("table", { class: "data" },
      el("thead", {}, el("tr", {}, ...["budget", "spent", "cap", "resets", "forecast"].map((h) => el("th", { text: h })))),
      el("tbody", {}, ...rows.map((c) => el("tr", { class: "cap", "data-name": c.name, "data-spent": String(c.spent),
        "data-reserved": String(c.reserved), "data-limit": String(c.limit), "data-resets": c.resets_at || "",
        "data-forecast": c.forecast === null || c.forecast === undefined ? "" : String(c.forecast) },
        el("td", { text: c.name }),
        el("td", { class: "num", text: money(c.spent) + (c.reserved ? ` (+${money(c.reserved)} held)` : "") }),
        el("td", { class: "num", text: money(c.limit) }),
        el("td", { text: resets(c.resets_at) }),
        el("td", { class: "num", text: c.forecast === null || c.forecast === undefined ? "—" : money(c.forecast) }))))))
      : el("p", { class: "muted", text: "No spending cap is set (budget in config.json)." }),
    budget.today ? spent(budget.today) : null, budget.month ? spent(budget.month) : null);
}

async function usagePage(root) {
  const days = el("select", { id: "usage-days", "aria-label": "Period" }, el("option", { value: "" }, "all time"),
    el("option", { value: "7" }, "last 7 days"), el("option", { value: "30" }, "last 30 days"));
  const body = el("div", {});
  root.replaceChildren(el("div", { class: "row" }, el("h1", { class: "grow", text: "Usage" }), days), body);
  async function load() {
    let data;
    try { data = await api(`/api/usage${days.value ? "?days=" + days.value : ""}`); } catch (e) { body.replaceChildren(alertBox(e.message)); return; }
    const t = data.total;
    const totals = el("p", { class: "card", id: "usage-total", "data-cost": String(t.cost || 0), "data-calls": String(t.calls),
      "data-input": String(t.input_tokens), "data-output": String(t.output_tokens) },
      el("strong", { text: money(t.cost) }), ` over ${num(t.calls)} calls · ${num(t.input_tokens)} in · ${num(t.output_tokens)} out`,
      t.unpriced ? el("span", { class: "small muted", text: " (some calls have no known price and are not counted)" }) : null);
    const context = el("div", {}, el("h2", { text: "Context use" }), ...data.context.map((c) => {
      const share = Math.min(100, Math.round((c.used / Math.max(c.window, 1)) * 10) * 10);
      return el("div", { class: "card small" }, el("div", { text: `${c.session} · ${num(c.used)} of ${num(c.window)} tokens` }),
        el("div", { class: "meter" }, el("span", { class: `w${share}` })));
    }));
    const budget = data.budget ? budgetPanel(data.budget) : null;
    body.replaceChildren(totals, el("h2", { text: "Cost per day" }),
      data.by.day.length ? chart(data.by.day) : el("p", { class: "muted", text: "No usage recorded." }),
      totalsTable("Per session", data.by.session), totalsTable("Per model", data.by.model),
      totalsTable("Per channel", data.by.channel), data.ledger ? sourcesTable(data.ledger) : null, context, budget);
  }
  days.addEventListener("change", load);
  await load();
}

// --- settings --------------------------------------------------------------------------------------------------

async function settingsPage(root) {
  let s;
  try { s = await api("/api/settings"); } catch (e) { root.replaceChildren(alertBox(e.message)); return; }
  const list = (items, line) => items.length ? el("ul", {}, ...items.map((i) => el("li", {}, ...line(i)))) : el("p", { class: "muted", text: "None." });
  root.replaceChildren(el("h1", { text: "Settings" }), el("p", { class: "muted small", text: "Read-only here: change them in config.json or with the nanoagent commands. Keys are never shown." }),
    el("h2", { text: "Model" }), el("p", { text: s.model }),
    el("h2", { text: "Workspace and listener" }), el("p", { class: "small", text: `${s.workspace} · http://${s.http.host}:${s.http.port}` }),
    el("h2", { text: "Channels" }), list(s.channels, (c) => [el("strong", { text: c.name }), ": ", c.state]),
    el("h2", { text: "MCP servers" }), list(s.mcp, (m) => [el("strong", { text: m.name }), `: ${m.state}`,
      m.tools.length ? el("ul", {}, ...m.tools.map((t) => el("li", { class: "small" }, el("code", { text: t.name }), " ", t.description))) : null]),
    el("h2", { text: "Skills" }), list(s.skills, (k) => [el("strong", { text: k.name }), " ",
      el("span", { class: "badge", text: k.source }),
      k.source === "builtin" ? null : el("span", { class: "badge", text: `trust: ${k.trust}` }),
      k.available ? null : el("span", { class: "badge", text: "unavailable" }), el("div", { class: "small skill-description", text: k.description })]));
}

// --- routing ---------------------------------------------------------------------------------------------------

async function route() {
  const hash = location.hash || "#/chat";
  const [, page, ...rest] = hash.split("/");
  const arg = decodeURIComponent(rest.join("/"));
  closeStream();
  state.page = page;
  for (const link of document.querySelectorAll("nav a")) {
    link.setAttribute("aria-current", link.dataset.page === page ? "page" : "false");
  }
  document.title = `${page.charAt(0).toUpperCase()}${page.slice(1)} · nanoagent`;
  // each page draws into a container of its own: a page still loading when another is chosen draws into nothing
  const root = el("div", { class: "page" });
  main().replaceChildren(root);
  if (page === "memory" && rest[0] === "file") return memoryFilePage(root, decodeURIComponent(rest.slice(1).join("/")));
  if (page === "memory") return memoryPage(root);
  if (page === "schedules") return schedulesPage(root);
  if (page === "usage") return usagePage(root);
  if (page === "settings") return settingsPage(root);
  const other = (window.nanoagentPages || {})[page];  // a page another script registers (devices.js)
  if (other) return other(root, arg);
  return chatPage(root, arg);
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", route);
