// DOM helpers. Every text that comes from people, models or tools becomes a
// text node (textContent or document.createTextNode): nothing here parses
// HTML, so nothing from a message can become markup or script.

// h builds an element. attrs: "class", "text" (its text content), "on<event>"
// handlers, booleans (true: present, false/null/undefined: absent) and
// plain attributes. Children are nodes or strings (text nodes), nested
// arrays allowed; null, undefined and false are skipped.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') el.className = value;
    else if (name === 'text') el.textContent = String(value);
    else if (name.startsWith('on') && typeof value === 'function') el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

// append adds children (nodes or strings, as in h) to el.
export function append(el, children) {
  for (const c of [children].flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// announce tells screen-reader users something that changed elsewhere on
// the page (a status, an approval), through the page's polite live region.
export function announce(message) {
  const region = document.getElementById('announcer');
  if (!region) return;
  region.textContent = '';
  // A separate task, so that the same message twice is announced twice.
  setTimeout(() => { region.textContent = message; }, 50);
}

const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
const timeOnly = new Intl.DateTimeFormat(undefined, { timeStyle: 'short' });

// formatTime shows a timestamp: the time alone when it is today.
export function formatTime(value) {
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return '';
  const now = new Date();
  return d.toDateString() === now.toDateString() ? timeOnly.format(d) : dateTime.format(d);
}

// timeElement is a <time> with a machine-readable datetime.
export function timeElement(value) {
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return null;
  return h('time', { datetime: d.toISOString(), title: dateTime.format(d) }, formatTime(d));
}

let ids = 0;
// uniqueId returns an id for label/aria wiring.
export function uniqueId(prefix) {
  ids += 1;
  return `${prefix}-${ids}`;
}

// keyedChildren keeps what is drawn in parent: one node per item
// ({key, sig, make}), reused while its key and sig stay the same and made
// again by make() when sig changes; nodes no longer listed leave, and the
// rest are put in order without moving those already in place. A live
// update then leaves the nodes the person is pointing at where they are,
// so a click that began on one is not lost.
const drawn = new WeakMap(); // parent -> Map(key -> {sig, node})
export function keyedChildren(parent, items) {
  const before = drawn.get(parent) || new Map();
  const now = new Map();
  for (const { key, sig, make } of items) {
    const had = before.get(key);
    now.set(key, had && had.sig === sig ? had : { sig, node: make() });
  }
  const keep = new Set([...now.values()].map((d) => d.node));
  for (const child of [...parent.children]) {
    if (!keep.has(child)) child.remove();
  }
  let at = parent.firstElementChild;
  for (const { node } of now.values()) {
    if (node === at) {
      at = at.nextElementSibling;
    } else {
      parent.insertBefore(node, at);
    }
  }
  drawn.set(parent, now);
}
