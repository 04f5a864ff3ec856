// Exact JSON. An approval must show the arguments exactly as they will run:
// JSON.parse would round numbers beyond 2^53 and reorder keys that look
// like integers. These functions work on the JSON text itself.

import { h, uniqueId } from './dom.js';
import { highlight } from './highlight.js';

// rawAt returns the exact text of the value at path (keys and array
// indexes) inside the JSON document text, or null when there is none.
export function rawAt(text, path) {
  let pos = 0;
  const ws = () => {
    while (pos < text.length && ' \t\n\r'.includes(text[pos])) pos += 1;
  };
  const skipString = () => {
    pos += 1; // the opening quote
    while (pos < text.length && text[pos] !== '"') pos += text[pos] === '\\' ? 2 : 1;
    pos += 1;
  };
  const skipValue = () => {
    ws();
    const c = text[pos];
    if (c === '"') return skipString();
    if (c === '{' || c === '[') {
      const close = c === '{' ? '}' : ']';
      pos += 1;
      ws();
      if (text[pos] === close) { pos += 1; return undefined; }
      for (;;) {
        if (c === '{') { ws(); skipString(); ws(); pos += 1; } // key and colon
        skipValue();
        ws();
        if (text[pos] === ',') { pos += 1; continue; }
        pos += 1; // the closing bracket
        return undefined;
      }
    }
    while (pos < text.length && !',]} \t\n\r'.includes(text[pos])) pos += 1;
    return undefined;
  };
  // find moves pos to the start of the member or item named key of the
  // container at pos; false when it has none.
  const find = (key) => {
    ws();
    const c = text[pos];
    if (c !== '{' && c !== '[') return false;
    pos += 1;
    ws();
    if (text[pos] === '}' || text[pos] === ']') return false;
    for (let index = 0; ; index += 1) {
      ws();
      let match;
      if (c === '{') {
        const start = pos;
        skipString();
        match = JSON.parse(text.slice(start, pos)) === key;
        ws();
        pos += 1; // the colon
      } else {
        match = index === key;
      }
      if (match) { ws(); return true; }
      skipValue();
      ws();
      if (text[pos] !== ',') return false;
      pos += 1;
    }
  };
  try {
    for (const key of path) {
      if (!find(key)) return null;
    }
    ws();
    const start = pos;
    skipValue();
    return pos > start && pos <= text.length ? text.slice(start, pos) : null;
  } catch {
    return null;
  }
}

// pretty indents JSON text without parsing it, so every key, number and
// string stays exactly as written.
export function pretty(text, indent = '  ') {
  let out = '';
  let depth = 0;
  let inString = false;
  const newline = () => `\n${indent.repeat(depth)}`;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (inString) {
      out += c;
      if (c === '\\') { out += text[i + 1] ?? ''; i += 1; } else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') { inString = true; out += c; continue; }
    if (' \t\n\r'.includes(c)) continue;
    if (c === '{' || c === '[') {
      let j = i + 1;
      while (j < text.length && ' \t\n\r'.includes(text[j])) j += 1;
      if (text[j] === (c === '{' ? '}' : ']')) { out += c + text[j]; i = j; continue; }
      depth += 1;
      out += c + newline();
    } else if (c === '}' || c === ']') {
      depth = Math.max(0, depth - 1);
      out += newline() + c;
    } else if (c === ',') {
      out += c + newline();
    } else if (c === ':') {
      out += ': ';
    } else {
      out += c;
    }
  }
  return out;
}

// Characters a reader cannot see, or that reorder what is seen (bidi
// controls, zero-width and line-separator characters): shown as \u
// escapes, so that an approver sees every character of the arguments.
const invisible = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb]/u;

// The escapes Go's JSON encoder adds for HTML safety; canonical JSON (RFC
// 8785) writes these characters as they are.
const htmlEscapes = { '003c': '<', '003e': '>', '0026': '&' };

// readable returns JSON text as canonical JSON writes it, with every
// invisible character escaped: only how characters inside strings are
// written changes, never what they are.
export function readable(text) {
  let out = '';
  let inString = false;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (!inString) {
      if (c === '"') inString = true;
      out += c;
      continue;
    }
    if (c === '\\') {
      const next = text[i + 1] ?? '';
      if (next === 'u') {
        const hex = text.slice(i + 2, i + 6);
        const ch = htmlEscapes[hex.toLowerCase()];
        out += ch ?? `\\u${hex}`;
        i += 5;
      } else {
        out += c + next;
        i += 1;
      }
      continue;
    }
    if (c === '"') inString = false;
    const cp = c.codePointAt(0);
    if (invisible.test(c)) out += `\\u${cp.toString(16).padStart(4, '0')}`;
    else out += c;
  }
  return out;
}

// prettyValue shows a parsed value (model-chosen tool arguments, a tool
// result) readably; strings that hold JSON are shown as that JSON.
export function prettyValue(value) {
  if (value === undefined) return '';
  if (typeof value === 'string') return readableResult(value).text;
  return pretty(readable(JSON.stringify(value)));
}

// readableResult is a tool result's text as a person reads it: JSON
// (an object or an array) indented, exactly as written; a JSON string
// as its text, unescaped; anything else as it is.
export function readableResult(content) {
  const text = typeof content === 'string' ? content : content === undefined || content === null ? '' : JSON.stringify(content);
  const t = text.trim();
  if ((t.startsWith('{') && t.endsWith('}')) || (t.startsWith('[') && t.endsWith(']'))) {
    try {
      JSON.parse(t);
      return { json: true, text: pretty(readable(t)) };
    } catch {
      return { json: false, text };
    }
  }
  if (t.startsWith('"') && t.endsWith('"')) {
    try {
      const s = JSON.parse(t);
      if (typeof s === 'string') return { json: false, text: s };
    } catch {
      return { json: false, text };
    }
  }
  return { json: false, text };
}

const FOLD_LINES = 16; // a longer result shows its first lines and "Show all"

// resultBlock shows a tool result: JSON indented and coloured, text as
// text; a long one folded to its first lines, with a button to show all.
export function resultBlock(content) {
  const { json, text } = readableResult(content);
  const code = h('code', { class: json ? 'language-json' : null }, text);
  const pre = h('pre', { tabindex: '0', id: uniqueId('result'), class: json ? 'result-json' : 'result-text' }, code);
  if (json) highlight(code, 'json');
  const lines = text.split('\n').length;
  if (lines <= FOLD_LINES) return pre;
  pre.classList.add('folded');
  const toggle = h('button', { type: 'button', class: 'link-button result-toggle', 'aria-expanded': 'false', 'aria-controls': pre.id }, `Show all ${lines} lines`);
  toggle.addEventListener('click', () => {
    const open = pre.classList.toggle('folded') === false;
    toggle.setAttribute('aria-expanded', String(open));
    toggle.textContent = open ? 'Show less' : `Show all ${lines} lines`;
  });
  return h('div', { class: 'result-fold' }, pre, toggle);
}
