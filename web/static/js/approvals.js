// Approval cards: the exact call a person is asked to allow — tool, its
// server, the canonical arguments byte for byte, why the policy asks, and
// the ids that bind it — with Approve and Deny.

import { h, announce, timeElement, uniqueId } from './dom.js';
import { request, path, APIError } from './api.js';
import { rawAt, pretty, readable } from './json.js';

const STATUS = {
  pending: ['Waiting for a decision', 'status-awaiting'],
  approved: ['Approved', 'status-ok'],
  denied: ['Denied', 'status-bad'],
  expired: ['Expired', 'status-muted'],
  consumed: ['Approved and used', 'status-ok'],
  revoked: ['Revoked: the tool changed', 'status-muted'],
  withdrawn: ['Withdrawn: the turn was stopped or the session closed', 'status-muted'],
};

export function approvalStatus(status) {
  return STATUS[status] || [status, 'status-muted'];
}

// loadApproval fetches one approval with the exact text of its arguments.
export async function loadApproval(id) {
  const { data, text } = await request(path.approval(id), { raw: true });
  return { view: data, args: rawAt(text, ['arguments']) };
}

// loadApprovals fetches the open approvals, each with its exact arguments.
export async function loadApprovals() {
  const { data, text } = await request(path.approvals(), { raw: true });
  const list = (data && data.approvals) || [];
  return list.map((view, i) => ({ view, args: rawAt(text, ['approvals', i, 'arguments']) }));
}

// The history of recent decisions comes from the server (GET
// /api/approvals?state=decided): the approvals no longer pending that the
// person requested or may see as an approver, newest first, a page at a
// time.
const PAGE = 20;
let owner = '';

// rememberApprovalsOf names the signed-in person: their own decisions
// show as "by you".
export function rememberApprovalsOf(personId) {
  owner = personId || '';
  try {
    // What an earlier version kept in this browser: the server has it now.
    if (owner) localStorage.removeItem(`usher.approvals.${owner}`);
  } catch {
    // Storage refused: nothing to tidy.
  }
}

// loadDecided fetches a page of decided approvals, each with its exact
// arguments, and the cursor of the next page ('' for none).
async function loadDecided(cursor) {
  const query = { state: 'decided', limit: String(PAGE) };
  if (cursor) query.cursor = cursor;
  const { data, text } = await request(`${path.approvals()}?${new URLSearchParams(query)}`, { raw: true });
  const list = (data && data.approvals) || [];
  return {
    items: list.map((view, i) => ({ view, args: rawAt(text, ['approvals', i, 'arguments']) })),
    next: (data && data.next_cursor) || '',
  };
}

