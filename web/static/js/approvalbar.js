// The pinned approval bar: above the message box while an approval of the
// conversation waits and its card's Approve and Deny are out of view —
// scrolled away, inside a folded tool card, above a long answer. It names
// the call, offers Approve and Deny (the card's own decision, with the
// reason typed in the card) and Open, which brings the card into view with
// the focus. With several waiting, it shows the first out of view and how
// many wait.

import { h, uniqueId } from './dom.js';
import { allowText } from './approvals.js';
import { readable } from './json.js';

const BRIEF = 120; // characters of the arguments shown (the card has them all)

// A part of the card is in view when at least this much of it shows (not
// 1: the browser's ratio of an element exactly in view may fall short of
// it by a rounding).
const FULLY = 0.98;

export class ApprovalBar {
  // scroller: the element the messages scroll in; open(id): bring the
  // card of approval id into view and move the focus to it.
  constructor(scroller, open) {
    this.open = open;
    this.entries = new Map(); // approval id -> { id, card, actions, allow, tool, brief, inView }
    this.current = null; // the entry the bar shows
    this.busy = false;
    const textId = uniqueId('approval-bar-text');
    this.allow = h('span', {}, 'Allow ');
    this.tool = h('code');
    this.brief = h('code');
    this.more = h('span', { class: 'badge status-awaiting approval-bar-more', hidden: true });
    this.error = h('p', { class: 'form-error', role: 'alert' });
    const button = (cls, label, onclick) => h('button', { type: 'button', class: `button ${cls}`, 'aria-describedby': textId, onclick }, label);
    this.openButton = button('approval-bar-open', 'Open', () => this.current && this.open(this.current.id));
    this.approve = button('primary approval-bar-approve', 'Approve', () => this.decide('approve'));
    this.deny = button('danger approval-bar-deny', 'Deny', () => this.decide('deny'));
    this.el = h('section', { class: 'approval-bar', 'aria-label': 'Approval waiting', hidden: true },
      h('div', { class: 'approval-bar-inner' },
        h('div', { id: textId, class: 'approval-bar-text' },
          h('p', { class: 'approval-bar-call' }, this.allow, this.tool, '?', ' ', this.more),
          h('p', { class: 'approval-bar-brief' }, this.brief)),
        h('div', { class: 'approval-bar-actions' }, this.openButton, this.approve, this.deny),
        this.error));
    this.observer = typeof IntersectionObserver === 'undefined' ? null : new IntersectionObserver((records) => {
      for (const r of records) {
        const entry = [...this.entries.values()].find((e) => e.actions === r.target);
        if (entry) entry.inView = r.isIntersecting && r.intersectionRatio >= FULLY;
      }
      this.render();
    }, { root: scroller, threshold: [0, FULLY] });
  }

  // set shows card — the pending card of an approval (item: its {view,
  // args}) with a decision to make — to the bar: the bar appears while its
  // Approve and Deny are out of view. Set again, a new card replaces the
  // one before.
  set(item, card) {
    const { id } = item.view;
    const actions = card.querySelector('form.decision .actions');
    if (!actions || !card.decide) {
      this.remove(id);
      return;
    }
    const old = this.entries.get(id);
    if (old && old.card === card) return;
    if (old && this.observer) this.observer.unobserve(old.actions);
    const brief = readable(item.args ?? JSON.stringify(item.view.arguments));
    this.entries.set(id, {
      id, card, actions, allow: allowText(item.view), tool: item.view.name ?? item.view.tool,
      brief: brief.length > BRIEF ? `${brief.slice(0, BRIEF - 1)}…` : brief,
      inView: true, // until the observer says otherwise: no flash as it arrives
    });
    if (this.observer) this.observer.observe(actions);
    this.render();
  }

  // remove takes approval id off the bar: decided, expired, or gone.
  remove(id) {
    const entry = this.entries.get(id);
    if (!entry) return;
    if (this.observer) this.observer.unobserve(entry.actions);
    this.entries.delete(id);
    this.render();
  }

  destroy() {
    if (this.observer) this.observer.disconnect();
    this.entries.clear();
    this.render();
  }

  render() {
    // A card no longer on the page (the conversation shown anew) is gone.
    for (const [id, e] of [...this.entries]) {
      if (e.card.isConnected) continue;
      if (this.observer) this.observer.unobserve(e.actions);
      this.entries.delete(id);
    }
    const waiting = [...this.entries.values()]
      .sort((a, b) => (a.card.compareDocumentPosition(b.card) & Node.DOCUMENT_POSITION_FOLLOWING ? -1 : 1));
    const shown = waiting.find((e) => !e.inView) || null;
    if (shown !== this.current) this.error.textContent = '';
    const had = this.current;
    this.current = shown;
    if (!shown) {
      // Its card came into view: a focus in the bar goes there.
      if (had && this.el.contains(document.activeElement) && had.card.isConnected) {
        had.card.querySelector('.approval-title').focus({ preventScroll: true });
      }
      this.el.hidden = true;
      return;
    }
    this.allow.textContent = shown.allow;
    this.tool.textContent = shown.tool;
    this.brief.textContent = shown.brief;
    this.more.hidden = waiting.length < 2;
    this.more.textContent = waiting.length < 2 ? '' : `${waiting.length} waiting`;
    const form = shown.card.querySelector('form.decision');
    this.approve.hidden = !form.querySelector('button[value=approve]');
    this.deny.hidden = !form.querySelector('button[value=deny]');
    this.approve.disabled = this.busy;
    this.deny.disabled = this.busy;
    this.el.hidden = false;
  }

  // decide makes the decision of the approval shown, through its card.
  async decide(decision) {
    const entry = this.current;
    if (!entry || this.busy) return;
    this.busy = true;
    this.error.textContent = '';
    this.render();
    let result;
    try {
      result = await entry.card.decide(decision);
    } finally {
      this.busy = false;
    }
    this.render();
    if (!result.ok && result.error && this.current === entry) this.error.textContent = result.error;
  }
}
