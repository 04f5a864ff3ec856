// The Review section, for security reviewers (review.groups): the audit
// log (filters, paging, a live tail, a record with its hashes, the chain's
// status), the policy (its statements and a matrix of tools by outcome),
// the tools against the tool lock, and every approval of the tenant. It
// only reads: the reviewers' API changes nothing. Paths: /review (the
// audit log), /review/audit/{seq}, /review/policy, /review/tools,
// /review/approvals.

import { h, append, announce, timeElement, uniqueId } from './dom.js';
import { request, APIError } from './api.js';
import { approvalCard } from './approvals.js';
import { pretty, rawAt } from './json.js';

// SECTIONS are the Review pages, in the order of their links.
const SECTIONS = [
  ['audit', '/review', 'Audit log'],
  ['policy', '/review/policy', 'Policy'],
  ['tools', '/review/tools', 'Tool lock'],
  ['approvals', '/review/approvals', 'All approvals'],
];

// TAIL_EVERY is how often the audit log asks for records newer than the
// newest shown (ms).
const TAIL_EVERY = 3000;

// PAGE is how many records a page of the audit log holds.
const PAGE = 50;

function fact(term, ...value) {
  return [h('dt', null, term), h('dd', null, ...value)];
}

function code(text) {
  return h('code', null, text);
}

// notReviewer is what a person who is not a reviewer sees.
function notReviewer() {
  return h('div', { class: 'empty-state not-reviewer', role: 'status' },
    h('p', null, h('strong', null, 'You are not a security reviewer.')),
    h('p', null, 'The Review pages show the audit log, the policy, the tool lock and every approval of your organisation to the members of its reviewers’ groups (review.groups). Ask your administrator if you need them.'));
}

// failure shows why something could not be loaded; a 403 reviewer_required
// is the not-a-reviewer state.
function failure(err, what) {
  if (err instanceof APIError && err.code === 'reviewer_required') return notReviewer();
  return h('p', { class: 'form-error' }, `${what} could not be loaded: ${err.message}`);
}

// reviewView shows the Review page of path in main and returns the view.
// options: navigate(to).
export function reviewView(main, pathname, options = {}) {
  const m = /^\/review\/audit\/(\d+)$/.exec(pathname);
  const section = m ? 'audit' : ((/^\/review\/(policy|tools|approvals)$/.exec(pathname) || [])[1] || 'audit');
  const title = m ? `Audit record #${m[1]}` : SECTIONS.find((s) => s[0] === section)[2];
  document.title = `${title} · Review · Usher`;
  const heading = h('h2', { id: 'review-title', tabindex: '-1' }, title);
  const nav = h('nav', { 'aria-label': 'Review', class: 'review-nav' },
    h('ul', { role: 'list' }, SECTIONS.map(([name, href, label]) => h('li', null,
      h('a', { href, class: 'review-link', 'aria-current': name === section && !m ? 'page' : null }, label)))));
  const body = h('div', { class: 'review-body' });
  main.replaceChildren(h('section', { class: 'inbox review', 'aria-labelledby': 'review-title' },
    h('p', { class: 'review-kicker' }, 'Review'), heading, nav, body));
  heading.focus();
  const state = { destroyed: false, timers: [], controllers: [] };
  const view = {
    destroy() {
      state.destroyed = true;
      state.timers.forEach(clearTimeout);
      state.controllers.forEach((c) => c.abort());
    },
  };
  if (m) recordPage(body, Number(m[1]), state);
  else if (section === 'policy') policyPage(body, state);
  else if (section === 'tools') toolsPage(body, state);
  else if (section === 'approvals') approvalsPage(body, state);
  else auditPage(body, state, options);
  return view;
}

// ---- the audit log ----

// FILTERS are the audit log's filters: parameter, label, and hint.
const FILTERS = [
  ['kind', 'Kind', 'decision, approval_decided, executed…'],
  ['principal', 'Principal', 'a principal id: issuer|tenant|object id'],
  ['tool', 'Tool', 'notes_write'],
  ['server', 'Server', 'builtin, or an upstream’s name'],
  ['outcome', 'Outcome', 'succeeded, failed…'],
];

