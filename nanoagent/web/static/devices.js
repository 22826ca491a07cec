// The devices page (#/devices): the browsers signed in to this gateway, each with a button that signs it out (its
// open pages stop updating at once), and "Pair a device": a one-time sign-in link as a QR code for a phone to scan.
// An ES module of its own, registered with app.js's router through `window.nanoagentPages` (app.js routes once every
// module of the page has run) and using util.js's helpers. Everything shown is put in the page as text; the QR code
// is an SVG drawn here from the gateway's matrix.
import { alertBox, api, el, when } from "./util.js";

const SVG = "http://www.w3.org/2000/svg";
const QUIET = 4;  // modules of light border around the code, as the QR standard asks

// rows of "1" (dark) and "0" as an SVG: one path, a unit square per dark module, on a light square with its border
export function qrSvg(rows, label) {
  const size = rows.length + 2 * QUIET;
  const svg = document.createElementNS(SVG, "svg");
  for (const [name, value] of [["viewBox", `0 0 ${size} ${size}`], ["width", "264"], ["height", "264"],
    ["role", "img"], ["aria-label", label], ["shape-rendering", "crispEdges"], ["id", "pair-qr"]]) {
    svg.setAttribute(name, value);
  }
  const light = document.createElementNS(SVG, "rect");
  for (const [name, value] of [["width", size], ["height", size], ["fill", "#ffffff"]]) light.setAttribute(name, value);
  const dark = [];
  rows.forEach((row, y) => {
    for (let x = 0; x < row.length; x += 1) {
      if (row[x] === "1") dark.push(`M${x + QUIET} ${y + QUIET}h1v1h-1z`);
    }
  });
  const path = document.createElementNS(SVG, "path");
  path.setAttribute("d", dark.join(""));
  path.setAttribute("fill", "#000000");
  svg.append(light, path);
  return svg;
}

async function pair(box, button) {
  button.disabled = true;
  let data;
  try { data = await api("/api/pair", { method: "POST" }); } catch (e) { box.replaceChildren(alertBox(e.message)); button.disabled = false; return; }
  button.disabled = false;
  box.replaceChildren(el("div", { class: "card", id: "pair" },
    el("h2", { text: "Scan this with the other device's camera" }),
    data.qr ? qrSvg(data.qr, "A QR code of the sign-in link") : null,
    el("p", { class: "small" }, "Or open this link on it (good once, for one minute): ",
      el("code", { id: "pair-link", text: data.url })),
    data.note ? el("p", { class: data.reachable ? "muted small" : "banner", id: "pair-note", text: data.note }) : null));
}

async function devicesPage(root) {
  const list = el("div", {});
  const pairBox = el("div", {});
  const pairButton = el("button", { class: "primary", type: "button", id: "pair-device", text: "Pair a device" });
  pairButton.addEventListener("click", () => pair(pairBox, pairButton));
  root.replaceChildren(el("div", { class: "row" }, el("h1", { class: "grow", text: "Devices" }), pairButton), pairBox, list);
  await load(list);
}

async function load(list) {
  let data;
  try { data = await api("/api/devices"); } catch (e) { list.replaceChildren(alertBox(e.message)); return; }
  const items = data.devices.map((d) => {
    const out = el("button", { type: "button", class: "danger", "data-device": d.id,
      text: d.current ? "Sign out here" : "Sign out" });
    out.addEventListener("click", async () => {
      out.disabled = true;
      try { await api(`/api/devices/${encodeURIComponent(d.id)}`, { method: "DELETE" }); } catch (e) { list.prepend(alertBox(e.message)); out.disabled = false; return; }
      if (d.current) { location.reload(); return; }
      await load(list);
    });
    return el("li", { class: "card device", "data-device": d.id },
      el("div", { class: "row" }, el("strong", { class: "grow", text: d.name }),
        d.current ? el("span", { class: "badge", text: "this device" }) : null, out),
      el("div", { class: "small muted", text: `${d.id} · last used ${when(d.last_used)} · signed in ${when(d.created)}` +
        (d.host ? ` at ${d.host}` : "") }));
  });
  list.replaceChildren(
    el("p", { class: "small muted" }, `A device unused for ${data.idle_days} days is signed out by itself. `,
      el("code", { text: "nanoagent web devices" }), " and ", el("code", { text: "nanoagent web revoke ID" }),
      " do the same from the terminal."),
    items.length ? el("ul", { class: "plain", id: "devices" }, ...items) : el("p", { class: "muted", text: "No device is signed in." }));
}

window.nanoagentPages = Object.assign(window.nanoagentPages || {}, { devices: devicesPage });