// approvalHistory is the inbox's "Recent decisions": the decided
// approvals the person may see, most recently ended first, each folded to
// its outcome, with "Show older" for the next page. options:
// runLink(runId) (a node or null).
export function approvalHistory(options = {}) {
  const list = h('div', { class: 'approval-list history-list' }, h('p', { class: 'loading' }, 'Loading recent decisions…'));
  const older = h('button', { type: 'button', class: 'button', hidden: true }, 'Show older decisions');
  const section = h('section', { class: 'approval-history', 'aria-labelledby': 'history-title' },
    h('h3', { id: 'history-title' }, 'Recent decisions'),
    h('p', { class: 'hint' }, 'Requests you made, and those you may decide, once decided, expired or revoked — newest first.'),
    list, older);
  let generation = 0; // the latest reload shows; an earlier one finishing late does not
  let focusOn = ''; // an approval whose card takes the focus once shown
  let shownItems = []; // what the list shows, pages included
  let next = '';
  const card = (item) => approvalCard(item, { level: 4, runLink: options.runLink ? options.runLink(item.view.run_id) : null });
  const render = (items) => {
    // The same decisions: the cards stay as they are (a Details opened).
    const shown = items.map((item) => `${item.view.id}:${item.view.status}`).join(' ');
    // The focus stays on the card it was on.
    const at = list.contains(document.activeElement) ? document.activeElement.closest('[data-approval]') : null;
    if (!items.length || list.dataset.shown !== shown) {
      list.dataset.shown = shown;
      list.replaceChildren(...(items.length ? items.map(card) : [h('p', { class: 'empty-state' }, 'No decisions yet.')]));
    } else if (!focusOn) {
      return;
    }
    const want = focusOn || (at && at.dataset.approval);
    const again = want && list.querySelector(`[data-approval="${CSS.escape(want)}"] .approval-title`);
    if (again) again.focus({ preventScroll: !focusOn });
    focusOn = '';
  };
  // reload reads the newest page again (keeping as many older ones as
  // shown); focus: the id of an approval just decided, whose card then
  // takes the focus.
  section.reload = async ({ focus } = {}) => {
    if (focus) focusOn = focus;
    generation += 1;
    const mine = generation;
    let page;
    try {
      page = await loadDecided('');
    } catch (err) {
      if (mine === generation && !shownItems.length) {
        list.replaceChildren(h('p', { class: 'form-error' }, `Recent decisions could not be loaded: ${err.message}`));
      }
      return;
    }
    if (mine !== generation) return;
    // Older pages already shown stay, after the newest one: what is not
    // in it is older than all of it (the list is in the order of an end
    // that never changes).
    const ids = new Set(page.items.map((item) => item.view.id));
    const kept = shownItems.length > page.items.length ? shownItems.filter((item) => !ids.has(item.view.id)) : [];
    if (!kept.length) next = page.next;
    shownItems = [...page.items, ...kept];
    older.hidden = !next;
    render(shownItems);
  };
  older.addEventListener('click', async () => {
    if (!next) return;
    older.disabled = true;
    const mine = generation;
    try {
      const page = await loadDecided(next);
      if (mine !== generation) return;
      const ids = new Set(shownItems.map((item) => item.view.id));
      const fresh = page.items.filter((item) => !ids.has(item.view.id));
      shownItems = [...shownItems, ...fresh];
      next = page.next;
      older.hidden = !next;
      render(shownItems);
      // The focus moves to the first of the older ones (the button may
      // be gone).
      const first = fresh.length && list.querySelector(`[data-approval="${CSS.escape(fresh[0].view.id)}"] .approval-title`);
      if (first) first.focus();
    } catch (err) {
      announce(`Older decisions could not be loaded: ${err.message}`);
    } finally {
      older.disabled = false;
    }
  });
  section.reload();
  return section;
}

function fact(term, ...value) {
  return [h('dt', null, term), h('dd', null, ...value)];
}

function code(text) {
  return h('code', null, text);
}

// How a card names what its approval allows, by the approval's action: a
// tool call, a resource read, a prompt get or a completion.
const ACTIONS = {
  call_tool: ['Allow ', 'Call to ', 'Tool'],
  read_resource: ['Allow reading ', 'Read of ', 'Resource'],
  get_prompt: ['Allow the prompt ', 'Prompt ', 'Prompt'],
  complete: ['Allow completing ', 'Completion of ', 'Completion of'],
};
const actionOf = (view) => ACTIONS[view.action] ?? ACTIONS.call_tool;
// allowText is how a pending approval's question begins ("Allow reading ").
export const allowText = (view) => actionOf(view)[0];
const doneText = (view) => actionOf(view)[1];
const termOf = (view) => actionOf(view)[2];

// plainReason is the policy's reason in a person's words: the rules'
// own reasons, without the "permit "id" matched (outcome approve): " the
// policy prefixes them with (the rule ids are under Policy detail).
function plainReason(reason) {
  const plain = (reason || '').replace(/(?:permit|forbid) "[^"]*" matched \(outcome \w+\)(?:: )?/g, '').trim();
  return plain || 'Your organisation’s policy asks a person to decide this call.';
}