// filtersOf reads the filters of the page's URL.
function filtersOf() {
  const q = new URLSearchParams(window.location.search);
  const out = {};
  for (const [name] of FILTERS) if (q.get(name)) out[name] = q.get(name);
  for (const name of ['since', 'until']) if (q.get(name)) out[name] = q.get(name);
  return out;
}

// localInput turns an RFC 3339 time into a datetime-local input's value,
// to the millisecond when it has one.
function localInput(value) {
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return '';
  const p = (n) => String(n).padStart(2, '0');
  const ms = d.getMilliseconds();
  const fraction = ms ? `.${String(ms).padStart(3, '0')}` : '';
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}${fraction}`;
}

function auditPage(body, state) {
  const chain = chainStatus(state);
  const filters = filtersOf();
  const fields = {};
  const form = h('form', { class: 'review-filters', 'aria-label': 'Filter the records' });
  for (const [name, label, hint] of FILTERS) {
    const id = `filter-${name}`;
    fields[name] = h('input', { id, name, type: 'text', autocomplete: 'off', spellcheck: 'false', value: filters[name] || '', placeholder: hint });
    form.append(h('div', { class: 'field' }, h('label', { for: id }, label), fields[name]));
  }
  for (const [name, label] of [['since', 'Since'], ['until', 'Until']]) {
    const id = `filter-${name}`;
    // step any: a time to the second or millisecond, as records have.
    fields[name] = h('input', { id, name, type: 'datetime-local', step: 'any', value: filters[name] ? localInput(filters[name]) : '' });
    form.append(h('div', { class: 'field' }, h('label', { for: id }, label), fields[name]));
  }
  const clear = h('button', { type: 'button', class: 'button subtle' }, 'Clear');
  form.append(h('div', { class: 'actions filter-actions' }, h('button', { type: 'submit', class: 'button primary' }, 'Filter'), clear));

  const liveId = uniqueId('live');
  const live = h('input', { id: liveId, type: 'checkbox', checked: true });
  const liveNote = h('span', { class: 'hint live-note', role: 'status' });
  const tableSlot = h('div', { class: 'records' }, h('p', { class: 'loading' }, 'Loading records…'));
  const older = h('button', { type: 'button', class: 'button', hidden: true }, 'Show older records');
  body.append(chain,
    h('h3', { class: 'review-subhead' }, 'Records'),
    h('p', { class: 'hint' }, 'Newest first: every decision, approval, execution and refused sign-in of your tenant. Open a record for its hashes.'),
    form,
    h('p', { class: 'live-toggle' }, live, h('label', { for: liveId }, ' Live: add new records as they are written'), ' ', liveNote),
    tableSlot, older);

  let records = []; // shown, newest first
  let next = '';
  let generation = 0;
  let current = { ...filters };
  const tbody = h('tbody');
  const table = h('div', { class: 'table-wrap', role: 'region', 'aria-label': 'Audit records', tabindex: '0' },
    h('table', { class: 'review-table audit-table' },
      h('thead', null, h('tr', null, ['Record', 'Time', 'Kind', 'Principal', 'Tool', 'Server', 'Decision', 'Outcome'].map((c) => h('th', { scope: 'col' }, c)))),
      tbody));
  const row = (r) => h('tr', { 'data-seq': String(r.seq) },
    h('td', null, h('a', { href: `/review/audit/${r.seq}` }, `#${r.seq}`)),
    h('td', null, timeElement(r.at)),
    h('td', null, code(r.kind)),
    h('td', { class: 'principal' }, r.principal ? code(r.principal) : h('span', { class: 'muted' }, 'none')),
    h('td', null, r.tool ? code(r.tool) : ''),
    h('td', null, r.details && r.details.server ? code(String(r.details.server)) : ''),
    h('td', null, r.decision || ''),
    h('td', null, r.outcome || ''));
  const render = () => {
    if (!records.length) {
      tableSlot.replaceChildren(h('p', { class: 'empty-state' }, Object.keys(current).length ? 'No record matches these filters.' : 'The audit log has no records of your tenant yet.'));
      return;
    }
    tbody.replaceChildren(...records.map(row));
    if (tableSlot.firstChild !== table) tableSlot.replaceChildren(table);
  };
  const query = (extra) => `/api/audit?${new URLSearchParams({ ...current, ...extra })}`;
  const load = async () => {
    generation += 1;
    const mine = generation;
    try {
      const page = await request(query({ order: 'desc', limit: String(PAGE) }));
      if (state.destroyed || mine !== generation) return;
      records = page.records || [];
      next = page.next || '';
      older.hidden = !next;
      render();
    } catch (err) {
      if (state.destroyed || mine !== generation) return;
      records = [];
      older.hidden = true;
      tableSlot.replaceChildren(failure(err, 'The records'));
      if (err instanceof APIError && err.code === 'reviewer_required') {
        state.denied = true; // nothing to tail
        form.hidden = true;
        live.closest('p').hidden = true;
      }
    }
  };
  older.addEventListener('click', async () => {
    if (!next) return;
    older.disabled = true;
    const mine = generation;
    try {
      const page = await request(`/api/audit?${new URLSearchParams({ cursor: next })}`);
      if (state.destroyed || mine !== generation) return;
      const fresh = page.records || [];
      records = records.concat(fresh);
      next = page.next || '';
      older.hidden = !next;
      render();
      const first = fresh.length && tbody.querySelector(`tr[data-seq="${fresh[0].seq}"] a`);
      if (first) first.focus();
    } catch (err) {
      announce(`Older records could not be loaded: ${err.message}`);
    } finally {
      older.disabled = false;
    }
  });
  // The live tail: the records after the newest shown, with the same
  // filters, oldest first; they go on top.
  const tail = async () => {
    if (state.destroyed || state.denied) return;
    if (live.checked && records.length && document.visibilityState !== 'hidden') {
      const mine = generation;
      try {
        const page = await request(query({ after: String(records[0].seq), order: 'asc', limit: '1000' }));
        const fresh = (page.records || []).reverse();
        if (!state.destroyed && mine === generation && fresh.length) {
          records = fresh.concat(records);
          render();
          liveNote.textContent = `${fresh.length} new record${fresh.length === 1 ? '' : 's'}.`;
          chain.refresh();
        }
      } catch {
        // The next round tries again.
      }
    } else if (live.checked && !records.length && !state.destroyed) {
      await load();
    }
    if (!state.destroyed) state.timers.push(setTimeout(tail, TAIL_EVERY));
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    current = {};
    for (const [name] of FILTERS) {
      const v = fields[name].value.trim();
      if (v) current[name] = v;
    }
    for (const name of ['since', 'until']) {
      const v = fields[name].value;
      const d = v ? new Date(v) : null;
      if (d && !Number.isNaN(d.getTime())) current[name] = d.toISOString();
    }
    const url = `${window.location.pathname}${Object.keys(current).length ? `?${new URLSearchParams(current)}` : ''}`;
    window.history.replaceState(null, '', url);
    liveNote.textContent = '';
    load().then(() => announce(records.length ? `${records.length}${next ? ' or more' : ''} records shown.` : 'No record matches these filters.'));
  });
  clear.addEventListener('click', () => {
    for (const f of Object.values(fields)) f.value = '';
    form.requestSubmit();
  });
  load().then(() => { if (!state.destroyed) state.timers.push(setTimeout(tail, TAIL_EVERY)); });
}

