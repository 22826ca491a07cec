"""The page as the model reads it: its text in reading order, each element it can act on numbered.

Run in the page: marks each such element `data-nanoagent-<key>="N"` (the numbers of the last snapshot are the ones
`click`, `type` and `select` take) and returns lines such as `[3] button "Sign in"`, headings as `#`s, text between.
The key is random per browser, so a page cannot guess the attribute and put a number on an element of its choosing.
"""

from __future__ import annotations

import secrets

REF_ATTRIBUTE = f"data-nanoagent-{secrets.token_hex(6)}"

SNAPSHOT_JS = r"""
([limit, ATTR]) => {
  document.querySelectorAll('[' + ATTR + ']').forEach(e => e.removeAttribute(ATTR));
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'svg', 'SVG']);
  const ROLES = new Set(['button', 'link', 'checkbox', 'radio', 'tab', 'menuitem', 'option', 'switch', 'textbox',
    'combobox', 'searchbox', 'slider', 'spinbutton', 'menuitemcheckbox', 'menuitemradio', 'treeitem']);
  const lines = [];
  let count = 0, text = '', size = 0, cut = false;
  const push = (line) => {
    if (cut) return;
    if (size + line.length > limit) { cut = true; return; }
    lines.push(line); size += line.length + 1;
  };
  const flush = () => { const t = text.replace(/\s+/g, ' ').trim(); if (t) push(t); text = ''; };
  const clip = (s, n) => { s = (s || '').replace(/\s+/g, ' ').trim(); return s.length > n ? s.slice(0, n - 1) + '…' : s; };
  const roleOf = (el) => {
    const explicit = (el.getAttribute('role') || '').split(' ')[0];
    if (ROLES.has(explicit)) return explicit;
    const tag = el.tagName;
    if (tag === 'A' && el.hasAttribute('href')) return 'link';
    if (tag === 'BUTTON' || tag === 'SUMMARY') return 'button';
    if (tag === 'SELECT') return 'combobox';
    if (tag === 'TEXTAREA') return 'textbox';
    if (tag === 'INPUT') {
      const type = (el.type || 'text').toLowerCase();
      if (type === 'hidden') return null;
      if (['button', 'submit', 'reset', 'image'].includes(type)) return 'button';
      if (type === 'checkbox' || type === 'radio') return type;
      if (type === 'range') return 'slider';
      return 'textbox';
    }
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return 'textbox';
    return null;
  };
  const nameOf = (el) => {
    const label = el.getAttribute('aria-label');
    if (label) return label;
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const t = by.split(' ').map(id => document.getElementById(id)).filter(Boolean).map(e => e.innerText).join(' ');
      if (t.trim()) return t;
    }
    if (el.labels && el.labels.length) return Array.from(el.labels).map(l => l.innerText).join(' ');
    if (el.tagName === 'INPUT' && ['button', 'submit', 'reset'].includes((el.type || '').toLowerCase())) {
      return el.value || el.type;
    }
    return el.getAttribute('alt') || el.innerText || el.getAttribute('title') || el.getAttribute('placeholder') ||
      el.getAttribute('name') || '';
  };
  const shown = (el) => {
    const style = getComputedStyle(el);
    if (style.display === 'contents') return true;
    if (style.display === 'none' || style.visibility === 'hidden') return false;
    return el.getClientRects().length > 0;
  };
  const describe = (el, role) => {
    let line = '[' + (++count) + '] ' + role + ' "' + clip(nameOf(el), 80) + '"';
    el.setAttribute(ATTR, String(count));
    const tag = el.tagName;
    if (role === 'link') line += ' -> ' + clip(el.getAttribute('href'), 100);
    if (tag === 'INPUT' || tag === 'TEXTAREA') {
      const type = (el.type || '').toLowerCase();
      if (type === 'checkbox' || type === 'radio') line += el.checked ? ' checked' : ' unchecked';
      else if (type === 'password') line += el.value ? ' (filled)' : '';
      else if (role === 'textbox' || role === 'slider') line += ' value="' + clip(el.value, 80) + '"';
      if (el.placeholder && nameOf(el) !== el.placeholder) line += ' placeholder="' + clip(el.placeholder, 60) + '"';
    }
    if (tag === 'SELECT') {
      const options = Array.from(el.options).map(o => (o.selected ? '*' : '') + clip(o.label || o.text, 40));
      line += ' options: ' + clip(options.join(' | '), 300);
    }
    if (el.disabled) line += ' disabled';
    return line;
  };
  const walk = (node) => {
    for (const child of node.childNodes) {
      if (cut) return;
      if (child.nodeType === 3) { text += ' ' + child.textContent; continue; }
      if (child.nodeType !== 1 || SKIP.has(child.tagName) || !shown(child)) continue;
      const el = child;
      const display = getComputedStyle(el).display;
      const block = !display.startsWith('inline') && display !== 'contents';
      const role = roleOf(el);
      if (role) {
        flush();
        push(describe(el, role));
        continue;
      }
      if (/^H[1-6]$/.test(el.tagName)) {
        flush();
        push('#'.repeat(Number(el.tagName[1])) + ' ' + clip(el.innerText, 200));
        continue;
      }
      if (el.tagName === 'IFRAME') { flush(); push('[frame: ' + clip(el.src, 100) + ' — open it to read it]'); continue; }
      if (block) flush();
      walk(el);
      if (el.shadowRoot) walk(el.shadowRoot);
      if (block) flush();
    }
  };
  if (document.body) walk(document.body);
  flush();
  return {lines, count, cut};
}
"""
