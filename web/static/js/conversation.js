// The conversation view of one run: its messages (Markdown, rendered
// safely), tool calls as collapsible cards, approvals inline, streamed
// text, older messages on scrolling up, and the composer. It shows the
// run's active branch: edit on the user's messages, regenerate on the last
// reply, and "< 2/3 >" on a message with alternatives switch between them.

import { h, announce, timeElement, uniqueId } from './dom.js';
import { request, path, newKey, APIError } from './api.js';
import { renderMarkdown } from './markdown.js';
import { prettyValue, resultBlock } from './json.js';
import { messageCopy } from './copy.js';
import { RunStream } from './live.js';
import { approvalCard, loadApproval, approvalStatus } from './approvals.js';
import { ApprovalBar } from './approvalbar.js';
import { runStatus, runTitle, isClosed, contextUse } from './status.js';
import { summaryCard, CompactionMark, failedNote, continuedNote } from './compaction.js';
import { exportRun } from './export.js';
import { modelPicker } from './models.js';
import { AttachmentTray, attachmentList } from './attachments.js';
import { sends, sendHint } from './prefs.js';
import { skeleton } from './skeleton.js';
import { modalForm } from './dialog.js';
import { usageNote, refreshUsage } from './usage.js';
import { afterDeletion } from './retention.js';

const PAGE = 50; // older messages loaded at a time
const NEAR_BOTTOM = 96; // px: closer than this, new content keeps the view at the bottom

const TOOL_STATUS = {
  succeeded: ['Done', 'status-ok'],
  failed: ['Failed', 'status-bad'],
  denied: ['Denied', 'status-bad'],
  approval_pending: ['Needs approval', 'status-awaiting'],
};