// chainStatus verifies the chain to its head, step by step (GET
// /api/audit/verify, following resume), and reads the last checkpoint:
// "Verified to #N at T, last checkpoint #M".
function chainStatus(state) {
  const text = h('p', { class: 'chain-text' }, 'Verifying the chain…');
  const box = h('section', { class: 'chain-status', 'aria-labelledby': 'chain-title' },
    h('h3', { id: 'chain-title', class: 'review-subhead' }, 'The chain'),
    h('div', { role: 'status' }, text));
  let running = false;
  let again = false;
  // Where the last intact verification ended: the next one checks only
  // the records written since, chained on that record's stored hash.
  let intactTo = 0;
  const lastCheckpoint = async () => {
    let after = 0;
    let last = null;
    for (;;) {
      const page = await request(`/api/audit/checkpoints?${new URLSearchParams({ after: String(after), limit: '1000' })}`);
      const list = page.checkpoints || [];
      if (list.length) last = list[list.length - 1];
      if (page.next === undefined || page.next === null || !list.length) return last;
      after = page.next;
    }
  };
  const run = async () => {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      let after = intactTo;
      let step;
      for (;;) {
        step = await request(`/api/audit/verify?after=${after}`);
        if (state.destroyed) return;
        if (!step.intact) break;
        if (step.resume === undefined || step.resume === null) break;
        after = step.resume;
        text.textContent = `Verifying the chain… #${step.verified_to} of #${step.head.seq}`;
      }
      // A step that checked nothing new ends where it began.
      if (step.intact) {
        step.verified_to = Math.max(step.verified_to, after);
        intactTo = step.verified_to;
      }
      let checkpoint = null;
      let checkpointError = '';
      try {
        checkpoint = await lastCheckpoint();
      } catch (err) {
        checkpointError = err.message;
      }
      if (state.destroyed) return;
      box.classList.toggle('broken', !step.intact);
      box.dataset.verifiedTo = String(step.verified_to);
      const cp = checkpoint ? ['last checkpoint ', h('a', { href: `/review/audit/${checkpoint.seq}` }, `#${checkpoint.seq}`), ' signed ', timeElement(checkpoint.at)]
        : [checkpointError ? `checkpoints could not be read: ${checkpointError}` : 'no checkpoint yet'];
      text.replaceChildren();
      if (step.intact) {
        append(text, [h('span', { class: 'badge status-ok' }, 'Intact'), ' ',
          step.verified_to ? ['Verified to ', h('strong', { class: 'verified-to' }, `#${step.verified_to}`), ' at ', timeElement(new Date().toISOString())] : 'The log has no records yet',
          '; ', cp, '.']);
      } else {
        const problems = (step.problems || []).slice(0, 5).map((p) => `#${p.seq} ${p.kind}`).join(', ');
        append(text, [h('span', { class: 'badge status-bad' }, 'Broken'), ' ',
          'The chain is broken at ', h('strong', null, `#${step.first_broken}`), ` (${problems}${step.problem_count > 5 ? ', …' : ''}); `, cp, '.']);
      }
    } catch (err) {
      if (intactTo > 0 && err instanceof APIError && err.status === 404) {
        // The record verified to is gone: verify from the first again.
        intactTo = 0;
        again = true;
      } else if (err instanceof APIError && err.code === 'reviewer_required') {
        // Not a reviewer: the records' place says so, once.
        box.hidden = true;
      } else if (!state.destroyed) {
        text.replaceChildren(failure(err, 'The chain’s status'));
      }
    } finally {
      running = false;
      if (again && !state.destroyed) {
        again = false;
        run();
      }
    }
  };
  box.refresh = run;
  run();
  return box;
}

