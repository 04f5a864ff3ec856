// A small, safe Markdown renderer for messages from models, tools and
// people. It builds DOM nodes with createElement and text nodes only — it
// never parses HTML, so raw HTML in a message shows as the text it is.
// Links are made only of absolute http(s) URLs, open in a new tab with
// rel="noopener noreferrer"; images are never loaded (they become links).
//
// Supported: paragraphs, line breaks, headings, emphasis, strong,
// strikethrough, inline code, fenced and indented code blocks, block
// quotes, ordered and unordered (nested) lists, tables, horizontal rules,
// links, autolinks and bare URLs.

import { highlight, languageLabel } from './highlight.js';
import { copyButton } from './copy.js';

const MAX_DEPTH = 8; // nesting of quotes and lists
const MAX_INPUT = 256 * 1024; // characters rendered; the rest is shown as text

// safeURL returns the URL when it is absolute http or https, else null.
export function safeURL(raw) {
  if (typeof raw !== 'string') return null;
  let u;
  try {
    u = new URL(raw.trim());
  } catch {
    return null;
  }
  return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
}

function el(tag, className) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  return e;
}

function textEl(tag, text, className) {
  const e = el(tag, className);
  e.textContent = text;
  return e;
}

function link(href, children) {
  const a = el('a');
  a.href = href;
  a.target = '_blank';
  a.rel = 'noopener noreferrer';
  for (const c of children) a.append(c);
  return a;
}

// renderMarkdown returns a DocumentFragment of src rendered.
export function renderMarkdown(src) {
  const frag = document.createDocumentFragment();
  if (typeof src !== 'string' || src === '') return frag;
  let rest = '';
  if (src.length > MAX_INPUT) {
    rest = src.slice(MAX_INPUT);
    src = src.slice(0, MAX_INPUT);
  }
  const lines = src.replace(/\r\n?/g, '\n').split('\n');
  renderBlocks(lines, frag, 0);
  if (rest) frag.append(textEl('p', rest));
  return frag;
}

const reFence = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const reHeading = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const reRule = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const reQuote = /^ {0,3}> ?/;
const reBullet = /^( {0,3})([-*+])([ \t]+)(.*)$/;
const reOrdered = /^( {0,3})(\d{1,9})([.)])([ \t]+)(.*)$/;
const reTableSep = /^ {0,3}\|?(?:\s*:?-+:?\s*\|)*\s*:?-+:?\s*\|?\s*$/;
const reBlank = /^\s*$/;
const reIndented = /^(?: {4}|\t)/;

function listMarker(line) {
  let m = reBullet.exec(line);
  if (m) return { ordered: false, indent: m[1].length, width: m[1].length + 1 + m[3].length, text: m[4], bullet: m[2] };
  m = reOrdered.exec(line);
  if (m) {
    return {
      ordered: true, indent: m[1].length, width: m[1].length + m[2].length + 1 + m[4].length,
      text: m[5], start: Number(m[2]), delim: m[3],
    };
  }
  return null;
}

function startsBlock(line, next) {
  return reFence.test(line) || reHeading.test(line) || reRule.test(line) || reQuote.test(line) ||
    listMarker(line) !== null || isTableStart(line, next);
}

function isTableStart(line, next) {
  return next !== undefined && line.includes('|') && reTableSep.test(next) && next.includes('-') &&
    splitRow(line).length === splitRow(next).length;
}

