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
};

export function approvalStatus(status) {
  return STATUS[status] || [status, 'status-muted'];
}

// loadApproval fetches one approval with the exact text of its arguments.
export async function loadApproval(id) {
  const { data, text } = await request(path.approval(id), { raw: true });
  remember(data);
  return { view: data, args: rawAt(text, ['arguments']) };
}

// loadApprovals fetches the open approvals, each with its exact arguments.
export async function loadApprovals() {
  const { data, text } = await request(path.approvals(), { raw: true });
  const list = (data && data.approvals) || [];
  list.forEach(remember);
  return list.map((view, i) => ({ view, args: rawAt(text, ['approvals', i, 'arguments']) }));
}

// The history of recent decisions. GET /api/approvals lists open requests
// only, so this browser remembers (in localStorage, per person) the
// approvals it has shown — the person's own and those they may decide —
// and the inbox reads each again (GET /api/approvals/{id}, any status) to
// show the decided ones.
const HISTORY = 30; // approvals remembered, newest first
let owner = '';

// rememberApprovalsOf names the signed-in person whose history this is.
export function rememberApprovalsOf(personId) {
  owner = personId || '';
}

function historyKey() {
  return `usher.approvals.${owner}`;
}

function remembered() {
  if (!owner) return [];
  try {
    const ids = JSON.parse(localStorage.getItem(historyKey()) || '[]');
    return Array.isArray(ids) ? ids.filter((x) => typeof x === 'string') : [];
  } catch {
    return [];
  }
}

function keep(ids) {
  if (!owner) return;
  try {
    localStorage.setItem(historyKey(), JSON.stringify(ids.slice(0, HISTORY)));
  } catch {
    // Storage full or refused: the history is a convenience.
  }
}

function remember(view) {
  if (!view || typeof view.id !== 'string') return;
  const ids = remembered();
  if (ids[0] === view.id) return;
  keep([view.id, ...ids.filter((x) => x !== view.id)]);
}

// approvalHistory is the inbox's "Recent decisions": the remembered
// approvals that are no longer pending, most recently decided first, each
// folded to its outcome. options: runLink(runId) (a node or null).
export function approvalHistory(options = {}) {
  const list = h('div', { class: 'approval-list history-list' });
  const section = h('section', { class: 'approval-history', 'aria-labelledby': 'history-title' },
    h('h3', { id: 'history-title' }, 'Recent decisions'),
    h('p', { class: 'hint' }, 'Requests shown in this browser — yours, and those you could decide — once they are decided, expired or revoked.'),
    list);
  let generation = 0; // the latest reload shows; an earlier one finishing late does not
  let focusOn = ''; // an approval whose card takes the focus once shown
  // reload reads the history again; focus: the id of an approval just
  // decided, whose card then takes the focus.
  section.reload = async ({ focus } = {}) => {
    if (focus) focusOn = focus;
    generation += 1;
    const mine = generation;
    const ids = remembered();
    const found = await Promise.all(ids.map((id) => loadQuietly(id)));
    if (mine !== generation) return;
    const gone = new Set(ids.filter((id, i) => found[i] === null));
    if (gone.size) keep(remembered().filter((id) => !gone.has(id)));
    const decided = found.filter((item) => item && item.view.status !== 'pending');
    decided.sort((a, b) => when(b.view) - when(a.view));
    // The same decisions: the cards stay as they are (a Details opened).
    const shown = decided.map((item) => `${item.view.id}:${item.view.status}`).join(' ');
    // The focus stays on the card it was on.
    const at = list.contains(document.activeElement) ? document.activeElement.closest('[data-approval]') : null;
    if (!decided.length || list.dataset.shown !== shown) {
      list.dataset.shown = shown;
      list.replaceChildren(...(decided.length
        ? decided.map((item) => approvalCard(item, { level: 4, runLink: options.runLink ? options.runLink(item.view.run_id) : null }))
        : [h('p', { class: 'empty-state' }, 'No decisions yet.')]));
    } else if (!focusOn) {
      return;
    }
    const want = focusOn || (at && at.dataset.approval);
    const again = want && list.querySelector(`[data-approval="${CSS.escape(want)}"] .approval-title`);
    if (again) again.focus({ preventScroll: !focusOn });
    focusOn = '';
  };
  section.reload();
  return section;
}