// recordPage shows one record: its place in the chain (seq, hash, previous
// hash) and everything it holds, as `usher audit export` writes it.
async function recordPage(body, seq, state) {
  body.append(h('p', { class: 'loading' }, 'Loading the record…'));
  let rec;
  let text;
  try {
    ({ data: rec, text } = await request(`/api/audit/${seq}`, { raw: true }));
  } catch (err) {
    if (state.destroyed) return;
    body.replaceChildren(err instanceof APIError && err.status === 404
      ? h('p', { class: 'form-error' }, `There is no record #${seq} of your tenant.`)
      : failure(err, 'The record'));
    body.append(h('p', null, h('a', { href: '/review' }, 'Back to the audit log')));
    return;
  }
  if (state.destroyed) return;
  const jsonId = uniqueId('record-json');
  body.replaceChildren(
    h('dl', { class: 'facts mono record-chain' },
      fact('Sequence number', code(String(rec.seq))),
      fact('Hash', code(rec.hash)),
      fact('Previous hash', code(rec.prev_hash))),
    h('dl', { class: 'facts record-facts' },
      fact('Time', timeElement(rec.at), ' ', code(rec.at)),
      fact('Kind', code(rec.kind)),
      fact('Principal', rec.principal ? code(rec.principal) : 'none'),
      rec.tool ? fact('Tool', code(rec.tool)) : null,
      rec.decision ? fact('Decision', rec.decision) : null,
      rec.outcome ? fact('Outcome', rec.outcome) : null,
      rec.policy_ids && rec.policy_ids.length ? fact('Policy', rec.policy_ids.map((p, i) => [i ? ', ' : '', code(p)])) : null,
      rec.approval_id ? fact('Approval', code(rec.approval_id)) : null,
      rec.run_id ? fact('Run', code(rec.run_id)) : null),
    h('h3', { id: jsonId, class: 'review-subhead' }, 'The record, as exported'),
    h('pre', { class: 'record-json', tabindex: '0', 'aria-labelledby': jsonId }, h('code', null, pretty(text))),
    h('p', { class: 'actions' },
      rec.seq > 1 ? h('a', { href: `/review/audit/${rec.seq - 1}` }, `Record #${rec.seq - 1}`) : null,
      h('a', { href: `/review/audit/${rec.seq + 1}` }, `Record #${rec.seq + 1}`),
      h('a', { href: '/review' }, 'Back to the audit log')));
}

