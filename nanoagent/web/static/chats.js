// Managing chats in nanoagent's web app: titles, rename, delete, search by title and content, and the model a chat
// uses. An ES module of its own (no build step) on chat.js's public hooks: it draws the sessions' rows
// (`hooks.sessionRow`: the open chat's row gets Rename and Delete), puts the search box in the sidebar when the list
// is drawn ("nanoagent:sessions"), and puts the model picker in the conversation's head in place of its model line
// when a conversation is read ("nanoagent:conversation"). What a person, model or tool wrote (titles, snippets,
// model names) goes into the page as text, never as markup.
import { alertBox, api, el } from "./util.js";
import { hooks, refreshSessions } from "./chat.js";

const plainRow = hooks.sessionRow;  // chat.js's row: title, channel, key, last activity, preview
const open = { key: "", saved: false, head: null, note: null };  // the conversation on the page
let listed = [];  // the sessions list's rows as /api/sessions last gave them
const sessionPath = (key) => `/api/sessions/${encodeURIComponent(key)}`;
const put = (path, json) => api(path, { method: "PUT", json });
const heading = () => (open.head && open.head.isConnected ? open.head.querySelector("h1") : null);
const note = () => (open.note && open.note.isConnected ? open.note : null);

// --- the sidebar: rows with Rename and Delete, and search above the list -----------------------------------------

hooks.sessionRow = (s, currentKey) => {
  const row = plainRow(s, currentKey);
  if (s.key === currentKey && s.key === open.key && open.saved) {  // a temporary or empty chat has nothing to rename
    row.append(el("div", { class: "row chat-actions" },
      el("button", { type: "button", id: "rename", onclick: () => renameForm(s.key) }, "Rename"),
      el("button", { type: "button", id: "delete", class: "danger", onclick: () => confirmDelete(s.key) }, "Delete")));
  }
  return row;
};

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
  list.before(form, results);  // inside the "Chats" disclosure: on a phone it folds away with the list
}

document.addEventListener("nanoagent:sessions", (event) => {
  listed = event.detail.sessions;
  const list = document.querySelector("#sidebar .sessions");
  if (list && !document.getElementById("chat-search")) searchBox(list);
  const shown = listed.find((s) => s.key === open.key);
  const h1 = heading();
  if (shown && shown.title && h1 && !h1.classList.contains("hidden")) h1.textContent = shown.title;  // a model's title
});

// --- rename and delete: the title is edited where it is shown, the question asked under it -----------------------

function renameForm(key) {
  const h1 = heading();
  if (!h1 || key !== open.key || document.getElementById("rename-title")) return;
  const input = el("input", { id: "rename-title", "aria-label": "Chat title", maxlength: "80", value: h1.textContent });
  const error = el("div", {});
  const form = el("form", { class: "row rename" }, input,
    el("button", { type: "submit", class: "primary", id: "rename-save" }, "Save"),
    el("button", { type: "button", onclick: () => close() }, "Cancel"), error);
  function close() { form.remove(); h1.classList.remove("hidden"); }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const made = await put(`${sessionPath(key)}/title`, { title: input.value });
      h1.textContent = made.title;
      close();
      refreshSessions();
    } catch (e) { error.replaceChildren(alertBox(e.message)); }
  });
  input.addEventListener("keydown", (event) => { if (event.key === "Escape") close(); });
  note()?.replaceChildren();
  h1.classList.add("hidden");
  h1.after(form);
  input.focus();
  input.select();
}

function confirmDelete(key) {
  const box = note();
  if (!box || key !== open.key) return;
  const yes = el("button", { type: "button", class: "danger", id: "delete-confirm" }, "Delete chat");
  const no = el("button", { type: "button" }, "Keep it");
  box.replaceChildren(el("div", { class: "card confirm", role: "group", "aria-label": "Delete this chat?" },
    el("p", { text: "Delete this chat? What was archived to memory stays, and what it cost stays counted in usage." }),
    el("div", { class: "row" }, yes, no)));
  no.addEventListener("click", () => box.replaceChildren());
  yes.addEventListener("click", async () => {
    try {
      await api(sessionPath(key), { method: "DELETE" });
      location.hash = "#/chat";
    } catch (e) { box.replaceChildren(alertBox(e.message)); }
  });
  no.focus();
}

// --- the model picker, in place of the head's model line ---------------------------------------------------------

function modelPicker(key, line, box) {
  const input = el("input", { id: "model-pick", list: "model-choices", "aria-label": "Model for this chat",
    autocomplete: "off", spellcheck: "false" });
  const choices = el("datalist", { id: "model-choices" });
  const form = el("form", { class: "row model-picker" }, el("label", { for: "model-pick", class: "small" }, "Model"),
    input, choices, el("button", { type: "submit", id: "model-switch" }, "Switch"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const made = await put(`${sessionPath(key)}/model`, { model: input.value.trim() });
      input.value = made.model;
      line.textContent = `model ${made.model}`;
      box.replaceChildren(el("p", { class: "ok", role: "status", text: made.message.split("\n")[0] }));
    } catch (e) { box.replaceChildren(alertBox(e.message)); }
  });
  async function load() {
    try {
      const data = await api(`${sessionPath(key)}/model`);
      choices.replaceChildren(...data.choices.map((name) => el("option", { value: name })));
      if (document.activeElement !== input) input.value = data.model;
    } catch (e) { box.replaceChildren(alertBox(e.message)); }
  }
  return { form, load };
}

const loaders = new WeakMap();  // a conversation's head -> what reads its model choices again

document.addEventListener("nanoagent:conversation", (event) => {
  const { key, data, head } = event.detail;
  const saved = data.messages.length > 0 && !data.incognito;
  const changed = key !== open.key || saved !== open.saved;
  if (!loaders.has(head)) {
    const line = head.querySelector(".model");
    const box = el("div", { class: "chat-note" });
    const picker = modelPicker(key, line, box);
    line.classList.add("hidden");  // the picker shows the model: one line, not two
    line.after(picker.form);
    head.after(box);
    loaders.set(head, picker.load);
    open.note = box;
  }
  Object.assign(open, { key, saved, head });
  loaders.get(head)();
  if (changed) redrawRow(key);  // the open chat's row gains (or loses) Rename and Delete
});

function redrawRow(key) {
  const row = document.querySelector(`#sidebar .sessions li[data-key="${CSS.escape(key)}"]`);
  const s = listed.find((one) => one.key === key);
  if (row && s) row.replaceWith(hooks.sessionRow(s, key));
}
