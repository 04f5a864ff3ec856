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
  return { view: data, args: rawAt(text, ['arguments']) };
}

// loadApprovals fetches the open approvals, each with its exact arguments.
export async function loadApprovals() {
  const { data, text } = await request(path.approvals(), { raw: true });
  const list = (data && data.approvals) || [];
  return list.map((view, i) => ({ view, args: rawAt(text, ['approvals', i, 'arguments']) }));
}

function fact(term, ...value) {
  return [h('dt', null, term), h('dd', null, ...value)];
}

function code(text) {
  return h('code', null, text);
}

// approvalCard renders one approval. options: level (heading level, 2 or
// 3), onDecided(view) after a decision, runLink (a node linking to its
// session, or null).
export function approvalCard(item, options = {}) {
  const { view } = item;
  const level = options.level || 3;
  const titleId = uniqueId('approval-title');
  const [statusText, statusClass] = approvalStatus(view.status);
  const card = h('section', { class: `approval-card ${view.status === 'pending' ? 'is-pending' : ''}`, 'aria-labelledby': titleId, 'data-approval': view.id });

  card.append(h('div', { class: 'approval-head' },
    h(`h${level}`, { id: titleId, class: 'approval-title', tabindex: '-1' }, view.status === 'pending' ? 'Allow ' : 'Call to ', code(view.tool), view.status === 'pending' ? '?' : ''),
    h('span', { class: `badge ${statusClass}` }, statusText)));

  const args = pretty(readable(item.args ?? JSON.stringify(view.arguments)));
  card.append(h('dl', { class: 'facts' },
    fact('Tool', code(view.tool)),
    fact('Server', view.server ? code(view.server) : 'Usher (built-in)'),
    fact('Why a person must decide', view.reason || 'The policy holds this call for a decision.'),
    fact('Policy', view.policy_ids && view.policy_ids.length ? view.policy_ids.map((p, i) => [i ? ', ' : '', code(p)]) : 'no matching rule (held by default)'),
    fact('Requested', timeElement(view.created_at), view.client_id ? [' by ', code(view.client_id)] : ''),
    view.status === 'pending' ? fact('Expires', timeElement(view.expires_at)) : null,
    options.runLink ? fact('Session', options.runLink) : null));

  const argsId = uniqueId('approval-args');
  card.append(h('h4', { id: argsId, class: 'approval-subhead' }, 'Arguments, exactly as they will run'),
    h('pre', { class: 'arguments', tabindex: '0', 'aria-labelledby': argsId }, h('code', null, args)));

  card.append(h('details', { class: 'approval-ids' },
    h('summary', null, 'Ids and hashes'),
    h('dl', { class: 'facts mono' },
      fact('Approval', code(view.id)),
      view.run_id ? fact('Run', code(view.run_id)) : null,
      fact('Requested by', code(view.requested_by)),
      fact('Arguments (SHA-256 of canonical JSON)', code(view.arguments_hash)),
      fact('Tool definition', code(view.definition_hash)),
      fact('Policy', code(view.policy_hash)),
      view.approvers && view.approvers.length ? fact('Approver groups', view.approvers.map((g, i) => [i ? ', ' : '', code(g)])) : null)));

  if (view.decided_by || view.decision_reason) {
    card.append(h('p', { class: 'decision-note' },
      view.status === 'denied' ? 'Denied' : 'Approved',
      view.decided_at ? [' ', timeElement(view.decided_at)] : '',
      view.decision_reason ? [': ', h('q', null, view.decision_reason)] : '.'));
  }

  if (view.status === 'pending' && (view.can_approve || view.can_deny)) {
    card.append(decisionForm(view, options));
  } else if (view.status === 'pending') {
    card.append(h('p', { class: 'hint' }, 'Another approver must decide this request.'));
  }
  return card;
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
      announce(decision === 'approve' ? `Approved ${view.tool}.` : `Denied ${view.tool}.`);
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