function renderBlocks(lines, parent, depth) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (reBlank.test(line)) { i += 1; continue; }

    let m = reFence.exec(line);
    if (m) {
      const fence = m[1];
      const body = [];
      i += 1;
      while (i < lines.length && !new RegExp(`^ {0,3}${fence[0] === '`' ? '`' : '~'}{${fence.length},}\\s*$`).test(lines[i])) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1; // the closing fence (or the end)
      parent.append(codeBlock(body.join('\n'), m[2]));
      continue;
    }

    if (reIndented.test(line)) {
      const body = [];
      while (i < lines.length && (reIndented.test(lines[i]) || (reBlank.test(lines[i]) && i + 1 < lines.length && reIndented.test(lines[i + 1])))) {
        body.push(lines[i].replace(reIndented, ''));
        i += 1;
      }
      parent.append(codeBlock(body.join('\n'), ''));
      continue;
    }

    m = reHeading.exec(line);
    if (m) {
      // Headings in a message sit below the page's own (h1, h2).
      const level = Math.min(6, m[1].length + 2);
      const hd = el(`h${level}`, 'md-heading');
      appendInline(hd, m[2] || '');
      parent.append(hd);
      i += 1;
      continue;
    }

    if (reRule.test(line)) {
      parent.append(el('hr'));
      i += 1;
      continue;
    }

    if (reQuote.test(line)) {
      const body = [];
      while (i < lines.length && !reBlank.test(lines[i])) {
        body.push(lines[i].replace(reQuote, ''));
        i += 1;
      }
      const q = el('blockquote');
      if (depth < MAX_DEPTH) renderBlocks(body, q, depth + 1);
      else q.append(textEl('p', body.join('\n')));
      parent.append(q);
      continue;
    }

    const marker = listMarker(line);
    if (marker) {
      i = renderList(lines, i, marker, parent, depth);
      continue;
    }

    if (isTableStart(line, lines[i + 1])) {
      i = renderTable(lines, i, parent);
      continue;
    }

    // A paragraph: up to a blank line or the start of another block.
    const para = [line];
    i += 1;
    while (i < lines.length && !reBlank.test(lines[i]) && !startsBlock(lines[i], lines[i + 1])) {
      para.push(lines[i]);
      i += 1;
    }
    const p = el('p');
    appendInline(p, para.map((l) => l.trim()).join('\n'));
    parent.append(p);
  }
}