// ---- the policy ----

const OUTCOME_CLASS = { allow: 'status-ok', approve: 'status-awaiting', deny: 'status-bad' };

function outcomeBadge(outcome) {
  return h('span', { class: `badge ${OUTCOME_CLASS[outcome] || 'status-muted'}` }, outcome);
}

async function policyPage(body, state) {
  body.append(h('p', { class: 'loading' }, 'Loading the policy…'));
  let pol;
  try {
    pol = await request('/api/policy');
  } catch (err) {
    if (!state.destroyed) body.replaceChildren(failure(err, 'The policy'));
    return;
  }
  if (state.destroyed) return;
  const findings = pol.findings || [];
  const matrixSlot = h('div', { class: 'matrix' }, h('p', { class: 'loading' }, 'Deciding every tool…'));
  body.replaceChildren(
    h('dl', { class: 'facts mono' }, fact('File', code(pol.name)), fact('Hash (SHA-256)', code(pol.hash))),
    h('section', { class: 'review-part', 'aria-labelledby': 'findings-title' },
      h('h3', { id: 'findings-title', class: 'review-subhead' }, 'Findings against the tool lock'),
      findings.length
        ? h('ul', { class: 'findings' }, findings.map((f) => h('li', null, h('span', { class: 'badge status-awaiting' }, f.kind), ' ', code(f.text))))
        : h('p', { class: 'hint' }, 'usher policy check finds nothing.')),
    h('section', { class: 'review-part', 'aria-labelledby': 'matrix-title' },
      h('h3', { id: 'matrix-title', class: 'review-subhead' }, 'Who gets what'),
      h('p', { class: 'hint' }, 'The decision on a call of each tool offered, with no arguments, for a person in no group and for a person in each approver group the policy names. A changed or new tool is never allowed unattended.'),
      matrixSlot),
    h('section', { class: 'review-part', 'aria-labelledby': 'statements-title' },
      h('h3', { id: 'statements-title', class: 'review-subhead' }, `Statements (${(pol.statements || []).length})`),
      h('div', { class: 'statement-list' }, (pol.statements || []).map(statementCard))));
  let matrix;
  try {
    matrix = await request('/api/policy/matrix');
  } catch (err) {
    if (!state.destroyed) matrixSlot.replaceChildren(failure(err, 'The matrix'));
    return;
  }
  if (!state.destroyed) matrixSlot.replaceChildren(matrixTable(matrix));
}

function statementCard(s) {
  const titleId = uniqueId('statement');
  return h('section', { class: 'statement-card', 'aria-labelledby': titleId, 'data-statement': s.id },
    h('div', { class: 'approval-head' },
      h('h4', { id: titleId, class: 'statement-title' }, code(s.id)),
      h('span', { class: 'statement-badges' }, h('span', { class: 'badge' }, s.effect), ' ', outcomeBadge(s.outcome))),
    h('dl', { class: 'facts' },
      fact('Reason', s.reason || h('span', { class: 'muted' }, 'none given')),
      s.outcome === 'approve' ? fact('Approvers', s.approvers && s.approvers.length ? s.approvers.map((g, i) => [i ? ', ' : '', code(g)]) : 'the requesting user') : null,
      fact('Conditions', s.conditions && s.conditions.length
        ? h('div', { class: 'conditions' }, s.conditions.map((c) => h('pre', { class: 'condition' }, h('code', null, c))))
        : 'none: the scope alone decides'),
      fact('Where', code(s.position))),
    h('details', { class: 'approval-ids' }, h('summary', null, 'The statement as written'),
      h('pre', { class: 'statement-text' }, h('code', null, s.text))));
}

