// Attachments: files a person sends with a message. The composer's tray
// takes them by its button, by paste and by drop, checks each before it is
// uploaded (the server checks again, and decides), uploads it at once, and
// shows it as a thumbnail (an image) or a chip (a text file) until the
// message goes. A sent message shows its attachments the same way.

import { h, announce } from './dom.js';
import { APIError } from './api.js';

// The kinds the server takes, by extension, and the largest file it takes
// by default (assistant.attachments_max_bytes) until the runs list says
// the server's own (setMaxBytes).
const IMAGE_EXTS = ['png', 'jpg', 'jpeg', 'webp', 'gif'];
const TEXT_EXTS = ['txt', 'text', 'log', 'md', 'markdown', 'csv', 'tsv', 'json', 'go', 'py', 'js', 'mjs', 'ts', 'tsx',
  'jsx', 'java', 'kt', 'c', 'h', 'cc', 'cpp', 'hpp', 'cs', 'rs', 'rb', 'php', 'swift', 'scala', 'sh', 'bash', 'ps1', 'sql',
  'yaml', 'yml', 'toml', 'ini', 'xml', 'html', 'css', 'scss', 'proto', 'graphql', 'tf', 'lua', 'r', 'm', 'pl', 'dart',
  'vue', 'svelte', 'diff', 'patch', 'cedar', 'env', 'cfg', 'conf', 'gradle', 'mk'];
let maxBytes = 10 * 1024 * 1024;
const MAX_FILES = 10;
const PASTED_TYPES = { 'image/png': 'png', 'image/jpeg': 'jpg', 'image/webp': 'webp', 'image/gif': 'gif' };

// setMaxBytes sets the largest file the page lets through to the
// server's (GET /api/assistant/runs' limits.maxAttachmentBytes).
export function setMaxBytes(n) {
  if (Number.isSafeInteger(n) && n > 0) maxBytes = n;
}

export const ACCEPT = [...IMAGE_EXTS, ...TEXT_EXTS].map((e) => `.${e}`).join(',');

export const attachmentURL = (id) => `/api/assistant/attachments/${encodeURIComponent(id)}`;

function extension(name) {
  const i = name.lastIndexOf('.');
  return i > 0 ? name.slice(i + 1).toLowerCase() : '';
}

function isImageType(type) {
  return typeof type === 'string' && type.startsWith('image/');
}

export function formatSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(n < 10 * 1024 ? 1 : 0)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

// refusal says why file cannot be attached, or '' when it can be tried.
export function refusal(file) {
  const ext = extension(file.name);
  if (/[\\/\u0000-\u001f\u007f]/.test(file.name)) return `“${file.name}” has characters a file name cannot have.`;
  if (!IMAGE_EXTS.includes(ext) && !TEXT_EXTS.includes(ext)) {
    return `“${file.name}” cannot be attached: attach images (PNG, JPEG, WebP, GIF) or text files (plain text, Markdown, CSV, JSON, source code).`;
  }
  if (IMAGE_EXTS.includes(ext) && file.type && !isImageType(file.type)) return `“${file.name}” is not the image its name says.`;
  if (file.size === 0) return `“${file.name}” is empty.`;
  if (file.size > maxBytes) return `“${file.name}” is ${formatSize(file.size)}: files up to ${formatSize(maxBytes)} can be attached.`;
  return '';
}

// upload sends one file; it answers the attachment ({id, name, type, size,
// sha256}) or throws an APIError with the server's message.
async function upload(file, name) {
  let res;
  try {
    res = await fetch(`/api/assistant/attachments?name=${encodeURIComponent(name)}`, {
      method: 'POST', body: file, credentials: 'same-origin', cache: 'no-store',
      headers: { Accept: 'application/json', 'Content-Type': file.type || 'application/octet-stream' },
    });
  } catch {
    throw new APIError(0, 'network', 'Usher could not be reached. Check your connection and try again.');
  }
  let data = null;
  try { data = await res.json(); } catch { data = null; }
  if (!res.ok) {
    const e = (data && data.error) || {};
    throw new APIError(res.status, e.code || `http_${res.status}`, e.message || `The upload failed (${res.status}).`);
  }
  return data;
}

// paperclip is the Attach button's icon, drawn (no font has to have it).
function paperclip() {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  for (const [k, v] of Object.entries({ viewBox: '0 0 24 24', width: '16', height: '16', fill: 'none', stroke: 'currentColor',
    'stroke-width': '2', 'stroke-linecap': 'round', 'stroke-linejoin': 'round', 'aria-hidden': 'true', class: 'attach-icon' })) svg.setAttribute(k, v);
  const path = document.createElementNS(ns, 'path');
  path.setAttribute('d', 'M21 11.5l-8.5 8.5a5.5 5.5 0 0 1-7.8-7.8l9.2-9.2a3.7 3.7 0 0 1 5.2 5.2l-9.2 9.2a1.8 1.8 0 0 1-2.6-2.6l8.5-8.5');
  svg.append(path);
  return svg;
}

