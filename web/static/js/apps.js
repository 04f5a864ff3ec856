// Connected apps: the external MCP clients (Claude, VS Code, the MCP
// Inspector…) the signed-in person allowed to use Usher as them, with where
// each came from, where it sends its sign-ins, when it was last used, and
// Revoke. Everything an app says of itself (its name, its URLs) is shown as
// text, never as markup or a link.

import { h, announce, timeElement, uniqueId } from './dom.js';

const dateOnly = new Intl.DateTimeFormat(undefined, { dateStyle: 'long' });
const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

// dateElement is a <time> showing the date alone ("registered on …").
function dateElement(value) {
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return null;
  return h('time', { datetime: d.toISOString(), title: dateTime.format(d) }, dateOnly.format(d));
}
import { request, path, APIError } from './api.js';
import { confirmDialog } from './conversation.js';
import { copyButton } from './copy.js';

// loadApps fetches the person's connected apps, newest use first.
export async function loadApps() {
  const data = await request(path.apps());
  return (data && data.apps) || [];
}

// appName is what an app is called on the page.
export function appName(app) {
  return app.name || 'An unnamed application';
}

function fact(term, ...value) {
  return [h('dt', null, term), h('dd', null, ...value)];
}

function code(text) {
  return h('code', null, text);
}

// origin says where the app came from: its metadata document's URL, or its
// registration.
function origin(app) {
  switch (app.kind) {
    case 'metadata_document':
      return ['Described by its metadata document at ', code(app.client_id)];
    case 'configured':
      return 'Configured by Usher’s operators';
    default:
      return ['Registered itself on ', dateElement(app.registered_at) || 'an unknown date', '; Usher has not verified who made it'];
  }
}

// appCard renders one app. onRevoke(app) is called when the person
// confirmed; it returns a promise, rejected with the reason shown in the
// dialog.
export function appCard(app, { onRevoke }) {
  const titleId = uniqueId('app-title');
  const name = appName(app);
  const revoke = h('button', { type: 'button', class: 'button danger revoke' },
    'Revoke', h('span', { class: 'visually-hidden' }, ` ${name}`));
  revoke.addEventListener('click', () => confirmDialog({
    title: `Revoke ${name}?`,
    body: 'It will no longer get new access to Usher as you: its refresh tokens stop working now, and the access it already holds ends within minutes. To use it again, you will be asked for your consent.',
    confirm: 'Revoke access',
    onConfirm: () => onRevoke(app),
  }));
  const hosts = app.redirect_hosts || [];
  const card = h('section', { class: 'app-card', 'aria-labelledby': titleId, 'data-client-id': app.client_id },
    h('div', { class: 'approval-head' },
      h('h3', { id: titleId, class: 'approval-title', tabindex: '-1' }, name),
      revoke),
    h('dl', { class: 'facts' },
      fact('Came from', origin(app)),
      fact('Sends sign-ins to', hosts.length ? hosts.map((host, i) => [i ? ', ' : '', code(host)]) : 'no address'),
      fact('Last used', app.last_used_at ? timeElement(app.last_used_at) : 'Never'),
      fact('Connected', timeElement(app.consented_at)),
      fact('Allowed', app.scope ? code(app.scope) : 'no scope', ' for ', code(app.resource))),
    app.kind === 'metadata_document' ? null : h('details', { class: 'approval-ids' },
      h('summary', null, 'Client id'),
      h('p', { class: 'facts mono' }, code(app.client_id))));
  return card;
}

// appsView shows the connected apps in main; it returns the view.
// clientSettings are what to give common MCP clients for url, to copy.
function clientSettings(url) {
  return [
    ['VS Code (.vscode/mcp.json)', JSON.stringify({ servers: { usher: { type: 'http', url } } }, null, 2)],
    ['Claude Code', `claude mcp add --transport http usher ${url}`],
    ['Other clients (mcpServers)', JSON.stringify({ mcpServers: { usher: { url } } }, null, 2)],
  ];
}

// emptyState says what to give an MCP client when none is connected: the
// MCP endpoint's URL and settings for common clients, each to copy. The
// client then signs the person in itself and asks for their consent.
function emptyState(url) {
  return h('div', { class: 'empty-state apps-empty' },
    h('p', null, 'No apps are connected. When you allow an application such as Claude or VS Code to use Usher, it appears here.'),
    h('p', null, 'To connect one, give it this MCP server URL; it signs you in and asks for your consent:'),
    h('p', { class: 'mcp-url' }, h('code', null, url), ' ', copyButton({ label: 'Copy the MCP server URL', text: () => url, className: 'button subtle copy-mcp-url' })),
    clientSettings(url).map(([name, text]) => h('details', { class: 'client-settings' },
      h('summary', null, name),
      h('pre', { tabindex: '0' }, h('code', null, text)),
      copyButton({ label: `Copy the settings for ${name}`, text: () => text, className: 'button subtle' }))));
}

export function appsView(main) {
  document.title = 'Connected apps · Usher';
  const heading = h('h2', { id: 'apps-title', tabindex: '-1' }, 'Connected apps');
  const list = h('div', { class: 'approval-list app-list' }, h('p', { class: 'loading' }, 'Loading your apps…'));
  main.replaceChildren(h('section', { class: 'inbox apps', 'aria-labelledby': 'apps-title' },
    heading,
    h('p', { class: 'lede' }, 'Applications you allowed to use Usher’s tools as you, such as Claude, VS Code or the MCP Inspector. They act under the same policy and approvals as you do here.'),
    list));
  heading.focus();
  let destroyed = false;
  const empty = () => emptyState(`${window.location.origin}/mcp`);

  // revoked takes the app's card off the list and moves the focus to the
  // next card's title (or the one before, or the page's heading), so that
  // keyboard and screen-reader users are not left on nothing.
  const revoked = (app) => {
    if (destroyed) return;
    const cards = [...list.querySelectorAll('.app-card')];
    const i = cards.findIndex((c) => c.dataset.clientId === app.client_id);
    if (i < 0) return;
    const next = cards[i + 1] || cards[i - 1];
    cards[i].remove();
    if (next) {
      next.querySelector('.approval-title').focus();
    } else {
      list.replaceChildren(empty());
      heading.focus();
    }
  };
  const onRevoke = async (app) => {
    try {
      await request(path.app(app.client_id), { method: 'DELETE' });
    } catch (err) {
      // Already revoked elsewhere (another tab): it is gone all the same.
      if (!(err instanceof APIError && err.status === 404)) throw err;
    }
    announce(`Revoked ${appName(app)}.`);
    // After the dialog has closed: focus cannot leave a modal dialog.
    setTimeout(() => revoked(app), 0);
  };

  const load = async () => {
    let apps;
    try {
      apps = await loadApps();
    } catch (err) {
      if (!destroyed) list.replaceChildren(h('p', { class: 'form-error' }, `Your apps could not be loaded: ${err.message}`));
      return;
    }
    if (destroyed) return;
    list.replaceChildren(...(apps.length ? apps.map((app) => appCard(app, { onRevoke })) : [empty()]));
  };
  load();
  return { destroy() { destroyed = true; } };
}