function summarize(text, n) {
  const t = String(text || '').replace(/\s+/g, ' ').trim();
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

// inTurnOrder adds el, a message its turn wrote (the turn of the user
// message turnSeq), to parent in turn order: before the first user
// message of a later turn, so that a message sent while the turn ran
// stays below its reply, as the model sees them; at the end otherwise.
// The note of how the turn ended (turnNote) stays below the turn's
// messages: the partial reply of a stopped turn is logged after its end.
function inTurnOrder(parent, turnSeq, el) {
  const later = turnSeq ? [...parent.children].find((m) => (m.matches('article.msg-user[data-seq]') && Number(m.dataset.seq) > turnSeq)
    || (m.matches('.turn-note[data-turn]') && Number(m.dataset.turn) === turnSeq)) : null;
  if (later) later.before(el);
  else parent.append(el);
}

// TURN_ENDS says how a turn that did not complete ended.
const TURN_ENDS = {
  failed: (d) => `The turn failed.${d.error ? ` ${d.error}` : ''}`,
  cancelled: () => 'The turn was cancelled.',
  stopped: () => 'You stopped this turn.',
};

export class Conversation {
  // app: {runUpdated(run), seen(run), approvalsChanged(), isMine(runId), navigate(path)}
  constructor(app, runId) {
    this.app = app;
    this.runId = runId;
    this.run = null;
    this.rendered = new Set(); // message seqs on the page
    this.calls = new Map(); // tool call id -> card parts
    this.firstSeq = 0;
    this.hasOlder = false;
    this.loadingOlder = false;
    this.draft = null; // streamed text not yet committed
    this.settled = new Set(); // turns (by messageSeq) that ended: their late deltas are dropped
    this.resumed = false;
    this.stream = null;
    this.destroyed = false;
    this.observer = null;
    this.branches = null; // GET …/branches, when the run has branches
    this.replySwitchers = new Map(); // user message seq -> its switcher, to move onto its reply
    // Back online: what could not be sent goes, once.
    this.onOnline = () => {
      if (this.composerForm && this.composerForm.retry) this.composerForm.retry();
      this.showOffline(false);
      if (this.stream) this.stream.retryNow();
    };
    window.addEventListener('online', this.onOnline);
    this.onOffline = () => this.showOffline(true);
    window.addEventListener('offline', this.onOffline);
  }

  // reload shows the run again from the start: after its active branch
  // changed (an edit, a regenerate, a switch, here or in another tab).
  async reload() {
    if (this.destroyed || this.reloading) return;
    this.reloading = true;
    if (this.stream) this.stream.stop();
    if (this.observer) this.observer.disconnect();
    if (this.approvalBar) this.approvalBar.destroy();
    Object.assign(this, {
      run: null, rendered: new Set(), calls: new Map(), firstSeq: 0, hasOlder: false, loadingOlder: false,
      draft: null, settled: new Set(), resumed: false, stream: null, observer: null, branches: null,
      replySwitchers: new Map(), title: null, pendingRun: null,
    });
    try {
      await this.mount(this.main);
    } finally {
      this.reloading = false;
    }
  }

  async mount(main) {
    this.main = main;
    this.root = h('section', { class: 'conversation', 'aria-labelledby': 'conversation-title' });
    main.replaceChildren(this.root);
    this.root.append(skeleton('Loading the conversation…', 5, 'conversation'));
    let data;
    try {
      data = await request(path.run(this.runId));
    } catch (err) {
      if (this.destroyed) return;
      const missing = err instanceof APIError && err.status === 404;
      this.root.replaceChildren(
        h('h2', { id: 'conversation-title', tabindex: '-1' }, missing ? 'Session not found' : 'The session could not be loaded'),
        h('p', null, missing ? 'It does not exist, was deleted, or belongs to someone else.' : err.message),
        h('p', null, h('a', { href: '/', class: 'button' }, 'Start a new session')));
      this.root.querySelector('h2').focus();
      return;
    }
    if (this.destroyed) return;
    if (data.run.branches > 0) {
      try {
        this.branches = await request(`${path.run(this.runId)}/branches`);
      } catch {
        this.branches = null; // shown without the switchers
      }
      if (this.destroyed) return;
    }
    const pending = this.pendingRun;
    this.run = pending && new Date(pending.updatedAt) > new Date(data.run.updatedAt) ? { ...data.run, ...pending } : data.run;
    this.build();
    const initial = data.gap ? data.last : [...data.first, ...data.last];
    this.hasOlder = Boolean(data.gap);
    const frag = document.createDocumentFragment();
    for (const ev of initial) this.renderInto(frag, ev);
    this.list.append(frag);
    this.deletedMarks();
    if (data.snapshot) this.mark.place(data.snapshot.version, data.snapshot.toSeq);
    this.continued = data.continuedIn || [];
    this.firstSeq = initial.length ? initial[0].seq : 0;
    this.updateOlder();
    this.applyRun(this.run);
    this.updateActions();
    // A turn already under way has streamed text this page never got.
    this.resumed = Boolean(this.run.working);
    this.scrollToBottom();
    // Where the person goes on: the composer, or the title of a closed run.
    (this.footer.querySelector('textarea') || this.title).focus({ preventScroll: true });
    // Every event after the run's last sequence, once: nothing the window
    // above missed is lost, nothing in it is shown twice.
    this.stream = new RunStream(this.runId, data.run.lastSeq || 0, {
      event: (ev) => this.onEvent(ev),
      delta: (d) => this.onDelta(d),
      status: (run) => {
        if (run.runId !== this.runId) return;
        if (run.deleted) this.deleted();
        else if (typeof run.activeBranch === 'number' && this.run && run.activeBranch !== this.run.activeBranch) this.reload();
        else this.applyRun(run);
      },
      connection: (state) => this.onConnection(state),
      reconnected: () => this.dropDraft(true),
    });
    this.stream.start();
    if (document.visibilityState === 'hidden') this.stream.pause();
    this.observeOlder();
    if (!this.run.working && !isClosed(this.run)) this.lastTurnEnd();
  }

  // lastTurnEnd shows how the latest turn ended, when it failed or was
  // stopped: the note and its Retry, as the page showed them live. Older
  // turns' notes are not read again: Retry is for the latest turn only.
  async lastTurnEnd() {
    const users = this.list.querySelectorAll('article.msg-user[data-seq]');
    const last = users[users.length - 1];
    if (!last) return;
    const seq = Number(last.dataset.seq);
    let page;
    try {
      page = await request(path.events(this.runId, { after: seq - 1 }));
    } catch {
      return; // the note is a courtesy: the conversation stands without it
    }
    const end = (page.events || []).find((ev) => ev.type === 'agent.turn.end' && ev.data && ev.data.messageSeq === seq && this.onActiveLine(ev));
    // Still the latest turn, and not shown meanwhile (the live stream).
    const now = this.list.querySelectorAll('article.msg-user[data-seq]');
    if (this.destroyed || !end || now[now.length - 1] !== last || this.list.querySelector(`.turn-note[data-turn="${seq}"]`)) return;
    const note = this.turnNote(end.data);
    if (note) this.keepBottom(() => this.list.append(note));
  }

  // turnNote is the note of a turn that failed, was cancelled or was
  // stopped (d: the agent.turn.end's data), with Retry where it applies,
  // or null.
  turnNote(d) {
    const text = TURN_ENDS[d.status];
    if (!text) return null;
    // Retry: the same message again, answered anew (a regenerate: the
    // failed reply stays one of the message's versions).
    const retry = d.status !== 'cancelled'
      ? h('button', { type: 'button', class: 'link-button turn-retry', onclick: (e) => this.regenerate(e.currentTarget) }, 'Retry')
      : null;
    return h('p', { class: `turn-note ${d.status}`, role: 'status', 'data-turn': d.messageSeq || '' }, text(d), retry ? ' ' : '', retry);
  }

  // deleted shows that the run was deleted (here or elsewhere).
  deleted() {
    if (this.stream) this.stream.stop();
    if (!this.footer) return;
    this.completeButton.hidden = true;
    this.working.hidden = true;
    this.badge.textContent = 'Deleted';
    this.badge.className = 'badge status-muted';
    this.footer.dataset.closed = 'deleted';
    this.footer.replaceChildren(h('p', { class: 'read-only', role: 'status' }, 'This session was deleted. ', h('a', { href: '/' }, 'Start a new session'), '.'));
  }

  // pause and resume follow the page's visibility (see app.js).
  pause() {
    if (this.stream) this.stream.pause();
  }

  resume() {
    if (this.stream && !this.destroyed) {
      this.dropDraft(true);
      this.stream.resume();
    }
  }

  destroy() {
    this.destroyed = true;
    window.removeEventListener('online', this.onOnline);
    window.removeEventListener('offline', this.onOffline);
    if (this.stream) this.stream.stop();
    if (this.observer) this.observer.disconnect();
    if (this.approvalBar) this.approvalBar.destroy();
  }

  build() {
    this.title = h('h2', { id: 'conversation-title', tabindex: '-1' });
    this.badge = h('span', { class: 'badge' });
    this.connection = h('span', { class: 'connection', role: 'status' });
    this.contextUse = h('span', { class: 'context-use', hidden: true });
    this.completeButton = h('button', { type: 'button', class: 'button', onclick: () => this.confirmComplete() }, 'Complete session');
    this.continueButton = h('button', { type: 'button', class: 'button continue-run', onclick: () => this.confirmContinue() }, 'Continue in a new session');
    this.stopButton = h('button', { type: 'button', class: 'button stop-turn', hidden: true, onclick: () => this.stopTurn() }, 'Stop');
    this.renameButton = h('button', { type: 'button', class: 'button subtle rename-run', onclick: () => this.startRename() }, 'Rename');
    const exporter = (format, label) => {
      const button = h('button', { type: 'button', class: `button subtle export-run export-${format}` }, label);
      button.addEventListener('click', async () => {
        button.disabled = true;
        try {
          await exportRun(this.run, format);
          announce(`Exported as ${format === 'md' ? 'Markdown' : 'JSON'}.`);
        } catch (err) {
          announce(`The session could not be exported: ${err.message}`);
        } finally {
          button.disabled = false;
        }
      });
      return button;
    };
    this.exportButton = exporter('md', 'Export as Markdown');
    this.exportJSONButton = exporter('json', 'Export as JSON');
    this.deleteButton = h('button', { type: 'button', class: 'button subtle delete-run', onclick: () => this.confirmDelete() }, 'Delete');
    // The rarer actions under "More", so that the header stays one line.
    this.moreActions = h('details', { class: 'more-actions' },
      h('summary', { class: 'button subtle' }, 'More'),
      h('div', { class: 'more-actions-list' }, this.continueButton, this.renameButton, this.exportButton, this.exportJSONButton, this.deleteButton));
    this.moreActions.addEventListener('click', (e) => {
      if (e.target.closest('button')) this.moreActions.open = false;
    });
    this.moreActions.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && this.moreActions.open) {
        this.moreActions.open = false;
        this.moreActions.querySelector('summary').focus();
      }
    });
    const header = h('header', { class: 'conversation-head' },
      h('div', { class: 'conversation-title' }, this.title, this.badge, this.contextUse, this.connection),
      h('div', { class: 'conversation-actions' }, this.stopButton, this.completeButton, this.moreActions));

    this.olderButton = h('button', { type: 'button', class: 'button subtle', onclick: () => this.loadOlder() }, 'Load older messages');
    this.olderBar = h('div', { class: 'older' }, this.olderButton);
    this.list = h('div', { class: 'message-list' });
    this.mark = new CompactionMark(this.list);
    this.working = h('div', { class: 'working', hidden: true }, h('span', { class: 'dots', 'aria-hidden': 'true' }), 'Usher is working…');
    this.scroller = h('div', { class: 'messages', role: 'group', tabindex: '0', 'aria-label': 'Messages' }, this.olderBar, this.list, this.working);

    // Above the message box: the approval waiting whose Approve and Deny
    // are out of view.
    this.approvalBar = new ApprovalBar(this.scroller, (id) => this.openApproval(id));
    this.footer = h('div', { class: 'composer-area' });
    this.root.replaceChildren(header, this.scroller, this.approvalBar.el, this.footer);
  }

  // applyRun shows the run's title, status and whether it takes messages.
  applyRun(run) {
    if (!this.title) { // still loading: the load shows the latest
      this.pendingRun = { ...this.pendingRun, ...run };
      return;
    }
    // A run read before events this page has already shown (the answer to
    // a send that comes after the turn's own events) is older than they
    // are: it must not turn the status back.
    if (this.stream && typeof run.lastSeq === 'number' && run.lastSeq < this.stream.after) return;
    const before = this.run;
    this.run = { ...this.run, ...run };
    if (this.modelPicker) this.modelPicker.sync();
    const r = this.run;
    const [label, cls] = runStatus(r);
    this.title.textContent = runTitle(r);
    this.title.title = runTitle(r); // whole, where the header cuts it
    document.title = `${runTitle(r)} · Usher`;
    this.badge.textContent = label;
    this.badge.className = `badge ${cls}`;
    const use = contextUse(r);
    this.contextUse.hidden = !use;
    if (use) {
      [this.contextUse.textContent, this.contextUse.title] = use;
      this.contextUse.classList.toggle('high', use[2]);
    }
    this.completeButton.hidden = isClosed(r);
    this.continueButton.hidden = !r.messageCount || Boolean(r.working) || r.status === 'AwaitingApproval';
    this.stopButton.hidden = isClosed(r) || !(r.working || r.status === 'AwaitingApproval');
    this.working.hidden = !(r.status === 'InProgress' && r.working) || Boolean(this.draft);
    this.root.classList.toggle('busy', Boolean(r.working) || r.status === 'AwaitingApproval');
    if (before && before.status !== r.status) announce(`Session status: ${label}.`);
    if (before && isClosed(before) !== isClosed(r)) this.updateActions();
    this.renderComposer();
    this.app.runUpdated(r);
    this.app.seen(r);
  }

  renderComposer() {
    const closed = isClosed(this.run);
    if (this.footer.dataset.closed === String(closed)) return;
    this.footer.dataset.closed = String(closed);
    if (closed) {
      // A draft is never thrown away: closed elsewhere (another tab, the
      // API), the session keeps what was typed, to copy.
      const typed = this.footer.querySelector('textarea')?.value.trim();
      const draft = typed ? h('div', { class: 'kept-draft' },
        h('p', { class: 'hint' }, 'Your message was not sent; here it is to copy:'),
        h('textarea', { class: 'kept-draft-text', readonly: true, rows: '3', 'aria-label': 'Your unsent message' }, typed)) : '';
      this.footer.replaceChildren(continuedNote(this.continued || []) || '', draft, h('p', { class: 'read-only' },
        `This session is ${this.run.status.toLowerCase()} and read-only. `,
        h('a', { href: '/' }, 'Start a new session'), '.'));
      return;
    }
    // Usher out of reach: the polls back off up to 30 s apart, so the
    // person may ask for the next one now.
    this.offlineText = h('span', { class: 'offline-text' });
    this.offline = h('p', { class: 'offline-banner', role: 'status', hidden: true }, this.offlineText, ' ',
      h('button', { type: 'button', class: 'link-button offline-retry', onclick: () => this.stream && this.stream.retryNow() }, 'Try now'));
    // The model of later turns, changed for this run (PATCH {model}).
    this.modelPicker = modelPicker({
      current: () => (this.run && this.run.metadata && this.run.metadata.model) || '',
      onChange: async (model) => { this.run = { ...this.run, ...(await request(path.run(this.runId), { method: 'PATCH', body: { model } })) }; },
    });
    this.composerForm = composer({
      label: 'Message',
      placeholder: 'Message Usher…',
      submit: async (text, key, attachments) => this.send(text, key, attachments),
      draftKey: `usher.draft.${this.runId}`,
      attach: true,
      extra: this.modelPicker,
    });
    this.footer.replaceChildren(this.offline, this.composerForm);
  }

  onConnection(state) {
    const text = { live: '', reconnecting: 'Reconnecting…', polling: 'Live updates by polling' }[state] || '';
    this.connection.textContent = text;
    this.connection.className = `connection ${state}`;
    this.connection.hidden = !text;
    // Offline: said plainly above the message box; back: what could not
    // be sent goes, once (its Idempotency-Key).
    this.showOffline(state === 'reconnecting');
    if (state !== 'reconnecting' && this.composerForm && this.composerForm.retry) this.composerForm.retry();
  }

  // showOffline shows the banner above the message box while Usher is out
  // of reach (unreachable) or the browser is offline, and says which: the
  // browser knows when it is offline; otherwise it is Usher, or the way to
  // it, that does not answer.
  showOffline(unreachable) {
    if (!this.offline) return;
    const offline = navigator.onLine === false;
    this.offline.hidden = !unreachable && !offline;
    this.offlineText.textContent = `${offline ? 'You are offline.' : 'Usher cannot be reached.'} What you send is kept, and goes as soon as the connection is back.`;
  }

  nearBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < NEAR_BOTTOM;
  }

  scrollToBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  // keepBottom runs fn, keeping the view at the bottom if it was there.
  keepBottom(fn) {
    const stick = this.nearBottom();
    fn();
    if (stick) this.scrollToBottom();
  }

  onEvent(ev) {
    const d = ev.data || {};
    switch (ev.type) {
      case 'message.user':
      case 'message.assistant':
      case 'message.tool': {
        if (!this.onActiveLine(ev)) {
          // A branch this page does not know was made elsewhere.
          if (this.unknownBranch(ev.branch)) this.reload();
          return;
        }
        if (ev.type === 'message.assistant') this.dropDraft(false, ev);
        // Retry is for the latest turn only.
        if (ev.type === 'message.user') for (const b of this.list.querySelectorAll('.turn-retry')) b.remove();
        if (this.rendered.has(ev.seq)) return;
        this.keepBottom(() => this.renderInto(this.list, ev, true));
        this.updateActions();
        this.run.messageCount = (this.run.messageCount || 0) + 1;
        this.app.seen(this.run);
        return;
      }
      case 'message.summary':
        if (this.rendered.has(ev.seq)) return;
        this.keepBottom(() => this.renderInto(this.list, ev, true));
        return;
      case 'agent.context.compacted':
        if (this.onActiveLine(ev)) this.mark.place(d.version, d.toSeq);
        return;
      case 'agent.context.compaction_failed':
        if (this.onActiveLine(ev)) this.keepBottom(() => this.list.append(failedNote(d)));
        return;
      case 'agent.run.continued':
        if (d.runId && !this.continued.includes(d.runId)) this.continued.push(d.runId);
        this.footer.dataset.closed = '';
        this.renderComposer();
        return;
      case 'agent.turn.start':
        this.settled.delete(d.messageSeq);
        this.applyRun({ status: 'InProgress', working: true });
        return;
      case 'agent.turn.pause':
        this.applyRun({ status: 'AwaitingApproval', working: false });
        announce('Usher is waiting for your approval.');
        return;
      case 'agent.branch.switch':
        // Another tab (or client) switched: show the line now active.
        if (d.branch !== this.run.activeBranch) this.reload();
        return;
      case 'agent.turn.end':
        this.settled.add(d.messageSeq);
        refreshUsage();
        this.dropDraft(false);
        // Whatever of this turn the page missed, the next one it sees
        // from its start: its draft begins without "…".
        this.resumed = false;
        this.applyRun({ working: false, status: this.run.status === 'AwaitingApproval' ? 'InProgress' : this.run.status });
        if (this.onActiveLine(ev) && !this.list.querySelector(`.turn-note[data-turn="${d.messageSeq}"]`)) {
          const note = this.turnNote(d);
          if (note) this.keepBottom(() => this.list.append(note));
        }
        return;
      case 'agent.step.restart':
        // The model step is tried again: what it streamed is void, and
        // the retry streams its reply anew.
        if (this.draft && this.draft.messageSeq === d.messageSeq) {
          this.dropDraft(false);
          this.working.hidden = !(this.run.status === 'InProgress' && this.run.working);
        }
        this.resumed = false;
        return;
      default:
    }
  }

  onDelta(d) {
    if (d.runId && d.runId !== this.runId) return;
    // Deltas and events travel apart: a delta can come after its turn's
    // end, whose committed message already shows the text.
    if (this.settled.has(d.messageSeq)) return;
    if (!this.draft || this.draft.messageSeq !== d.messageSeq) {
      this.dropDraft(false);
      // The draft's text is read out by its live region; the rendered copy
      // is neither read nor reachable (its links and Copy buttons are the
      // committed message's to offer).
      const body = h('div', { class: 'msg-body md', 'aria-hidden': 'true', inert: true });
      const live = h('div', { class: 'visually-hidden', 'aria-live': 'polite' });
      const el = h('article', { class: 'msg msg-assistant streaming', 'aria-label': 'Usher is replying' }, body, live);
      this.draft = { messageSeq: d.messageSeq, text: this.resumed ? '… ' : '', el, body, live, frame: 0 };
      this.resumed = false;
      this.working.hidden = true;
      this.keepBottom(() => this.list.append(el));
    }
    const draft = this.draft;
    draft.text += d.text;
    draft.live.append(document.createTextNode(d.text));
    if (!draft.frame) {
      draft.frame = requestAnimationFrame(() => {
        draft.frame = 0;
        if (this.draft !== draft) return;
        this.keepBottom(() => draft.body.replaceChildren(renderMarkdown(draft.text)));
      });
    }
  }

  // dropDraft removes the streamed text: the committed message replaces it,
  // or a reconnect lost part of it (resumed: the next one starts with …).
  dropDraft(resumed, committed) {
    if (this.draft) {
      if (this.draft.frame) cancelAnimationFrame(this.draft.frame);
      this.draft.el.remove();
      this.draft = null;
    } else if (committed && committed.data && committed.data.content && !this.rendered.has(committed.seq)) {
      announce(`Usher: ${summarize(committed.data.content, 300)}`);
    }
    if (resumed) this.resumed = true;
  }

  // renderInto renders a message event into parent (a tool result updates
  // its call's card instead, when that is on the page).
  renderInto(parent, ev, live = false) {
    if (this.rendered.has(ev.seq)) return;
    this.rendered.add(ev.seq);
    const d = ev.data || {};
    if (ev.type === 'message.summary') {
      parent.append(summaryCard(ev));
    } else if (ev.type === 'message.user') {
      const article = h('article', { class: 'msg msg-user', 'aria-label': 'You', 'data-seq': ev.seq });
      // Named for their message: a screen reader's list of buttons
      // tells one message's Edit from another's.
      const about = summarize(d.content || (d.attachments || []).map((a) => a.name).join(', '), 40);
      const edit = h('button', { type: 'button', class: 'link-button msg-edit', 'aria-label': `Edit your message${about ? `: ${about}` : ''}`, onclick: () => this.startEdit(article, ev) }, 'Edit');
      const del = h('button', { type: 'button', class: 'link-button msg-delete', 'aria-label': `Delete your message${about ? `: ${about}` : ''}`, onclick: () => this.confirmDeleteMessage(ev) }, 'Delete');
      // The versions of a regenerated reply show on the reply, once it
      // is on the page; those of an edited message on the message.
      const sw = this.switcher(ev);
      if (sw && sw.onReply) this.replySwitchers.set(ev.seq, sw.el);
      article.append(d.content || !d.attachments ? h('div', { class: 'msg-body plain' }, d.content || '') : '',
        attachmentList(d.attachments) || '',
        h('footer', { class: 'msg-meta' }, sw && sw.el, edit, ' ', del, ' ', timeElement(ev.createdAt)));
      parent.append(article);
      messageCopy(article, d.content);
    } else if (ev.type === 'message.assistant') {
      const body = d.content ? h('div', { class: 'msg-body md' }, renderMarkdown(d.content)) : null;
      const cards = (d.toolCalls || []).map((call) => this.toolCard(call));
      if (!body && !cards.length) return;
      const versions = body ? this.replySwitchers.get(d.messageSeq) : null;
      if (versions) this.replySwitchers.delete(d.messageSeq);
      const reply = h('article', { class: `msg msg-assistant${body ? '' : ' tools-only'}`, 'aria-label': 'Usher', 'data-seq': ev.seq },
        body,
        cards.length ? h('div', { class: 'tool-cards' }, cards) : null,
        h('footer', { class: 'msg-meta' }, versions,
          // The partial reply of a turn you stopped.
          d.stopped ? [h('span', { class: 'badge status-muted stopped-mark' }, 'Stopped'), ' '] : null,
          timeElement(ev.createdAt),
          body ? [' ', h('button', { type: 'button', class: 'link-button msg-delete', 'aria-label': `Delete the reply: ${summarize(d.content, 40)}`, onclick: () => this.confirmDeleteMessage(ev) }, 'Delete')] : null));
      inTurnOrder(parent, d.messageSeq, reply);
      if (body) messageCopy(reply, d.content);
    } else if (ev.type === 'message.tool') {
      let call = this.calls.get(d.toolCallId);
      if (!call) { // its call is not on the page (yet): show the result alone
        const card = this.toolCard({ id: d.toolCallId, name: d.name });
        inTurnOrder(parent, d.messageSeq, h('article', { class: 'msg msg-assistant tools-only', 'aria-label': 'Tool result', 'data-seq': ev.seq },
          h('div', { class: 'tool-cards' }, card)));
        call = this.calls.get(d.toolCallId);
      }
      // A focus in the card (an approval just decided) stays where it is
      // on the screen as the result above it grows.
      const focused = live && call.card.contains(document.activeElement) ? document.activeElement : null;
      const before = focused && focused.getBoundingClientRect().top;
      this.toolResult(call, d, live);
      if (focused && focused.isConnected) this.scroller.scrollTop += focused.getBoundingClientRect().top - before;
    }
  }

  toolCard(call) {
    const badge = h('span', { class: 'badge status-muted' }, 'Waiting for a result');
    const result = h('div', { class: 'tool-result', hidden: true });
    const slot = h('div', { class: 'approval-slot' });
    const argsText = call.arguments === undefined ? '' : prettyValue(call.arguments === null ? null : call.arguments);
    // The model's arguments; while an approval is pending they are hidden:
    // its card shows them, exactly as they will run.
    const args = call.arguments !== undefined
      ? h('div', { class: 'tool-args' }, h('h3', null, 'Arguments'), h('pre', { tabindex: '0' }, h('code', null, argsText)))
      : null;
    const card = h('details', { class: 'tool-card', 'data-call': call.id || '' },
      h('summary', null, h('span', { class: 'tool-label' }, 'Tool'), ' ', h('code', null, call.name || 'unknown'), ' ', badge),
      h('div', { class: 'tool-body' }, args, result, slot));
    const parts = { card, badge, args, result, slot, name: call.name, approvalId: null, reveal: false };
    if (call.id) this.calls.set(call.id, parts);
    return card;
  }

  toolResult(call, d, live) {
    const [label, cls] = TOOL_STATUS[d.status] || [d.isError ? 'Failed' : 'Done', d.isError ? 'status-bad' : 'status-ok'];
    const pending = d.status === 'approval_pending';
    call.badge.textContent = label;
    call.badge.className = `badge ${cls}`;
    call.card.dataset.status = d.status || '';
    call.result.hidden = false;
    if (call.args) call.args.hidden = pending && Boolean(d.approval && d.approval.id);
    // A pending result's text is for the model (where to send the user,
    // to retry the call): the person is shown what it means instead.
    call.result.replaceChildren(...(pending
      ? [h('p', { class: 'tool-waiting' }, 'Waiting for your decision.')]
      : [h('h3', null, 'Result'), resultBlock(d.content)]));
    if (d.approval && d.approval.id) {
      call.approvalId = d.approval.id;
      if (pending) {
        call.card.open = true;
        // Approve and Deny are brought into view once the card is there.
        call.reveal = true;
        if (live) announce(`Approval needed: ${d.name || call.name}.`);
      }
      this.showApproval(call);
    } else if (call.approvalId) {
      this.showApproval(call); // a decided call's final result: show the approval's outcome
    }
  }

  async showApproval(call) {
    const id = call.approvalId;
    // Focus in the card (a decision just made) stays on the card.
    const focusIn = () => call.slot.contains(document.activeElement);
    const place = (item, card, hadFocus) => {
      call.slot.replaceChildren(card);
      if (item.view.status === 'pending') this.approvalBar.set(item, card);
      else this.approvalBar.remove(item.view.id);
      if (hadFocus) card.querySelector('.approval-title').focus({ preventScroll: true });
    };
    // Until the call's next result, its pending one says where it stands.
    const standing = (view) => {
      const pending = view.status === 'pending';
      if (call.args) call.args.hidden = pending;
      const waiting = call.result.querySelector('.tool-waiting');
      if (!waiting) return;
      if (!pending) waiting.textContent = view.status === 'approved' ? 'Approved: the call runs now.' : `${approvalStatus(view.status)[0]}.`;
      else if (!(view.can_approve || view.can_deny)) waiting.textContent = 'Waiting for an approver\u2019s decision.';
    };
    try {
      const item = await loadApproval(id);
      if (this.destroyed || call.approvalId !== id) return;
      // The same approval as shown (a refresh that changed nothing): the
      // card stays, and with it the focus and a reason being typed.
      const shown = JSON.stringify(item.view);
      if (call.shown === shown && call.slot.firstElementChild) {
        standing(item.view);
        return;
      }
      call.shown = shown;
      const hadFocus = focusIn();
      const pending = item.view.status === 'pending';
      standing(item.view);
      place(item, approvalCard(item, {
        level: 3,
        onDecided: (decided) => {
          call.shown = JSON.stringify(decided.view);
          standing(decided.view);
          place(decided, approvalCard(decided, { level: 3 }), true);
          this.app.approvalsChanged();
        },
      }), hadFocus);
      if (pending && call.reveal) {
        // Scrolled into view: all of the card when it fits, else down to
        // its Approve and Deny buttons.
        call.reveal = false;
        const card = call.slot.firstElementChild;
        this.bringIntoView(card, card.querySelector('form.decision') || card);
      }
    } catch (err) {
      if (this.destroyed) return;
      this.approvalBar.remove(id);
      if (call.args) call.args.hidden = false;
      call.slot.replaceChildren(h('p', { class: 'hint' },
        err instanceof APIError && err.status === 404 ? 'This approval is not yours to see.' : `The approval could not be loaded: ${err.message}`,
        ' ', h('a', { href: `/approvals/${encodeURIComponent(id)}` }, 'Open it')));
    }
  }

  // bringIntoView scrolls the messages so that all of card shows when it
  // fits, else part of it (its buttons, say).
  bringIntoView(card, part) {
    const s = this.scroller;
    const view = s.getBoundingClientRect();
    const box = card.getBoundingClientRect();
    const target = box.height <= view.height ? box : part.getBoundingClientRect();
    if (target.bottom > view.bottom) s.scrollTop += target.bottom - view.bottom + 8;
    else if (target.top < view.top) s.scrollTop -= view.top - target.top + 8;
  }

  // openApproval brings the card of approval id into view, from its
  // start (the call, why it waits, its arguments), with the focus on it:
  // the approval bar's Open.
  openApproval(id) {
    const call = [...this.calls.values()].find((c) => c.approvalId === id);
    const card = call && call.slot.querySelector(`[data-approval="${CSS.escape(id)}"]`);
    if (!card) return;
    call.card.open = true;
    const s = this.scroller;
    const top = card.getBoundingClientRect().top - s.getBoundingClientRect().top;
    if (card.offsetHeight <= s.clientHeight) this.bringIntoView(card, card);
    else s.scrollTop += top - 8; // too tall to show whole: from its start
    card.querySelector('.approval-title').focus({ preventScroll: true });
  }

  // refreshApproval reloads an inline approval card after a decision made
  // elsewhere (the feed says so).
  refreshApproval(id) {
    for (const call of this.calls.values()) {
      if (call.approvalId === id) this.showApproval(call);
    }
  }

  updateOlder() {
    this.olderBar.hidden = !this.hasOlder;
  }

  observeOlder() {
    if (typeof IntersectionObserver === 'undefined') return;
    this.observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.loadOlder();
    }, { root: this.scroller, rootMargin: '200px 0px 0px 0px' });
    this.observer.observe(this.olderBar);
  }

  async loadOlder() {
    if (this.loadingOlder || !this.hasOlder || !this.firstSeq) return;
    this.loadingOlder = true;
    this.olderButton.disabled = true;
    this.olderButton.textContent = 'Loading older messages…';
    try {
      const page = await request(path.messages(this.runId, { before: this.firstSeq, take: PAGE }));
      if (this.destroyed) return;
      const msgs = page.messages || [];
      const frag = document.createDocumentFragment();
      for (const ev of msgs) this.renderInto(frag, ev);
      const s = this.scroller;
      const fromBottom = s.scrollHeight - s.scrollTop;
      this.list.prepend(frag);
      this.mark.again();
      s.scrollTop = s.scrollHeight - fromBottom; // the reader's place stays put
      if (msgs.length) this.firstSeq = msgs[0].seq;
      this.hasOlder = Boolean(page.hasMore) && msgs.length > 0;
      if (msgs.length) announce(`Loaded ${msgs.length} older messages.`);
    } catch (err) {
      announce(`Older messages could not be loaded: ${err.message}`);
    } finally {
      this.loadingOlder = false;
      this.olderButton.disabled = false;
      this.olderButton.textContent = 'Load older messages';
      this.updateOlder();
    }
  }

  // onActiveLine reports whether the event is on the active branch's line
  // (see GET …/branches: each event carries its branch).
  // Without the listing (it could not be read), new events are those of
  // the active branch.
  onActiveLine(ev) {
    const b = ev.branch || 0;
    if (!this.branches) return b === ((this.run && this.run.activeBranch) || 0);
    const active = this.branches.branches.find((x) => x.id === this.branches.activeBranch);
    return Boolean(active && active.line.some((seg) => seg.branch === b && (seg.fromSeq == null || ev.seq >= seg.fromSeq)
      && (seg.untilSeq == null || ev.seq < seg.untilSeq)));
  }

  // unknownBranch reports an event of a branch made since the page read
  // the run's.
  unknownBranch(b) {
    if (this.branches) return !this.branches.branches.some((x) => x.id === b);
    return Boolean(this.run && !this.run.branches && b);
  }

  // switcher is the "< 2/3 >" of a user message with alternatives, or
  // null: {el, onReply}, onReply when every alternative but the first was
  // made by a regenerate (the same message, another reply).
  switcher(ev) {
    if (!this.branches) return null;
    for (const fork of this.branches.forks) {
      const at = fork.alternatives.findIndex((a) => a.branch === (ev.branch || 0) && a.messageSeq === ev.seq);
      if (at < 0) continue;
      const n = fork.alternatives.length;
      const go = (i) => this.switchTo(fork.alternatives[i].switchTo);
      const prev = h('button', { type: 'button', class: 'link-button branch-prev', 'aria-label': 'Previous version', disabled: at === 0, onclick: () => go(at - 1) }, '‹');
      const next = h('button', { type: 'button', class: 'link-button branch-next', 'aria-label': 'Next version', disabled: at === n - 1, onclick: () => go(at + 1) }, '›');
      const onReply = fork.alternatives.slice(1).every((a) => a.kind === 'regenerate');
      const el = h('span', { class: 'branch-switch', role: 'group', 'aria-label': onReply ? 'Versions of this reply' : 'Versions of this message' },
        prev, h('span', { class: 'branch-pos', 'aria-label': `Version ${at + 1} of ${n}` }, `${at + 1}/${n}`), next);
      return { el, onReply };
    }
    return null;
  }

  // updateActions offers regenerate on the last reply, and edit on the
  // user's messages, while the run takes messages.
  updateActions() {
    if (!this.list) return;
    for (const b of this.list.querySelectorAll('.msg-regenerate')) b.remove();
    const closed = !this.run || isClosed(this.run);
    this.root.classList.toggle('closed', closed);
    if (closed) return;
    const items = this.list.querySelectorAll('article.msg[data-seq]');
    const last = items[items.length - 1];
    if (!last || !last.classList.contains('msg-assistant') || last.classList.contains('tools-only')) return;
    const meta = last.querySelector('.msg-meta');
    if (!meta) return;
    meta.append(' ', h('button', { type: 'button', class: 'link-button msg-regenerate', 'aria-label': 'Regenerate the last reply', onclick: (e) => this.regenerate(e.currentTarget) }, 'Regenerate'));
  }

  // branchChange runs a change of the active branch, then shows the run
  // again; a refusal (the run is busy, say) is announced and shown by
  // the control.
  async branchChange(fn, errorSlot) {
    try {
      await fn();
    } catch (err) {
      const msg = err.message || 'That did not work.';
      announce(msg);
      if (errorSlot) errorSlot.textContent = msg;
      return false;
    }
    if (!this.destroyed) await this.reload();
    return true;
  }

  switchTo(branch) {
    return this.branchChange(() => request(`${path.run(this.runId)}/branch`, { method: 'PUT', body: { branch } }), this.actionError());
  }

  regenerate(button) {
    button.disabled = true;
    return this.branchChange(() => request(`${path.run(this.runId)}/regenerate`, { method: 'POST' }), this.actionError())
      .finally(() => { button.disabled = false; });
  }

  // actionError is where a refused branch change is shown: above the
  // composer.
  actionError() {
    let el = this.footer && this.footer.querySelector('.branch-error');
    if (!el && this.footer) {
      el = h('p', { class: 'form-error branch-error', role: 'alert' });
      this.footer.prepend(el);
    }
    if (el) el.textContent = '';
    return el;
  }

  // confirmDeleteMessage asks before deleting a message (with its answer, for
  // the user's own): a new branch without it, the old one kept.
  confirmDeleteMessage(ev) {
    const mine = ev.type === 'message.user';
    confirmDialog({
      title: mine ? 'Delete this message?' : 'Delete this reply?',
      body: `The conversation goes on without it${mine ? ' and its answer' : ''}. The earlier version stays available: switch back to it with the ‹ › version switcher.`,
      confirm: 'Delete',
      onConfirm: async () => {
        await request(`${path.run(this.runId)}/messages/${ev.seq}`, { method: 'DELETE' });
        if (!this.destroyed) await this.reload();
      },
    });
  }

  // deletedMarks shows where the active line left out a deleted message:
  // a mark with its version switcher, before the first message after it.
  deletedMarks() {
    if (!this.branches) return;
    for (const fork of this.branches.forks) {
      const alt = fork.alternatives.find((a) => a.active && a.kind === 'delete');
      const sw = alt && this.switcher({ branch: alt.branch, seq: alt.messageSeq });
      if (!sw) continue;
      const mark = h('p', { class: 'deleted-note' }, 'Message deleted ', sw.el);
      const after = [...this.list.querySelectorAll('article.msg[data-seq]')].find((a) => Number(a.dataset.seq) > fork.forkSeq);
      if (after) after.before(mark);
      else this.list.append(mark);
    }
  }

  // startEdit turns a user message into a form to edit it: its text, and
  // its attachments, kept, removed or added (by the button, paste or
  // drop).
  startEdit(article, ev) {
    if (article.querySelector('form')) return;
    const body = article.querySelector('.msg-body');
    const meta = article.querySelector('.msg-meta');
    const sent = article.querySelector('.attachments');
    const inputId = uniqueId('edit');
    const input = h('textarea', { id: inputId, rows: '3' });
    input.value = (ev.data && ev.data.content) || '';
    const error = h('p', { class: 'form-error', role: 'alert' });
    const save = h('button', { type: 'submit', class: 'button primary' }, 'Save and send');
    const cancel = h('button', { type: 'button', class: 'button' }, 'Cancel');
    const form = h('form', { class: 'edit-form' });
    const tray = new AttachmentTray({ input, zone: form, onChange: () => { save.disabled = tray.busy(); } });
    tray.keep(ev.data && ev.data.attachments);
    form.append(
      h('label', { for: inputId, class: 'visually-hidden' }, 'Edit your message'),
      input, tray.list, tray.error, error,
      h('div', { class: 'actions' }, tray.button, tray.file, h('span', { class: 'spacer' }), cancel, save));
    const shown = [body, meta, sent].filter(Boolean);
    const done = () => {
      form.remove();
      for (const el of shown) el.hidden = false;
    };
    cancel.addEventListener('click', () => {
      done();
      article.querySelector('.msg-edit').focus();
    });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      if (tray.busy()) return;
      if (!input.value.trim() && !tray.items.length) {
        error.textContent = 'Write a message or attach a file.';
        return;
      }
      save.disabled = true;
      const edit = { content: input.value, attachments: tray.ids() };
      const ok = await this.branchChange(() => request(`${path.run(this.runId)}/messages/${ev.seq}/edit`, { method: 'POST', body: edit }), error);
      if (!ok) save.disabled = false;
    });
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') cancel.click();
    });
    for (const el of shown) el.hidden = true;
    article.append(form);
    input.focus();
  }

  async send(text, key, attachments = []) {
    const body = attachments.length ? { content: text, attachments: attachments.map((a) => a.id) } : { content: text };
    const res = await request(`${path.run(this.runId)}/messages`, { method: 'POST', body, headers: { 'Idempotency-Key': key } });
    if (this.destroyed) return;
    if (!this.rendered.has(res.seq)) {
      const data = attachments.length ? { content: text, attachments } : { content: text };
      this.keepBottom(() => this.renderInto(this.list, { seq: res.seq, type: 'message.user', createdAt: new Date().toISOString(), data }));
    }
    this.scrollToBottom();
    if (res.run) this.applyRun(res.run);
  }

  async stopTurn() {
    this.stopButton.disabled = true;
    try {
      const run = await request(`${path.run(this.runId)}/stop`, { method: 'POST' });
      this.dropDraft(false);
      this.applyRun(run);
    } catch (err) {
      // Nothing left to stop: the turn ended meanwhile.
      if (!(err instanceof APIError && err.code === 'nothing_to_stop')) announce(`The turn could not be stopped: ${err.message}`);
    } finally {
      this.stopButton.disabled = false;
    }
  }

  // startRename turns the title into a field: Enter saves, Escape keeps
  // the title.
  startRename() {
    if (this.renameForm) return;
    const input = h('input', { type: 'text', class: 'rename-input', maxlength: '200', 'aria-label': 'Session title', required: true });
    input.value = runTitle(this.run);
    const error = h('p', { class: 'form-error', role: 'alert' });
    const form = h('form', { class: 'rename-form' }, input,
      h('button', { type: 'submit', class: 'button primary' }, 'Save'),
      h('button', { type: 'button', class: 'button', onclick: () => done() }, 'Cancel'), error);
    const done = () => {
      form.remove();
      this.renameForm = null;
      this.title.hidden = false;
      this.renameButton.focus();
    };
    input.addEventListener('keydown', (e) => { if (e.key === 'Escape') { e.preventDefault(); done(); } });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const title = input.value.trim();
      if (!title) return;
      try {
        const run = await request(path.run(this.runId), { method: 'PATCH', body: { title } });
        this.applyRun(run);
        done();
        announce(`Renamed to ${runTitle(run)}.`);
      } catch (err) {
        error.textContent = err.message;
      }
    });
    this.renameForm = form;
    this.title.hidden = true;
    this.title.after(form);
    input.focus();
    input.select();
  }

  confirmDelete() {
    confirmDialog({
      title: 'Delete this session?',
      body: `It disappears from your sessions and can no longer be opened. A turn still running is ended. ${afterDeletion()}`,
      confirm: 'Delete session',
      onConfirm: async () => {
        await request(path.run(this.runId), { method: 'DELETE' });
        this.app.navigate('/');
      },
    });
  }

  confirmContinue() {
    confirmDialog({
      title: 'Continue in a new session?',
      body: 'Usher summarises this conversation and opens a new session that starts from the summary, where you carry on. '
        + 'This session is completed and stays readable, every message in it.',
      confirm: 'Summarise and continue',
      onConfirm: async () => {
        const child = await request(`${path.run(this.runId)}/compact`, { method: 'POST', body: {} });
        this.app.navigate(`/runs/${encodeURIComponent(child.runId)}`);
      },
    });
  }

  confirmComplete() {
    confirmDialog({
      title: 'Complete this session?',
      body: 'A completed session is read-only: you can still read it, but it takes no more messages. A turn still running is ended.',
      confirm: 'Complete session',
      onConfirm: async () => {
        const run = await request(`${path.run(this.runId)}/complete`, { method: 'POST' });
        this.applyRun(run);
      },
    });
  }
}

