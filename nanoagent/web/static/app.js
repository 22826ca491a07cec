// nanoagent's web app: a few pages drawn from the gateway's /api/ routes. Written by hand, no build step, nothing
// loaded from elsewhere. The chat page is chat.js; what the pages share is util.js.
import { alertBox, api, closeStream, diffLines, el, main, money, num, rendered, state, stream, when } from "./util.js";
import { chatPage } from "./chat.js";

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
  document.body.dataset.page = page;  // the chat fills the window (its log scrolls); other pages scroll the window
  for (const link of document.querySelectorAll("nav a")) {
    link.setAttribute("aria-current", link.dataset.page === page ? "page" : "false");
  }
  const name = `${page.charAt(0).toUpperCase()}${page.slice(1)}`;
  document.title = `${name} · nanoagent`;
  document.getElementById("menu-label").textContent = name;
  menu(false);
  // each page draws into a container of its own: a page still loading when another is chosen draws into nothing
  const root = el("div", { class: "page" });
  main().replaceChildren(root);
  if (page === "memory" && rest[0] === "file") return memoryFilePage(root, decodeURIComponent(rest.slice(1).join("/")));
  if (page === "memory") return memoryPage(root);
  if (page === "schedules") return schedulesPage(root);
  if (page === "usage") return usagePage(root);
  if (page === "settings") return settingsPage(root);
  const other = (window.nanoagentPages || {})[page];  // a page another module registers (devices.js)
  if (other) return other(root, arg);
  return chatPage(root, arg);
}

function menu(open) {  // at a phone's width the pages are a menu behind one button, so the header is one row
  document.getElementById("menu").setAttribute("aria-expanded", String(open));
  document.getElementById("pages").classList.toggle("open", open);
}

function fitViewport() {  // the visible height (above an on-screen keyboard): the chat's composer stays in view
  const height = window.visualViewport ? window.visualViewport.height : window.innerHeight;
  document.documentElement.style.setProperty("--app-height", `${Math.round(height)}px`);
  if (document.body.dataset.page === "chat") window.scrollTo(0, 0);  // a browser that scrolled the page for the keyboard
}

document.getElementById("menu").addEventListener("click", (event) =>
  menu(event.currentTarget.getAttribute("aria-expanded") !== "true"));
document.addEventListener("keydown", (event) => { if (event.key === "Escape") menu(false); });
if (window.visualViewport) window.visualViewport.addEventListener("resize", fitViewport);
window.addEventListener("resize", fitViewport);
fitViewport();
window.addEventListener("hashchange", route);
// the first page is drawn once every module script of index.html ran (all of them run before DOMContentLoaded): a
// page another module registers (devices.js) is there even when the address names it
if (document.readyState === "complete") route();
else document.addEventListener("DOMContentLoaded", route, { once: true });