function matrixCell(c) {
  const title = c.policy_ids && c.policy_ids.length ? c.policy_ids.join(', ') : 'no statement matched';
  return h('td', { 'data-decision': c.decision, title },
    outcomeBadge(c.decision),
    c.decision === 'approve' && c.approvers && c.approvers.length ? h('span', { class: 'cell-note' }, ` by ${c.approvers.join(', ')}`) : null,
    c.arguments_matter ? h('span', { class: 'cell-note args-matter' }, h('span', { 'aria-hidden': 'true' }, ' *'), h('span', { class: 'visually-hidden' }, ' (the arguments may change it)')) : null);
}

function matrixTable(m) {
  const groups = m.groups || [];
  const lockLabel = { locked: 'locked', changed: 'changed', new: 'new' };
  const anyArgs = (m.tools || []).some((t) => [t.no_group, ...t.groups].some((c) => c.arguments_matter));
  return h('div', null,
    m.complete ? null : h('p', { class: 'notice' }, 'Some upstream could not be listed: its tools are missing or as it last listed them.'),
    h('div', { class: 'table-wrap', role: 'region', 'aria-labelledby': 'matrix-caption', tabindex: '0' },
      h('table', { class: 'review-table matrix-table' },
        h('caption', { id: 'matrix-caption' }, 'Decision by tool, for a person in no group and in each approver group'),
        h('thead', null, h('tr', null,
          h('th', { scope: 'col' }, 'Tool'),
          h('th', { scope: 'col' }, 'Lock'),
          h('th', { scope: 'col' }, 'No group'),
          groups.map((g) => h('th', { scope: 'col' }, 'In ', code(g))))),
        h('tbody', null, (m.tools || []).map((t) => h('tr', { 'data-tool': t.tool },
          h('th', { scope: 'row' }, code(t.tool), t.server !== 'builtin' ? h('span', { class: 'cell-note' }, ` (${t.server})`) : null),
          h('td', null, h('span', { class: `badge ${t.lock_state === 'locked' ? 'status-muted' : 'status-awaiting'}` }, lockLabel[t.lock_state] || t.lock_state)),
          matrixCell(t.no_group),
          t.groups.map(matrixCell)))))),
    anyArgs ? h('p', { class: 'hint' }, '* A statement whose conditions read the call’s arguments changes this decision: a call with arguments may be decided otherwise. Explain one call with usher policy explain or GET /api/policy/explain.') : null);
}

// ---- the tool lock ----

const LOCK_STATE = {
  locked: ['Locked', 'status-ok'],
  changed: ['Changed since reviewed', 'status-bad'],
  new: ['New: never reviewed', 'status-awaiting'],
  removed: ['Removed', 'status-muted'],
};
const LOCK_ORDER = ['changed', 'new', 'removed', 'locked'];

async function toolsPage(body, state) {
  body.append(h('p', { class: 'loading' }, 'Listing the tools…'));
  let data;
  let text;
  try {
    ({ data, text } = await request('/api/tools', { raw: true }));
  } catch (err) {
    if (!state.destroyed) body.replaceChildren(failure(err, 'The tools'));
    return;
  }
  if (state.destroyed) return;
  const offers = (data.offers || []).map((o, i) => ({
    ...o,
    raw: o.definition ? rawAt(text, ['offers', i, 'definition']) : null,
    lockedRaw: o.locked_definition ? rawAt(text, ['offers', i, 'locked_definition']) : null,
  }));
  const tools = offers.filter((o) => o.kind === 'tool')
    .sort((a, b) => LOCK_ORDER.indexOf(a.lock_state) - LOCK_ORDER.indexOf(b.lock_state) || a.name.localeCompare(b.name));
  const others = offers.filter((o) => o.kind !== 'tool');
  const unreviewed = tools.filter((t) => t.lock_state !== 'locked');
  body.replaceChildren();
  append(body, [
    data.complete ? null : h('p', { class: 'notice' }, 'Some upstream could not be listed: its offers are missing or as it last listed them.'),
    h('p', { class: 'lede' }, unreviewed.length
      ? `${unreviewed.length} of ${tools.length} tools differ from the tool lock. A changed or new tool is never allowed unattended; review it, then run usher tools lock.`
      : `All ${tools.length} tools are as the tool lock holds them.`),
    h('section', { class: 'review-part', 'aria-labelledby': 'tools-title' },
      h('h3', { id: 'tools-title', class: 'review-subhead' }, 'Tools'),
      h('div', { class: 'tool-list' }, tools.map(toolCard))),
    others.length ? h('section', { class: 'review-part', 'aria-labelledby': 'others-title' },
      h('h3', { id: 'others-title', class: 'review-subhead' }, 'Resources, templates and prompts'),
      h('p', { class: 'hint' }, 'The tool lock holds tools only: these are decided by the policy’s statements on their actions.'),
      h('div', { class: 'table-wrap', role: 'region', 'aria-labelledby': 'others-title', tabindex: '0' },
        h('table', { class: 'review-table' },
          h('thead', null, h('tr', null, ['Kind', 'Name', 'Server', 'Definition hash'].map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', null, others.map((o) => h('tr', null,
            h('td', null, o.kind), h('td', null, code(o.name)), h('td', null, code(o.server || '')), h('td', null, code(o.definition_hash || '')))))))) : null]);
}

