// What every page of the web app shares: building elements, the /api/ calls, formatting, the live stream of a
// session. Anything a model, tool, skill or web page wrote is put in the page as text (textContent); the only HTML
// inserted is what the gateway's Markdown renderer made (`html` fields), which carries no raw HTML.
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


export { alertBox, api, closeStream, csrf, diffLines, el, main, money, num, rendered, state, stream, when };