// codeBlock is a fenced or indented block: its language's label, a Copy
// button and the code, highlighted once highlight.js (loaded only now) has
// its language. The label and the button's word are drawn by CSS (from
// data-label and .code-copy), so the block's text is exactly its code.
function codeBlock(text, lang) {
  const known = /^[A-Za-z0-9_+#.-]{1,32}$/.test(lang) ? lang : '';
  const wrap = el('div', 'code-block');
  const head = el('div', 'code-head');
  const label = el('span', 'code-lang');
  label.dataset.label = languageLabel(known);
  head.append(label, copyButton({ label: `Copy code${known ? ` (${languageLabel(known)})` : ''}`, text: () => text, className: 'code-copy', visible: '' }));
  const pre = el('pre', 'md-code');
  // A long line scrolls the block sideways: from the keyboard too.
  pre.tabIndex = 0;
  const code = el('code');
  if (known) code.className = `language-${known}`;
  code.textContent = text;
  pre.append(code);
  wrap.append(head, pre);
  highlight(code, known);
  return wrap;
}

function renderList(lines, i, first, parent, depth) {
  const list = el(first.ordered ? 'ol' : 'ul');
  if (first.ordered && first.start !== 1) list.start = first.start;
  const items = [];
  let current = null;
  let loose = false;
  let sawBlank = false;
  while (i < lines.length) {
    const line = lines[i];
    const m = listMarker(line);
    if (m && m.indent < first.width && m.ordered === first.ordered &&
        (m.ordered ? m.delim === first.delim : m.bullet === first.bullet)) {
      if (sawBlank && current) loose = true;
      current = [m.text];
      current.width = m.width;
      items.push(current);
      sawBlank = false;
      i += 1;
      continue;
    }
    if (reBlank.test(line)) {
      sawBlank = true;
      current.push('');
      i += 1;
      continue;
    }
    const indent = line.length - line.trimStart().length;
    if (indent >= Math.min(current.width, 4) || (m && indent >= 2)) {
      current.push(line.slice(Math.min(indent, current.width)));
      if (sawBlank) loose = true;
      sawBlank = false;
      i += 1;
      continue;
    }
    if (!sawBlank && !startsBlock(line, lines[i + 1])) { // a lazy continuation
      current.push(line.trim());
      i += 1;
      continue;
    }
    break;
  }
  for (const itemLines of items) {
    while (itemLines.length && reBlank.test(itemLines[itemLines.length - 1])) itemLines.pop();
    const li = el('li');
    if (depth < MAX_DEPTH) renderBlocks(itemLines, li, depth + 1);
    else li.textContent = itemLines.join('\n');
    // A tight list shows its items' text without paragraph spacing.
    if (!loose) {
      for (const p of Array.from(li.children)) {
        if (p.tagName === 'P') p.replaceWith(...p.childNodes);
      }
    }
    list.append(li);
  }
  parent.append(list);
  return i;
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let cell = '';
  let code = false;
  for (let k = 0; k < s.length; k += 1) {
    const c = s[k];
    if (c === '\\' && s[k + 1] === '|') { cell += '|'; k += 1; continue; }
    if (c === '`') code = !code;
    if (c === '|' && !code) { cells.push(cell.trim()); cell = ''; continue; }
    cell += c;
  }
  cells.push(cell.trim());
  return cells;
}

function renderTable(lines, i, parent) {
  const head = splitRow(lines[i]);
  const align = splitRow(lines[i + 1]).map((c) => {
    const left = c.startsWith(':');
    const right = c.endsWith(':');
    if (left && right) return 'md-center';
    if (right) return 'md-right';
    return left ? 'md-left' : '';
  });
  const wrap = el('div', 'md-table');
  const table = el('table');
  const thead = el('thead');
  const tr = el('tr');
  head.forEach((text, k) => {
    const th = el('th', align[k]);
    th.scope = 'col';
    appendInline(th, text);
    tr.append(th);
  });
  thead.append(tr);
  table.append(thead);
  const tbody = el('tbody');
  i += 2;
  while (i < lines.length && !reBlank.test(lines[i]) && lines[i].includes('|')) {
    const cells = splitRow(lines[i]);
    const row = el('tr');
    head.forEach((_, k) => {
      const td = el('td', align[k]);
      appendInline(td, cells[k] ?? '');
      row.append(td);
    });
    tbody.append(row);
    i += 1;
  }
  table.append(tbody);
  wrap.append(table);
  parent.append(wrap);
  return i;
}

const punctuation = /[!-/:-@[-`{-~]/;
const wordChar = /[\p{L}\p{N}]/u;
const reBareURL = /https?:\/\/[^\s<>"]+/iy; // sticky: matched at lastIndex, no copying

// appendInline appends text with inline markup rendered to parent.
export function appendInline(parent, text, noLinks = false) {
  for (const node of inline(text, noLinks, 0)) parent.append(node);
}

// matchBrackets pairs each '[' with its ']' (escapes skipped) in one pass.
function matchBrackets(text) {
  const match = new Map();
  const open = [];
  for (let i = 0; i < text.length; i += 1) {
    if (text[i] === '\\') i += 1;
    else if (text[i] === '[') open.push(i);
    else if (text[i] === ']' && open.length) match.set(open.pop(), i);
  }
  return match;
}

// Every search below runs forward from an opener; where one found nothing,
// a later opener finds nothing either, so each is remembered (none) and
// rendering stays linear however a message is crafted.
function inline(text, noLinks, depth) {
  const out = [];
  const none = new Map(); // search key -> position from which it found nothing
  const failedFrom = (key, i) => none.has(key) && i >= none.get(key);
  let brackets = null;
  let buf = '';
  const flush = () => {
    if (buf) out.push(document.createTextNode(buf));
    buf = '';
  };
  const nested = (s, tag) => {
    const e = el(tag);
    if (depth < MAX_DEPTH) for (const n of inline(s, noLinks, depth + 1)) e.append(n);
    else e.textContent = s;
    return e;
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];

    if (c === '\\' && i + 1 < text.length && punctuation.test(text[i + 1])) {
      buf += text[i + 1];
      i += 2;
      continue;
    }
    if (c === '\\' && text[i + 1] === '\n') { // a hard break
      flush();
      out.push(el('br'));
      i += 2;
      continue;
    }
    if (c === '\n') {
      flush();
      out.push(el('br'));
      i += 1;
      continue;
    }

    if (c === '`') {
      let n = 1;
      while (text[i + n] === '`') n += 1;
      const ticks = '`'.repeat(n);
      let close = failedFrom(ticks, i) ? -1 : text.indexOf(ticks, i + n);
      while (close !== -1 && (text[close + n] === '`' || text[close - 1] === '`')) close = text.indexOf(ticks, close + 1);
      if (close === -1) none.set(ticks, Math.min(i, none.get(ticks) ?? i));
      if (close !== -1) {
        flush();
        let code = text.slice(i + n, close).replace(/\n/g, ' ');
        if (code.length > 2 && code.startsWith(' ') && code.endsWith(' ')) code = code.slice(1, -1);
        out.push(textEl('code', code));
        i = close + n;
        continue;
      }
      buf += ticks;
      i += n;
      continue;
    }

    if (!noLinks && c === '<' && !failedFrom('>', i)) {
      const close = text.indexOf('>', i + 1);
      if (close === -1) none.set('>', i);
      if (close !== -1) {
        const href = safeURL(text.slice(i + 1, close));
        if (href && !/\s/.test(text.slice(i + 1, close))) {
          flush();
          out.push(link(href, [document.createTextNode(text.slice(i + 1, close))]));
          i = close + 1;
          continue;
        }
      }
    }

    if (c === '[' || (c === '!' && text[i + 1] === '[')) {
      const image = c === '!';
      if (!brackets) brackets = matchBrackets(text);
      const parsed = parseLink(text, image ? i + 1 : i, brackets);
      if (parsed) {
        flush();
        const href = noLinks ? null : safeURL(parsed.url);
        const label = image ? [document.createTextNode(parsed.label || 'image')] : inline(parsed.label, true, depth + 1);
        if (href) out.push(link(href, image ? [document.createTextNode(`${parsed.label || 'image'} (image)`)] : label));
        else out.push(...label);
        i = parsed.end;
        continue;
      }
    }

    if (!noLinks && (c === 'h' || c === 'H') && (i === 0 || !wordChar.test(text[i - 1]))) {
      reBareURL.lastIndex = i;
      const m = reBareURL.exec(text);
      if (m) {
        let url = m[0];
        // Trailing punctuation ends the sentence, not the URL; so does a
        // closing parenthesis without its opening one.
        for (;;) {
          const last = url[url.length - 1];
          if ('.,;:!?\'"*_'.includes(last)) url = url.slice(0, -1);
          else if (last === ')' && (url.match(/\)/g) || []).length > (url.match(/\(/g) || []).length) url = url.slice(0, -1);
          else break;
        }
        const href = safeURL(url);
        if (href) {
          flush();
          out.push(link(href, [document.createTextNode(url)]));
          i += url.length;
          continue;
        }
      }
    }

    if (c === '*' || c === '_' || c === '~') {
      const run = c === '~' ? (text[i + 1] === '~' ? 2 : 0) : (text[i + 1] === c ? 2 : 1);
      if (run > 0) {
        const delim = c.repeat(run);
        const before = i > 0 ? text[i - 1] : ' ';
        const after = text[i + run];
        // Underscores inside words (snake_case) are not emphasis.
        const opens = after !== undefined && !/\s/.test(after) && !(c === '_' && wordChar.test(before));
        if (opens && !failedFrom(delim, i)) {
          let close = text.indexOf(delim, i + run);
          while (close !== -1) {
            const prev = text[close - 1];
            const next = text[close + run];
            const okClose = !/\s/.test(prev) && !(c === '_' && next !== undefined && wordChar.test(next)) &&
              !(run === 1 && (next === c || prev === c));
            if (okClose && close > i + run) break;
            close = text.indexOf(delim, close + 1);
          }
          if (close === -1) none.set(delim, i);
          if (close !== -1) {
            flush();
            const inner = text.slice(i + run, close);
            out.push(nested(inner, c === '~' ? 'del' : run === 2 ? 'strong' : 'em'));
            i = close + run;
            continue;
          }
        }
        buf += delim;
        i += run;
        continue;
      }
    }

    buf += c;
    i += 1;
  }
  flush();
  return out;
}