// loadQuietly reads a remembered approval: null when it is gone (or no
// longer this person's to see), undefined when it could not be read now.
async function loadQuietly(id) {
  try {
    const { data, text } = await request(path.approval(id), { raw: true });
    return { view: data, args: rawAt(text, ['arguments']) };
  } catch (err) {
    return err instanceof APIError && err.status === 404 ? null : undefined;
  }
}

function when(view) {
  return new Date(view.decided_at || view.consumed_at || view.expires_at || view.created_at).getTime() || 0;
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
const allowText = (view) => actionOf(view)[0];
const doneText = (view) => actionOf(view)[1];
const termOf = (view) => actionOf(view)[2];

// approvalCard renders one approval. options: level (heading level, 2 or
// 3), onDecided(view) after a decision, runLink (a node linking to its
// session, or null), open (a decided approval's details shown unfolded).
export function approvalCard(item, options = {}) {
  const { view } = item;
  const level = options.level || 3;
  const titleId = uniqueId('approval-title');
  const [statusText, statusClass] = approvalStatus(view.status);
  const card = h('section', { class: `approval-card ${view.status === 'pending' ? 'is-pending' : ''}`, 'aria-labelledby': titleId, 'data-approval': view.id });

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
  if (folded && (view.decided_by || view.decision_reason)) card.append(decisionNote(view));
  const body = folded ? h('div', { class: 'approval-body' }) : card;
  if (folded) card.append(h('details', { class: 'approval-more', open: Boolean(options.open) }, h('summary', null, 'Details: the arguments, the policy, the ids'), body));

  const args = pretty(readable(item.args ?? JSON.stringify(view.arguments)));
  body.append(h('dl', { class: 'facts' },
    fact(termOf(view), code(view.name ?? view.tool)),
    fact('Server', view.server ? code(view.server) : 'Usher (built-in)'),
    fact('Why a person must decide', view.reason || 'The policy holds this call for a decision.'),
    fact('Policy', view.policy_ids && view.policy_ids.length ? view.policy_ids.map((p, i) => [i ? ', ' : '', code(p)]) : 'no matching rule (held by default)'),
    fact('Requested', timeElement(view.created_at), view.client_id ? [' by ', code(view.client_id)] : ''),
    view.status === 'pending' ? fact('Expires', timeElement(view.expires_at)) : null,
    options.runLink ? fact('Session', options.runLink) : null));

  const argsId = uniqueId('approval-args');
  body.append(h('h4', { id: argsId, class: 'approval-subhead' }, 'Arguments, exactly as they will run'),
    h('pre', { class: 'arguments', tabindex: '0', 'aria-labelledby': argsId }, h('code', null, args)));

  body.append(h('details', { class: 'approval-ids' },
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
    card.append(decisionForm(view, options));
  } else if (view.status === 'pending') {
    card.append(h('p', { class: 'hint' }, 'Another approver must decide this request.'));
  }
  return card;
}

function decisionNote(view) {
  return h('p', { class: 'decision-note' },
    view.status === 'denied' ? 'Denied' : 'Approved',
    view.decided_at ? [' ', timeElement(view.decided_at)] : '',
    view.decided_by && view.decided_by !== view.requested_by ? [' by ', code(view.decided_by)] : '',
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
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const decision = e.submitter && e.submitter.value === 'approve' ? 'approve' : 'deny';
    const buttons = form.querySelectorAll('button');
    buttons.forEach((b) => { b.disabled = true; });
    errorEl.textContent = '';
    const body = { decision };
    if (reason.value.trim()) body.reason = reason.value.trim();
    try {
      const { data, text } = await request(`${path.approval(view.id)}/decision`, { method: 'POST', body, raw: true });
      remember(data);
      announce(decision === 'approve' ? `Approved ${view.name ?? view.tool}.` : `Denied ${view.name ?? view.tool}.`);
      if (options.onDecided) {
        options.onDecided({ view: data, args: rawAt(text, ['arguments']) });
        // Keyboard users stay where they were: on the decided card.
        const again = document.querySelector(`[data-approval="${CSS.escape(view.id)}"] .approval-title`);
        if (again) again.focus();
      }
    } catch (err) {
      errorEl.textContent = err instanceof APIError ? err.message : 'The decision could not be sent.';
      buttons.forEach((b) => { b.disabled = false; });
    }
  });
  return form;
}