function toolCard(t) {
  const titleId = uniqueId('tool');
  const [label, cls] = LOCK_STATE[t.lock_state] || [t.lock_state, 'status-muted'];
  const card = h('section', { class: `tool-lock-card is-${t.lock_state}`, 'aria-labelledby': titleId, 'data-tool': t.name, 'data-lock-state': t.lock_state },
    h('div', { class: 'approval-head' },
      h('h4', { id: titleId, class: 'statement-title' }, code(t.name)),
      h('span', { class: `badge ${cls}` }, label)),
    h('dl', { class: 'facts mono' },
      fact('Server', code(t.server || '')),
      t.definition_hash ? fact('Current hash', code(t.definition_hash)) : null,
      t.locked_hash ? fact('Locked hash', code(t.locked_hash)) : null));
  if (t.lock_state === 'changed' && t.lockedRaw && t.raw) {
    const diffId = uniqueId('diff');
    card.append(h('h5', { id: diffId, class: 'approval-subhead' }, 'What changed since the review'),
      h('p', { class: 'hint' }, 'Lines marked − are in the definition reviewed, lines marked + in the current one.'),
      diffBlock(pretty(t.lockedRaw), pretty(t.raw), diffId));
  } else if (t.lock_state === 'changed') {
    card.append(h('p', { class: 'hint' }, 'The lock keeps the hash it reviewed, not the definition: compare the definition below with the one reviewed when the lock’s entry was written (tools.lock in version control).'));
  }
  if (t.raw || t.definition) {
    const defId = uniqueId('definition');
    card.append(h('details', { class: 'approval-ids', open: t.lock_state !== 'locked' },
      h('summary', { id: defId }, t.lock_state === 'locked' ? 'Definition' : 'Current definition'),
      h('pre', { class: 'definition', tabindex: '0', 'aria-labelledby': defId }, h('code', null, pretty(t.raw || JSON.stringify(t.definition))))));
  }
  return card;
}