// composer is a message form: Enter sends, Shift+Enter starts a new line.
// submit(text, key) may throw an error to show; the text is kept then.
// key is the message's Idempotency-Key: the same for every attempt to
// send the same text, so that a retry is never a second message. With
// draftKey, what is typed is kept in this browser (localStorage) until it
// is sent, across reloads. The form's retry() sends again a message whose
// last attempt could not reach Usher: call it when the connection is back.
// extra, when given, is shown beside the hint (the model picker). With
// attach, files may be attached by a button, by paste and by drop
// (attachments.js); submit gets them as its third argument, and a message
// of attachments alone may have no text.
export function composer({ label, placeholder, submit, autofocus = false, draftKey = '', extra = null, attach = false }) {
  const inputId = uniqueId('composer');
  const hintId = uniqueId('composer-hint');
  const input = h('textarea', { id: inputId, rows: '2', placeholder, 'aria-describedby': hintId, autofocus, required: true });
  const button = h('button', { type: 'submit', class: 'button primary' }, 'Send');
  const error = h('p', { class: 'form-error', role: 'alert' });
  const form = h('form', { class: 'composer' });
  const tray = attach ? new AttachmentTray({ input, zone: form, onChange: () => { input.required = !tray.items.length; } }) : null;
  form.append(h('label', { for: inputId, class: 'visually-hidden' }, label),
    tray && tray.list,
    h('div', { class: 'composer-row' }, tray && tray.button, tray && tray.file, input, button),
    h('div', { class: 'composer-meta' }, extra, h('p', { id: hintId, class: 'hint' },
      attach ? `${sendHint()} Paste or drop files to attach them.` : sendHint())),
    usageNote(),
    error,
    tray && tray.error);
  const store = {
    get: () => { try { return draftKey ? localStorage.getItem(draftKey) || '' : ''; } catch { return ''; } },
    set: (v) => { try { if (draftKey) { if (v) localStorage.setItem(draftKey, v); else localStorage.removeItem(draftKey); } } catch { /* private mode */ } },
  };
  input.value = store.get();
  input.addEventListener('input', () => store.set(input.value));
  let busy = false;
  let key = '';
  let keyText = null;
  let keySig = '';
  let unsent = false; // the last attempt could not reach Usher
  const go = async () => {
    let text = input.value;
    const attached = tray ? tray.items.slice() : [];
    if (busy || (!text.trim() && !attached.length)) return;
    if (tray && tray.busy()) {
      error.textContent = 'Wait until the files are uploaded, then send.';
      return;
    }
    // The same message again (whitespace aside): the same text and key,
    // so that Usher stores it once.
    const sig = attached.map((a) => a.id).join(',');
    if (keyText !== null && text.trim() === keyText.trim() && sig === keySig) {
      text = keyText;
    } else {
      key = newKey();
      keyText = text;
      keySig = sig;
    }
    busy = true;
    button.disabled = true;
    error.textContent = '';
    try {
      await submit(text, key, attached);
      unsent = false;
      keyText = null;
      if (tray) tray.sent();
      // Cleared unless more was typed while it went.
      if (input.value.trim() === text.trim()) {
        input.value = '';
        store.set('');
      }
    } catch (err) {
      unsent = err instanceof APIError && err.code === 'network';
      if (err instanceof APIError && err.code === 'token_limit_reached') refreshUsage();
      error.textContent = err instanceof APIError && err.code === 'too_many_active_runs'
        ? 'You have as many sessions going as you may at once: set one aside or complete one to start another.'
        : unsent
          ? 'Not sent: Usher could not be reached. Your message is kept here, and goes as soon as the connection is back.'
          : err.message || 'The message could not be sent.';
    } finally {
      busy = false;
      button.disabled = false;
      if (document.activeElement === document.body) input.focus();
    }
  };
  form.retry = () => {
    if (unsent) go();
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    go();
  });
  input.addEventListener('keydown', (e) => {
    if (sends(e)) {
      e.preventDefault();
      go();
    }
  });
  return form;
}

// confirmDialog asks before something that cannot be undone, in a modal
// <dialog> (focus is kept inside; Escape cancels).
export function confirmDialog({ title, body, confirm, onConfirm }) {
  modalForm({ title, body: h('p', null, body), confirm, onSubmit: onConfirm });
}