// attachmentView shows one attachment: a thumbnail that opens the image,
// or a chip that downloads the file. remove, when given, adds a button that
// takes it off the message being written.
export function attachmentView(a, remove) {
  const label = `${a.name}, ${formatSize(a.size)}`;
  const link = isImageType(a.type)
    ? h('a', { class: 'attachment-thumb', href: attachmentURL(a.id), target: '_blank', rel: 'noopener', title: label },
      h('img', { src: attachmentURL(a.id), alt: a.name, loading: 'lazy', decoding: 'async' }))
    : h('a', { class: 'attachment-chip', href: attachmentURL(a.id), download: a.name, title: label },
      h('span', { class: 'attachment-icon', 'aria-hidden': 'true' }, extension(a.name).toUpperCase().slice(0, 4) || 'FILE'),
      h('span', { class: 'attachment-name' }, a.name), h('span', { class: 'attachment-size' }, formatSize(a.size)));
  const item = h('li', { class: 'attachment', 'data-attachment': a.id }, link);
  if (remove) {
    item.append(h('button', { type: 'button', class: 'attachment-remove', 'aria-label': `Remove ${a.name}`, onclick: () => remove(a) }, '×'));
  }
  return item;
}

// attachmentList shows a sent message's attachments (none: null).
export function attachmentList(list) {
  if (!Array.isArray(list) || !list.length) return null;
  return h('ul', { class: 'attachments', 'aria-label': 'Attachments' }, list.map((a) => attachmentView(a)));
}

// AttachmentTray is the composer's part for attachments: its button, its
// list, and what it takes by paste (on input) and drop (on zone).
export class AttachmentTray {
  constructor({ input, zone, onChange = () => {} }) {
    this.items = []; // uploaded: {id, name, type, size, sha256}
    this.pending = 0;
    this.onChange = onChange;
    this.file = h('input', { type: 'file', multiple: true, accept: ACCEPT, hidden: true, class: 'attachment-input', tabindex: '-1', 'aria-hidden': 'true' });
    this.file.addEventListener('change', () => {
      this.add([...this.file.files]);
      this.file.value = '';
    });
    this.button = h('button', { type: 'button', class: 'button attach-button', title: 'Attach images or text files', onclick: () => this.file.click() },
      paperclip(), h('span', { class: 'attach-label' }, 'Attach'));
    this.list = h('ul', { class: 'attachments composer-attachments', 'aria-label': 'Attached files', hidden: true });
    this.error = h('p', { class: 'form-error attachment-error', role: 'alert' });
    input.addEventListener('paste', (e) => {
      const files = [...(e.clipboardData ? e.clipboardData.files : [])];
      if (!files.length) return;
      e.preventDefault();
      this.add(files);
    });
    zone.addEventListener('dragover', (e) => {
      if (!e.dataTransfer || ![...e.dataTransfer.types].includes('Files')) return;
      e.preventDefault();
      zone.classList.add('dropping');
    });
    zone.addEventListener('dragleave', (e) => {
      if (!zone.contains(e.relatedTarget)) zone.classList.remove('dropping');
    });
    zone.addEventListener('drop', (e) => {
      zone.classList.remove('dropping');
      if (!e.dataTransfer || !e.dataTransfer.files.length) return;
      e.preventDefault();
      this.add([...e.dataTransfer.files]);
    });
  }

  ids() { return this.items.map((a) => a.id); }

  busy() { return this.pending > 0; }

  // add checks and uploads files; each refused one is said, and not sent.
  async add(files) {
    const problems = [];
    const jobs = [];
    for (const file of files) {
      // A pasted image is named by the browser ("image.png") or not at all.
      const name = file.name || `pasted.${PASTED_TYPES[file.type] || 'png'}`;
      const why = this.items.length + this.pending + jobs.length >= MAX_FILES
        ? `At most ${MAX_FILES} files go with one message.`
        : refusal({ name, type: file.type, size: file.size });
      if (why) {
        problems.push(why);
        continue;
      }
      jobs.push(this.send(file, name, problems));
    }
    this.error.textContent = problems.join(' ');
    await Promise.all(jobs);
    this.error.textContent = problems.join(' ');
  }

  async send(file, name, problems) {
    const placeholder = h('li', { class: 'attachment uploading', 'aria-busy': 'true' }, h('span', { class: 'attachment-chip' }, `Uploading ${name}…`));
    this.list.append(placeholder);
    this.list.hidden = false;
    this.pending++;
    this.onChange();
    try {
      const a = await upload(file, name);
      this.items.push(a);
      placeholder.replaceWith(attachmentView(a, (x) => this.remove(x)));
      announce(`Attached ${a.name}.`);
    } catch (err) {
      placeholder.remove();
      problems.push(`“${name}” was not attached: ${err.message}`);
    } finally {
      this.pending--;
      this.list.hidden = !this.list.children.length;
      this.onChange();
    }
  }

  // keep puts attachments sent already (a message being edited) in the
  // tray, each with its button to remove it.
  keep(list) {
    for (const a of list || []) {
      this.items.push(a);
      this.list.append(attachmentView(a, (x) => this.remove(x)));
    }
    this.list.hidden = !this.list.children.length;
    this.onChange();
  }

  remove(a) {
    this.items = this.items.filter((x) => x.id !== a.id);
    const el = this.list.querySelector(`[data-attachment="${CSS.escape(a.id)}"]`);
    if (el) el.remove();
    this.list.hidden = !this.list.children.length;
    this.onChange();
  }

  // sent returns what went with a message and empties the tray.
  sent() {
    const items = this.items;
    this.items = [];
    this.list.replaceChildren();
    this.list.hidden = true;
    this.error.textContent = '';
    this.onChange();
    return items;
  }
}