// parseLink reads [label](url "title") at text[i] === '['; brackets pairs
// the square brackets of text.
function parseLink(text, i, brackets) {
  const j = brackets.get(i);
  if (j === undefined || text[j + 1] !== '(') return null;
  const label = text.slice(i + 1, j);
  let k = j + 2;
  let parens = 0;
  let url = '';
  const limit = Math.min(text.length, k + 2048); // a URL longer than this is not one
  while (k < text.length && /\s/.test(text[k])) k += 1;
  if (text[k] === '<') {
    const close = text.indexOf('>', k);
    if (close === -1 || close > limit) return null;
    url = text.slice(k + 1, close);
    k = close + 1;
  } else {
    for (; k < limit; k += 1) {
      const c = text[k];
      if (/\s/.test(c) || c === '[' || c === ']') break; // not in a URL unescaped
      if (c === '(') parens += 1;
      if (c === ')') {
        if (parens === 0) break;
        parens -= 1;
      }
      url += c;
    }
  }
  while (k < text.length && /\s/.test(text[k])) k += 1;
  if (text[k] === '"' || text[k] === "'") { // a title, ignored
    const close = text.indexOf(text[k], k + 1);
    if (close === -1 || close > limit) return null;
    k = close + 1;
    while (k < text.length && /\s/.test(text[k])) k += 1;
  }
  if (text[k] !== ')') return null;
  return { label, url, end: k + 1 };
}