// lineDiff compares two texts line by line (their longest common
// subsequence): each line of the result is kept (' '), only in a ('-') or
// only in b ('+'). Texts too long to compare are shown whole, a then b.
export function lineDiff(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  if (x.length * y.length > 4_000_000) {
    return [...x.map((text) => ({ op: '-', text })), ...y.map((text) => ({ op: '+', text }))];
  }
  // lcs[i][j]: the longest common subsequence of x[i:] and y[j:].
  const lcs = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
  for (let i = x.length - 1; i >= 0; i -= 1) {
    for (let j = y.length - 1; j >= 0; j -= 1) {
      lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < x.length || j < y.length) {
    if (i < x.length && j < y.length && x[i] === y[j]) {
      out.push({ op: ' ', text: x[i] });
      i += 1;
      j += 1;
    } else if (i < x.length && (j === y.length || lcs[i + 1][j] >= lcs[i][j + 1])) {
      // What was removed comes before what replaced it.
      out.push({ op: '-', text: x[i] });
      i += 1;
    } else {
      out.push({ op: '+', text: y[j] });
      j += 1;
    }
  }
  return out;
}

const DIFF_CLASS = { ' ': 'diff-same', '-': 'diff-del', '+': 'diff-ins' };
const DIFF_MARK = { ' ': '  ', '-': '− ', '+': '+ ' };

// diffBlock shows lineDiff(a, b), a line each, marked.
function diffBlock(a, b, labelledBy) {
  const lines = lineDiff(a, b);
  return h('pre', { class: 'diff', tabindex: '0', 'aria-labelledby': labelledBy },
    h('code', null, lines.map((l, n) => [n ? '\n' : '', h('span', { class: DIFF_CLASS[l.op] }, DIFF_MARK[l.op] + l.text)])));
}

// ---- every approval of the tenant ----

const APPROVAL_STATUSES = ['pending', 'approved', 'denied', 'consumed', 'expired', 'revoked'];

function approvalsPage(body, state) {
  const status = h('select', { id: 'approvals-status', name: 'status' },
    h('option', { value: '' }, 'Any'), APPROVAL_STATUSES.map((s) => h('option', { value: s }, s)));
  const tool = h('input', { id: 'approvals-tool', name: 'tool', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'notes_write' });
  const principal = h('input', { id: 'approvals-principal', name: 'principal', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'issuer|tenant|object id' });
  const form = h('form', { class: 'review-filters', 'aria-label': 'Filter the approvals' },
    h('div', { class: 'field' }, h('label', { for: 'approvals-status' }, 'Status'), status),
    h('div', { class: 'field' }, h('label', { for: 'approvals-tool' }, 'Tool'), tool),
    h('div', { class: 'field' }, h('label', { for: 'approvals-principal' }, 'Requested by'), principal),
    h('div', { class: 'actions filter-actions' }, h('button', { type: 'submit', class: 'button primary' }, 'Filter')));
  const list = h('div', { class: 'approval-list' }, h('p', { class: 'loading' }, 'Loading approvals…'));
  const more = h('button', { type: 'button', class: 'button', hidden: true }, 'Show more approvals');
  body.append(h('p', { class: 'hint' }, 'Every approval of your tenant, whoever asked and in any state, newest first.'), form, list, more);
  let next = '';
  let generation = 0;
  let filters = {};
  const page = async (cursor) => {
    const q = { ...filters, scope: 'all', limit: '20' };
    if (cursor) q.cursor = cursor;
    const { data, text } = await request(`/api/approvals?${new URLSearchParams(q)}`, { raw: true });
    const items = ((data && data.approvals) || []).map((view, i) => ({ view, args: rawAt(text, ['approvals', i, 'arguments']) }));
    return { items, next: (data && data.next_cursor) || '' };
  };
  // Articles of a list, not landmarks: two requests of the same tool
  // have the same title.
  const card = (item) => {
    const c = approvalCard(item, { level: 3 });
    c.setAttribute('role', 'article');
    return c;
  };
  const load = async () => {
    generation += 1;
    const mine = generation;
    try {
      const p = await page('');
      if (state.destroyed || mine !== generation) return;
      next = p.next;
      more.hidden = !next;
      list.replaceChildren(...(p.items.length ? p.items.map(card) : [h('p', { class: 'empty-state' }, 'No approval matches.')]));
    } catch (err) {
      if (state.destroyed || mine !== generation) return;
      more.hidden = true;
      list.replaceChildren(failure(err, 'The approvals'));
      if (err instanceof APIError && err.code === 'reviewer_required') form.hidden = true;
    }
  };
  more.addEventListener('click', async () => {
    if (!next) return;
    more.disabled = true;
    const mine = generation;
    try {
      const p = await page(next);
      if (state.destroyed || mine !== generation) return;
      next = p.next;
      more.hidden = !next;
      const cards = p.items.map(card);
      list.append(...cards);
      if (cards.length) cards[0].querySelector('.approval-title').focus();
    } catch (err) {
      announce(`More approvals could not be loaded: ${err.message}`);
    } finally {
      more.disabled = false;
    }
  });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    filters = {};
    if (status.value) filters.status = status.value;
    if (tool.value.trim()) filters.tool = tool.value.trim();
    if (principal.value.trim()) filters.principal = principal.value.trim();
    load().then(() => announce(`${list.querySelectorAll('.approval-card').length} approvals shown.`));
  });
  load();
}