// approvalCard renders one approval. options: level (heading level, 2 to
// 4; its subheadings are one below), onDecided(view) after a decision, runLink (a node linking to its
// session, or null), open (a decided approval's details shown unfolded).
export function approvalCard(item, options = {}) {
  const { view } = item;
  const level = options.level || 3;
  const titleId = uniqueId('approval-title');
  const [statusText, statusClass] = approvalStatus(view.status);
  const card = h('article', { class: `approval-card ${view.status === 'pending' ? 'is-pending' : ''}`, 'aria-labelledby': titleId, 'data-approval': view.id });

  card.append(h('div', { class: 'approval-head' },
    h(`h${level}`, { id: titleId, class: 'approval-title', tabindex: '-1' }, view.status === 'pending' ? allowText(view) : doneText(view), code(view.name ?? view.tool), view.status === 'pending' ? '?' : ''),
    h('span', { class: `badge ${statusClass}` }, statusText)));

  // A decided approval is folded to its outcome; its details open on
  // demand (the call itself is in the tool card, or the inbox's list).
  const folded = view.status !== 'pending';
  if (folded) card.classList.add('is-decided');
  if (folded) {
    // Which call it was, in a line: the arguments (in full below).
    const brief = readable(item.args ?? JSON.stringify(view.arguments));
    card.append(h('p', { class: 'approval-brief' }, code(brief.length > 160 ? `${brief.slice(0, 159)}…` : brief),
      options.runLink ? [' in ', options.runLink.cloneNode(true)] : null));
  }
  if (folded && (view.decided_by || view.decision_reason || view.ended_at)) card.append(decisionNote(view));
  const body = folded ? h('div', { class: 'approval-body' }) : card;
  if (folded) card.append(h('details', { class: 'approval-more', open: Boolean(options.open) }, h('summary', null, 'Details: the arguments, the policy, the ids'), body));
  // A pending request shows why in a line and the call in full; what the
  // policy matched, when and the ids are folded below it.
  if (!folded) card.append(h('p', { class: 'approval-reason' }, plainReason(view.reason)));
  const policy = folded ? body : h('div', { class: 'approval-body' });

  const args = pretty(readable(item.args ?? JSON.stringify(view.arguments)));
  const argsId = uniqueId('approval-args');
  const argsBlock = [h(`h${Math.min(level + 1, 6)}`, { id: argsId, class: 'approval-subhead' }, 'Arguments, exactly as they will run'),
    h('pre', { class: 'arguments', tabindex: '0', 'aria-labelledby': argsId }, h('code', null, args))];
  if (!folded) {
    card.append(...argsBlock);
    card.append(h('details', { class: 'approval-more approval-policy' }, h('summary', null, 'Policy detail: the rule, the server, the ids'), policy));
  }
  policy.append(h('dl', { class: 'facts' },
    fact(termOf(view), code(view.name ?? view.tool)),
    fact('Server', view.server ? code(view.server) : 'Usher (built-in)'),
    fact('Why a person must decide', view.reason || 'The policy holds this call for a decision.'),
    fact('Policy', view.policy_ids && view.policy_ids.length ? view.policy_ids.map((p, i) => [i ? ', ' : '', code(p)]) : 'no matching rule (held by default)'),
    fact('Requested', timeElement(view.created_at), view.client_id ? [' by ', code(view.client_id)] : ''),
    view.status === 'pending' ? fact('Expires', timeElement(view.expires_at)) : null,
    options.runLink ? fact('Session', options.runLink) : null));
  if (folded) body.append(...argsBlock);

  policy.append(h('details', { class: 'approval-ids' },
    h('summary', null, 'Ids and hashes'),
    h('dl', { class: 'facts mono' },
      fact('Approval', code(view.id)),
      view.run_id ? fact('Run', code(view.run_id)) : null,
      fact('Requested by', code(view.requested_by)),
      fact('Arguments (SHA-256 of canonical JSON)', code(view.arguments_hash)),
      fact('Tool definition', code(view.definition_hash)),
      fact('Policy', code(view.policy_hash)),
      view.approvers && view.approvers.length ? fact('Approver groups', view.approvers.map((g, i) => [i ? ', ' : '', code(g)])) : null)));

  if (view.status === 'pending' && (view.can_approve || view.can_deny)) {
    const form = decisionForm(view, options);
    // The card's decision, for the pinned approval bar: decide('approve'
    // or 'deny') as its buttons do.
    card.decide = form.decide;
    card.append(form);
  } else if (view.status === 'pending') {
    card.append(h('p', { class: 'hint' }, 'Another approver must decide this request.'));
  }
  return card;
}

