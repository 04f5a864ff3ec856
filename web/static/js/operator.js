// The Operator page, for admins (admin.groups) only: the status of the
// installation as GET /api/admin/status reads it from the database — the
// problems first, then the replicas alive, the upstream MCP servers, the
// run queue, the oldest pending approval and the audit log's last
// checkpoint — refreshed every few seconds; and what each person's model
// requests used over the last 30 days (GET /api/admin/usage), read again
// every minute. Everything a replica or an upstream says of itself is
// shown as text.

import { h, timeElement } from './dom.js';
import { request } from './api.js';

// REFRESH_MS is how often the page reads the status again, and
// USAGE_REFRESH_MS the model usage.
const REFRESH_MS = 5000;
const USAGE_REFRESH_MS = 60000;

// operatorPath is the page's path.
export const operatorPath = '/operator';

// operatorLink is the link to the page, for an admin: in the top bar
// by default, or with the given classes (the drawer's).
export function operatorLink(cls = 'inbox-link operator-link') {
  return h('a', { href: operatorPath, class: cls }, 'Operator');
}

// ago says how long before at t was, rounded for reading.
function ago(at, t) {
  const s = Math.max(0, (new Date(at) - new Date(t)) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

function when(at, t) {
  const el = timeElement(t);
  return el ? [ago(at, t), ' (', el, ')'] : '—';
}

// table renders rows under headers, with a caption that names it.
function table(caption, headers, rows, empty) {
  if (!rows.length) return h('p', { class: 'hint' }, empty);
  return h('div', { class: 'status-table-wrap' },
    h('table', { class: 'status-table' },
      h('caption', { class: 'visually-hidden' }, caption),
      h('thead', null, h('tr', null, headers.map((x) => h('th', { scope: 'col' }, x)))),
      h('tbody', null, rows.map((cells) => h('tr', null, cells.map((c, i) => (i === 0 ? h('th', { scope: 'row' }, c) : h('td', null, c))))))));
}

// stateBadge shows an upstream's state in words, coloured as the run
// statuses are.
function stateBadge(state) {
  const cls = { up: 'ok', down: 'bad' }[state] || 'muted';
  return h('span', { class: `badge status-${cls}` }, state);
}

function section(id, title, ...body) {
  return h('section', { class: 'status-section', 'aria-labelledby': id }, h('h3', { id }, title), ...body);
}

// render builds the page's body from a report.
function render(rep) {
  const at = rep.at;
  const problems = rep.problems || [];
  const summary = problems.length
    ? h('div', { class: 'status-problems', role: 'alert' },
      h('h3', null, problems.length === 1 ? '1 problem' : `${problems.length} problems`),
      h('ul', null, problems.map((p) => h('li', null, p))))
    : h('p', { class: 'status-allwell' }, 'No problem: every replica reports, no upstream is down.');
  const replicas = rep.replicas || [];
  const upstreams = rep.upstreams || [];
  const q = rep.queue || {};
  const a = rep.approvals || {};
  const cp = rep.checkpoint;
  return [
    summary,
    section('status-replicas', `Replicas alive (${replicas.length})`,
      table('Replicas alive', ['Replica', 'Version', 'Address', 'Started', 'Last seen'],
        replicas.map((r) => [h('code', null, r.id), r.version, r.addr || '—', when(at, r.startedAt), ago(at, r.lastSeen)]),
        'No replica is alive.')),
    section('status-upstreams', `Upstreams (${upstreams.length})`,
      table('Upstream MCP servers', ['Upstream', 'State', 'Last reached', 'Replicas', 'Error'],
        upstreams.map((u) => [u.name, stateBadge(u.state), u.lastOk ? ago(at, u.lastOk) : '—',
          (u.replicas || []).map((v) => `${v.replica}: ${v.state}`).join(', '), u.error || '—']),
        'No upstream MCP server is configured.')),
    section('status-queue', 'Run queue',
      h('dl', { class: 'facts' },
        h('dt', null, 'Queued'), h('dd', null, String(q.queued || 0)),
        h('dt', null, 'Running'), h('dd', null, String(q.running || 0)),
        h('dt', null, 'Oldest queued'), h('dd', null, q.oldestQueuedAt ? when(at, q.oldestQueuedAt) : '—'))),
    section('status-approvals', 'Approvals',
      h('dl', { class: 'facts' },
        h('dt', null, 'Pending'), h('dd', null, String(a.pending || 0)),
        h('dt', null, 'Oldest'), h('dd', null, a.oldest
          ? [h('code', null, a.oldest.tool), a.oldest.server ? ` on ${a.oldest.server}` : '', ', requested ', when(at, a.oldest.requestedAt)]
          : '—'))),
    section('status-audit', 'Audit log',
      h('dl', { class: 'facts' },
        h('dt', null, 'Last checkpoint'), h('dd', null, cp ? [`record ${cp.seq}, signed `, when(at, cp.at)] : 'None signed yet'))),
  ];
}

// count shows a count with the reader's grouping of digits.
function count(n) {
  return Number(n || 0).toLocaleString();
}

// renderUsage builds the model usage section from a report.
function renderUsage(u) {
  const rows = u.usage || [];
  return section('status-usage', `Model usage, ${u.since} to ${u.until} (UTC)`,
    table('Model usage by person', ['Person', 'Model', 'Purpose', 'Requests', 'Input tokens', 'Output tokens'],
      rows.map((r) => [h('code', null, r.principal), r.model, r.purpose, count(r.requests), count(r.inputTokens), count(r.outputTokens)]),
      'No model request in these days.'),
    u.more ? h('p', { class: 'hint' }, `The ${rows.length} people and models who used the most are shown; \`usher usage --limit\` lists more.`) : '');
}

// operatorView shows the status in main and reads it again every
// REFRESH_MS while shown; it returns the view.
export function operatorView(main) {
  document.title = 'Operator · Usher';
  const heading = h('h2', { id: 'operator-title', tabindex: '-1' }, 'Operator');
  const updated = h('p', { class: 'hint status-updated' });
  const body = h('div', { class: 'status-body', 'aria-busy': 'true' }, h('p', { class: 'loading' }, 'Loading the status…'));
  const usage = h('div', { class: 'status-usage', 'aria-busy': 'true' });
  main.replaceChildren(h('section', { class: 'inbox operator', 'aria-labelledby': 'operator-title' },
    heading,
    h('p', { class: 'lede' }, 'The installation as its database holds it: the replicas alive, the upstream MCP servers, the queue of turns, the approvals waiting, the audit log, and what each person\'s model requests used. The same as `usher status` and `usher usage`.'),
    updated,
    body,
    usage));
  heading.focus();
  let destroyed = false;
  let timer = null;
  const load = async () => {
    timer = null;
    try {
      const rep = await request('/api/admin/status');
      if (destroyed) return;
      body.replaceChildren(...render(rep));
      updated.replaceChildren('Updated ', timeElement(rep.at) || '', '; refreshed every few seconds.');
    } catch (err) {
      if (destroyed) return;
      body.replaceChildren(h('p', { class: 'form-error' }, `The status could not be read: ${err.message}`));
    }
    body.removeAttribute('aria-busy');
    if (!destroyed) timer = setTimeout(load, REFRESH_MS);
  };
  let usageTimer = null;
  const loadUsage = async () => {
    usageTimer = null;
    try {
      const u = await request('/api/admin/usage');
      if (destroyed) return;
      usage.replaceChildren(renderUsage(u));
    } catch (err) {
      if (destroyed) return;
      usage.replaceChildren(h('p', { class: 'form-error' }, `The model usage could not be read: ${err.message}`));
    }
    usage.removeAttribute('aria-busy');
    if (!destroyed) usageTimer = setTimeout(loadUsage, USAGE_REFRESH_MS);
  };
  load();
  loadUsage();
  return {
    destroy() {
      destroyed = true;
      if (timer) clearTimeout(timer);
      if (usageTimer) clearTimeout(usageTimer);
    },
  };
}
