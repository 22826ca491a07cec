// Managing chats in nanoagent's web app: titles, rename, delete, search by title and content, and the model a chat
// uses. An ES module of its own (no build step); app.js tells it when it drew the sessions list
// ("nanoagent:sessions") and a conversation ("nanoagent:conversation"), and it adds its controls beside them.
// What a person, model or tool wrote (titles, snippets, model names) goes into the page as text, never as markup.

let csrfToken = null;
const current = { key: "", heading: null };  // the conversation on the page, so a new title reaches its heading
const loaders = new WeakMap();  // a conversation's controls -> what reads its model choices again

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

async function api(path, method, json) {
  const headers = {};
  if (method && method !== "GET") {
    if (csrfToken === null) {
      const session = await fetch("/api/session", { credentials: "same-origin" });
      csrfToken = session.ok ? ((await session.json()).csrf || "") : "";
    }
    headers["X-CSRF-Token"] = csrfToken;
  }
  const options = { method: method || "GET", credentials: "same-origin", headers };
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(json);
  }
  const response = await fetch(path, options);
  let data = {};
  try { data = await response.json(); } catch (e) { data = {}; }
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

const sessionPath = (key) => `/api/sessions/${encodeURIComponent(key)}`;
const alertBox = (text) => el("p", { class: "alert", role: "alert", text });

// --- search, above the sessions list ---------------------------------------------------------------------------

function searchBox(list) {
  const query = el("input", { type: "search", id: "chat-search", "aria-label": "Search chats",
    placeholder: "Search chats", autocomplete: "off" });
  const results = el("ul", { class: "chat-results", id: "chat-results", "aria-label": "Chats found",
    "aria-live": "polite" });
  const form = el("form", { class: "row chat-search", role: "search" }, query,
    el("button", { type: "submit" }, "Search"));
  let asked = 0;
  let timer = 0;

  async function search() {
    const text = query.value.trim();
    const mine = ++asked;
    if (!text) { results.replaceChildren(); return; }
    let data;
    try { data = await api(`/api/chats/search?q=${encodeURIComponent(text)}`); }
    catch (e) { if (mine === asked) results.replaceChildren(el("li", {}, alertBox(e.message))); return; }
    if (mine !== asked) return;  // a later search answers instead
    results.replaceChildren(...(data.results.length ? data.results.map((r) => el("li", { "data-key": r.key },
      el("a", { href: `#/chat/${encodeURIComponent(r.key)}` },
        el("div", { class: "title", text: r.title }),
        el("div", { class: "small muted" }, el("span", { class: "badge", text: r.channel }),
          r.where === "title" ? "title" : `${r.where === "assistant" ? "reply" : "message"}`),
        r.snippet ? el("div", { class: "small snippet", text: r.snippet }) : null)))
      : [el("li", { class: "muted", text: "No chat matches." })]));
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); clearTimeout(timer); search(); });
  query.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(search, 300); });
  query.addEventListener("keydown", (event) => {
    if (event.key === "Escape") { query.value = ""; search(); }
  });
  const details = list.closest("details");
  (details || list).before(form, results);
}

document.addEventListener("nanoagent:sessions", (event) => {
  const { list, sessions } = event.detail;
  const side = list.closest("section") || list.parentElement;
  if (side && !side.querySelector("#chat-search")) searchBox(list);
  const shown = sessions.find((s) => s.key === current.key);
  if (shown && shown.title && current.heading && current.heading.isConnected) current.heading.textContent = shown.title;
});

// --- rename, delete and the model picker, under the conversation's heading -------------------------------------

function renameForm(key, heading, tools) {
  const input = el("input", { id: "rename-title", "aria-label": "Chat title", maxlength: "80",
    value: heading.textContent });
  const error = el("div", {});
  const form = el("form", { class: "row rename" }, input,
    el("button", { type: "submit", class: "primary", id: "rename-save" }, "Save"),
    el("button", { type: "button", onclick: () => close() }, "Cancel"), error);
  function close() { form.remove(); heading.classList.remove("hidden"); tools.classList.remove("hidden"); }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const made = await api(`${sessionPath(key)}/title`, "PUT", { title: input.value });
      heading.textContent = made.title;
      close();
    } catch (e) { error.replaceChildren(alertBox(e.message)); }
  });
  input.addEventListener("keydown", (event) => { if (event.key === "Escape") close(); });
  heading.classList.add("hidden");
  tools.classList.add("hidden");
  heading.after(form);
  input.focus();
  input.select();
}

function confirmDelete(key, note) {
  const yes = el("button", { type: "button", class: "danger", id: "delete-confirm" }, "Delete chat");
  const no = el("button", { type: "button" }, "Keep it");
  note.replaceChildren(el("div", { class: "card confirm", role: "group", "aria-label": "Delete this chat?" },
    el("p", { text: "Delete this chat? What was archived to memory stays, and what it cost stays counted in usage." }),
    el("div", { class: "row" }, yes, no)));
  no.addEventListener("click", () => note.replaceChildren());
  yes.addEventListener("click", async () => {
    try {
      await api(sessionPath(key), "DELETE");
      location.hash = "#/chat";
    } catch (e) { note.replaceChildren(alertBox(e.message)); }
  });
  no.focus();
}

function modelPicker(key, modelLine, note) {
  const input = el("input", { id: "model-pick", list: "model-choices", "aria-label": "Model for this chat",
    autocomplete: "off", spellcheck: "false" });
  const choices = el("datalist", { id: "model-choices" });
  const form = el("form", { class: "row model-picker" }, el("label", { for: "model-pick", class: "small" }, "Model"),
    input, choices, el("button", { type: "submit", id: "model-switch" }, "Switch"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const made = await api(`${sessionPath(key)}/model`, "PUT", { model: input.value.trim() });
      input.value = made.model;
      if (modelLine) modelLine.textContent = `model ${made.model}`;
      note.replaceChildren(el("p", { class: "ok", role: "status", text: made.message.split("\n")[0] }));
    } catch (e) { note.replaceChildren(alertBox(e.message)); }
  });
  async function load() {
    try {
      const data = await api(`${sessionPath(key)}/model`);
      choices.replaceChildren(...data.choices.map((name) => el("option", { value: name })));
      if (document.activeElement !== input) input.value = data.model;
    } catch (e) { note.replaceChildren(alertBox(e.message)); }
  }
  return { form, load };
}

document.addEventListener("nanoagent:conversation", (event) => {
  const { key, view, heading, model, data } = event.detail;
  current.key = key;
  current.heading = heading;
  if (!heading.classList.contains("hidden")) heading.textContent = data.title || key;
  let tools = view.querySelector(".chat-tools");
  if (!tools) {
    const note = el("div", { class: "chat-note" });
    const picker = modelPicker(key, model, note);
    const rename = el("button", { type: "button", id: "rename" }, "Rename");
    const remove = el("button", { type: "button", id: "delete", class: "danger" }, "Delete");
    rename.addEventListener("click", () => { note.replaceChildren(); renameForm(key, heading, tools); });
    remove.addEventListener("click", () => confirmDelete(key, note));
    tools = el("div", { class: "row chat-tools" }, rename, remove, picker.form);
    loaders.set(tools, picker.load);
    heading.after(tools, note);
  }
  const saved = data.messages.length > 0 && !data.incognito;  // a temporary or empty chat has nothing to rename
  for (const button of tools.querySelectorAll("#rename, #delete")) button.classList.toggle("hidden", !saved);
  loaders.get(tools)();
});