// who names the person who decided: "you", or their principal id.
function who(id) {
  return id === owner ? 'you' : code(id);
}

function decisionNote(view) {
  if (!view.decided_by) {
    // Ended without a decision: expired, or revoked as the tool changed.
    return h('p', { class: 'decision-note' },
      view.status === 'revoked' ? 'Revoked' : 'Expired',
      view.ended_at ? [' ', timeElement(view.ended_at)] : '', ', undecided.');
  }
  const decided = { denied: 'Denied', withdrawn: 'Withdrawn' }[view.status] || 'Approved';
  return h('p', { class: 'decision-note' },
    decided,
    view.decided_at ? [' ', timeElement(view.decided_at)] : '',
    ' by ', who(view.decided_by),
    view.decision_reason ? [': ', h('q', null, view.decision_reason)] : '.');
}

function decisionForm(view, options) {
  const reasonId = uniqueId('reason');
  const errorEl = h('p', { class: 'form-error', role: 'alert' });
  const reason = h('textarea', { id: reasonId, name: 'reason', rows: '2', maxlength: '2000', autocomplete: 'off' });
  const approve = view.can_approve ? h('button', { type: 'submit', class: 'button primary', value: 'approve' }, 'Approve') : null;
  const deny = view.can_deny ? h('button', { type: 'submit', class: 'button danger', value: 'deny' }, 'Deny') : null;
  const form = h('form', { class: 'decision' },
    h('label', { for: reasonId }, 'Reason ', h('span', { class: 'optional' }, '(optional)')),
    reason,
    h('div', { class: 'actions' }, approve, deny),
    errorEl);
  if (view.can_deny && !view.can_approve) {
    form.insertBefore(h('p', { class: 'hint' }, 'You asked for this call, so another approver must allow it; you may deny it.'), form.firstChild);
  }
  // decide sends the decision with the reason typed here: the form's
  // buttons and the pinned approval bar (conversation.js) both decide
  // through it, once at a time. It resolves to { ok } and, on a refusal,
  // the error it shows.
  let busy = false;
  const decide = async (decision) => {
    if (busy) return { ok: false, error: '' };
    // A reason the card asks for is asked for here, by the card's field.
    if (!form.reportValidity()) return { ok: false, error: '' };
    busy = true;
    const buttons = form.querySelectorAll('button');
    buttons.forEach((b) => { b.disabled = true; });
    errorEl.textContent = '';
    const body = { decision };
    if (reason.value.trim()) body.reason = reason.value.trim();
    try {
      const { data, text } = await request(`${path.approval(view.id)}/decision`, { method: 'POST', body, raw: true });
      announce(decision === 'approve' ? `Approved ${view.name ?? view.tool}.` : `Denied ${view.name ?? view.tool}.`);
      if (options.onDecided) {
        options.onDecided({ view: data, args: rawAt(text, ['arguments']) });
        // Keyboard users stay where they were: on the decided card — in
        // view, also when the decision came from the pinned bar (the
        // focus may be on it already, when focusing scrolls nothing).
        const again = document.querySelector(`[data-approval="${CSS.escape(view.id)}"] .approval-title`);
        if (again) {
          again.focus();
          again.scrollIntoView({ block: 'nearest' });
        }
      }
      return { ok: true, error: '' };
    } catch (err) {
      errorEl.textContent = err instanceof APIError ? err.message : 'The decision could not be sent.';
      buttons.forEach((b) => { b.disabled = false; });
      return { ok: false, error: errorEl.textContent };
    } finally {
      busy = false;
    }
  };
  form.decide = decide;
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    decide(e.submitter && e.submitter.value === 'approve' ? 'approve' : 'deny');
  });
  return form;
}
