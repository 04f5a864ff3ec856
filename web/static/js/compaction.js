// Long conversations in the page: the summary a continued session opens
// with, the mark where earlier messages were summarised for the model
// (every message stays on the page), a failed summary, and the link to the
// session that continues this one.

import { h, timeElement } from './dom.js';

const runHref = (id) => `/runs/${encodeURIComponent(id)}`;

// summaryCard shows a message.summary event: the summary a session
// continued from another opens with, folded, and a link back.
export function summaryCard(ev) {
  const d = ev.data || {};
  // The link stands beside the summary's toggle, not in it: a control
  // inside a control is no control to a screen reader.
  return h('article', { class: 'msg msg-summary', 'aria-label': 'Summary of the earlier conversation', 'data-seq': ev.seq },
    h('p', { class: 'summary-from' }, 'Continued from ',
      d.fromRun ? h('a', { href: runHref(d.fromRun) }, 'an earlier session') : 'an earlier session',
      ': the assistant starts from its summary.'),
    h('details', { class: 'summary-card' },
      h('summary', null, 'The summary'),
      h('div', { class: 'msg-body plain' }, d.content || '')),
    h('footer', { class: 'msg-meta' }, timeElement(ev.createdAt)));
}

// CompactionMark keeps one mark in a message list, after the last message
// a context snapshot covers: above it, the model sees a summary instead of
// the messages, which all stay on the page.
export class CompactionMark {
  constructor(list) {
    this.list = list;
    this.el = h('p', { class: 'context-note', role: 'note' });
    this.toSeq = 0;
  }

  // place puts the mark after the message toSeq (or the last one before
  // it on the page) for snapshot version, unless a later one is placed.
  place(version, toSeq) {
    if (toSeq < this.toSeq) return;
    this.version = version;
    this.toSeq = toSeq;
    this.el.textContent = `The messages above are summarised for the model (summary ${version}); they are all still here.`;
    let after = null;
    for (const el of this.list.querySelectorAll(':scope > [data-seq]')) {
      if (Number(el.dataset.seq) <= toSeq) after = el;
    }
    if (after) after.after(this.el);
    else this.el.remove(); // what it covers is not on the page (yet)
  }

  // again places the mark anew after messages were added above it.
  again() {
    if (this.toSeq && !this.el.isConnected) this.place(this.version, this.toSeq);
  }
}

// failedNote says that a summary was not written, and why.
export function failedNote(d) {
  return h('p', { class: 'context-note failed', role: 'status' },
    `Summarising earlier messages for the model failed (${d.reason || 'no reason given'}); the assistant went on without it.`);
}

// continuedNote links to the sessions that continue this one.
export function continuedNote(ids) {
  if (!ids.length) return null;
  return h('p', { class: 'context-note continued', role: 'note' }, 'This session continues in ',
    ids.map((id, i) => [i ? ', ' : '', h('a', { href: runHref(id) }, ids.length > 1 ? `session ${i + 1}` : 'a new session')]), '.');
}
