// The Sessions UI: sign-in, the sidebar of sessions, a conversation, the
// approvals inbox, the connected apps, the Operator page (admins), and for
// security reviewers the Review section. Paths: /, /runs/{id}, /approvals,
// /approvals/{id}, /apps, /operator, /review… (review.js).

import { h, announce, timeElement, keyedChildren } from './dom.js';
import { request, path, newKey, whenSignedOut, APIError } from './api.js';
import { UpdatesFeed } from './live.js';
import { Conversation, composer, confirmDialog } from './conversation.js';
import { modelPicker } from './models.js';
import { approvalCard, loadApproval, loadApprovals, approvalHistory, rememberApprovalsOf } from './approvals.js';
import { appsView } from './apps.js';
import { operatorLink, operatorPath, operatorView } from './operator.js';
import { reviewView } from './review.js';
import { runStatus, runTitle } from './status.js';
import { applyTheme, themeButton, shortcuts } from './prefs.js';
import { menuButton, closeMenusOnOutsideClick, promptDialog } from './sidebar.js';
import { loadSettings, saveSettings, settings, openSettings } from './settings.js';
import { showShortcuts } from './shortcuts.js';
import { exportRun } from './export.js';
import { skeleton } from './skeleton.js';
import { setMaxBytes as setAttachmentLimit } from './attachments.js';
import { setRetention, afterDeletion } from './retention.js';

const app = {
  me: null,
  runs: new Map(), // runId -> RunView
  pending: 0, // open approvals
  search: '',
  seen: {}, // runId -> messageCount seen
  view: null, // the current view (a Conversation has destroy())
  feed: null,
  els: {},
};

const root = document.getElementById('app');
applyTheme();

// ---- boot ----

async function boot() {
  whenSignedOut(() => signedOut(true));
  let session;
  try {
    session = await request('/auth/session');
  } catch (err) {
    showMessage('Usher could not be reached', err.message, true);
    return;
  }
  if (!session.signedIn) {
    signedOut(false, session.signInAvailable);
    return;
  }
  app.me = session.principal;
  // The person's settings (theme, send key, default model) load beside.
  const settingsLoaded = loadSettings(app.me && app.me.id);
  // Whether the person is a reviewer or an admin, for the Review and
  // Operator links: those pages ask the API, which refuses anyone else.
  try {
    const me = await request('/api/me');
    app.reviewer = Boolean(me.reviewer);
    app.admin = Boolean(me.admin);
  } catch {
    app.reviewer = false;
    app.admin = false;
  }
  await settingsLoaded;
  rememberApprovalsOf(app.me && app.me.id);
  app.seen = loadSeen();
  followSeen();
  layout();
  showOperatorLink();
  window.addEventListener('popstate', () => route());
  document.addEventListener('click', interceptLinks);
  closeMenusOnOutsideClick();
  shortcuts({
    help: showShortcuts,
    search: () => {
      if (window.matchMedia('(max-width: 760px)').matches) toggleSidebar(true);
      else app.els.search.focus();
    },
    newSession: () => navigate('/'),
    messageBox: () => app.els.main.querySelector('.composer textarea')?.focus(),
  });
  // The feed's first resync (as its stream opens, or its first poll)
  // loads the lists: one fetch of each per load. Started first, it misses
  // no change made meanwhile. Should it be slow to open, the lists load
  // anyway.
  const firstSync = new Promise((resolve) => { app.firstSync = resolve; });
  app.feed = newFeed();
  app.feed.start();
  const slow = setTimeout(() => { if (app.firstSync) syncLists(); }, FIRST_SYNC_WAIT);
  await firstSync;
  clearTimeout(slow);
  // A link followed meanwhile has shown its view already: showing it again
  // would throw away what it loaded.
  if (!app.view) route();
  // A hidden tab lets go of its streams, so that tabs in the background do
  // not use up the browser's connections to Usher; it catches up when seen.
  document.addEventListener('visibilitychange', () => {
    if (!app.me || !app.feed) return;
    if (document.visibilityState === 'hidden') {
      app.feed.stop();
      if (app.view && app.view.pause) app.view.pause();
    } else {
      app.feed = newFeed();
      app.feed.start();
      if (app.view && app.view.resume) app.view.resume();
    }
  });
}

function newFeed() {
  return new UpdatesFeed({
    run: (run) => runUpdated(run, true),
    approval: (a) => {
      refreshApprovals();
      if (app.view && app.view.refreshApproval) app.view.refreshApproval(a.id);
      if (app.view && app.view.approvalChanged) app.view.approvalChanged(a.id);
    },
    resync: () => syncLists(),
  });
}

// FIRST_SYNC_WAIT is how long the first load waits for the feed to open
// before it loads the lists itself.
const FIRST_SYNC_WAIT = 3000;

// syncLists reloads the sessions and the approvals; the first time, the
// page's first view can then show.
async function syncLists() {
  const first = app.firstSync;
  app.firstSync = null;
  await Promise.all([refreshRuns(), refreshApprovals()]);
  if (first) first();
}

function showMessage(title, text, retry) {
  root.removeAttribute('aria-busy');
  root.replaceChildren(h('main', { id: 'main', class: 'standalone', tabindex: '-1' },
    h('div', { class: 'standalone-card' },
      h('h1', null, title),
      h('p', null, text),
      retry ? h('p', { class: 'actions' }, h('button', { type: 'button', class: 'button primary', onclick: () => window.location.reload() }, 'Try again')) : null)));
}

// signedOut shows the sign-in page; expired: the session ended meanwhile.
function signedOut(expired, available = true) {
  if (app.feed) app.feed.stop();
  if (app.view && app.view.destroy) app.view.destroy();
  app.feed = null;
  app.view = null;
  document.title = 'Sign in · Usher';
  const here = window.location.pathname + window.location.search;
  const login = `/auth/login?${new URLSearchParams({ return: here })}`;
  root.removeAttribute('aria-busy');
  root.replaceChildren(h('main', { id: 'main', class: 'standalone signin', tabindex: '-1' },
    h('div', { class: 'standalone-card' },
      h('h1', null, 'Usher'),
      h('p', { class: 'lede' }, 'Your assistant, with every tool it calls under your organisation’s approval policy.'),
      expired ? h('p', { class: 'notice', role: 'status' }, 'Your session ended. Sign in again to continue.') : null,
      available
        ? h('p', { class: 'actions' }, h('a', { class: 'button primary large', href: login }, 'Sign in'))
        : h('p', { class: 'notice' }, 'Browser sign-in is not configured on this server. An administrator can turn it on (web.client_id).'),
      /^\/approvals\/./.test(window.location.pathname) ? h('p', { class: 'hint' }, 'After signing in you will see the approval this link is for.') : null)));
}

// ---- the signed-in layout ----

function layout() {
  const e = app.els;
  e.toggle = h('button', { type: 'button', class: 'button subtle sidebar-toggle', 'aria-controls': 'sidebar', 'aria-expanded': 'false', onclick: () => toggleSidebar() }, 'Sessions');
  // The link's name holds what it shows, and says what the count is:
  // "Approvals 2 waiting".
  e.inboxCount = h('span', { class: 'count', hidden: true });
  e.inboxWaiting = h('span', { class: 'visually-hidden', hidden: true }, ' waiting');
  e.inbox = h('a', { href: '/approvals', class: 'inbox-link' }, 'Approvals', e.inboxCount, e.inboxWaiting);
  // "Apps" on a narrow screen; its accessible name is the whole one.
  e.apps = h('a', { href: '/apps', class: 'inbox-link apps-link' },
    h('span', { class: 'apps-link-wide' }, 'Connected apps'), h('span', { class: 'apps-link-narrow', 'aria-hidden': 'true' }, 'Apps'));
  e.review = app.reviewer ? h('a', { href: '/review', class: 'inbox-link review-link-top' }, 'Review') : null;
  const signOut = h('button', { type: 'button', class: 'button subtle', onclick: () => doSignOut(false) }, 'Sign out');
  const header = h('header', { class: 'topbar' },
    e.toggle,
    // The page's one h1 names the application; each view's title is its h2.
    h('h1', { class: 'brand-heading' }, h('a', { href: '/', class: 'brand' }, h('img', { src: new URL('../favicon.svg', import.meta.url).pathname, alt: '', width: '24', height: '24' }), h('span', { class: 'brand-name' }, 'Usher'))),
    h('nav', { 'aria-label': 'Main', class: 'topnav' }, e.inbox, e.apps, e.review),
    h('div', { class: 'user' }, h('span', { class: 'user-name', title: app.me.id }, app.me.name || app.me.email || 'Signed in'), signOut));

  e.search = h('input', { id: 'session-search', type: 'search', autocomplete: 'off', placeholder: 'Search sessions' });
  e.search.addEventListener('input', () => searchSessions(e.search.value));
  e.list = h('ul', { class: 'session-list', role: 'list' }, h('li', null, skeleton('Loading the sessions…', 6, 'list')));
  e.empty = h('p', { class: 'hint empty' });
  e.sidebar = h('aside', { id: 'sidebar', class: 'sidebar', 'aria-label': 'Sessions' },
    h('a', { href: '/', class: 'button primary new-session' }, 'New session'),
    h('label', { for: 'session-search', class: 'visually-hidden' }, 'Search sessions: titles and messages'),
    e.search,
    h('nav', { 'aria-label': 'Sessions list' }, e.list),
    e.empty,
    // Ends every session of this person, in every browser and on every
    // device, not only this one's.
    h('p', { class: 'sidebar-foot' },
      // On the narrowest screens the header has no room for it.
      h('a', { href: '/apps', class: 'button subtle drawer-apps-link' }, 'Connected apps'),
      app.reviewer ? h('a', { href: '/review', class: 'button subtle drawer-apps-link drawer-review-link' }, 'Review') : null,
      h('button', { type: 'button', class: 'button subtle open-settings', onclick: () => openSettings() }, 'Settings'),
      themeButton((theme) => saveSettings({ theme }).catch((err) => announce(`The theme could not be saved: ${err.message}`))),
      h('button', { type: 'button', class: 'button subtle shortcuts-help', onclick: () => showShortcuts() }, 'Keyboard shortcuts'),
      h('button', {
        type: 'button', class: 'button subtle sign-out-all',
        onclick: () => confirmDialog({
          title: 'Sign out everywhere?',
          body: 'This ends your sessions in every browser and on every device, this one included. Your conversations stay.',
          confirm: 'Sign out everywhere',
          onConfirm: () => doSignOut(true),
        }),
      }, 'Sign out everywhere')));
  e.main = h('main', { id: 'main', class: 'main', tabindex: '-1' });
  e.main.addEventListener('pointerdown', () => {
    if (document.body.classList.contains('sidebar-open')) toggleSidebar(false);
  });
  e.sidebar.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && document.body.classList.contains('sidebar-open')) {
      toggleSidebar(false);
      e.toggle.focus();
    }
  });
  root.removeAttribute('aria-busy');
  root.replaceChildren(header, h('div', { class: 'layout' }, e.sidebar, e.main));
}

// showOperatorLink adds the Operator page's link to the top bar of an
// admin (GET /api/me says who is one); the status API decides for itself.
function showOperatorLink() {
  if (!app.admin || app.els.operator) return;
  app.els.operator = operatorLink();
  app.els.apps.after(app.els.operator);
  // On the narrowest screens the header has no room for it: the drawer has.
  app.els.sidebar.querySelector('.drawer-apps-link')?.after(operatorLink('button subtle drawer-apps-link'));
  if (window.location.pathname === operatorPath) app.els.operator.setAttribute('aria-current', 'page');
}

function toggleSidebar(open) {
  const want = open ?? !document.body.classList.contains('sidebar-open');
  document.body.classList.toggle('sidebar-open', want);
  app.els.toggle.setAttribute('aria-expanded', String(want));
  if (want) app.els.search.focus();
}

async function doSignOut(everywhere) {
  try {
    await request(everywhere ? '/auth/logout-all' : '/auth/logout', { method: 'POST' });
  } catch (err) {
    // The server could not record the sign-out: the session still works,
    // so say so rather than pretend.
    if (err instanceof APIError && err.code === 'sign_out_failed') {
      window.alert(err.message);
      return;
    }
    // Already signed out, or unreachable: show the sign-in page.
  }
  try {
    localStorage.removeItem(seenKey());
  } catch {
    // Storage may be off.
  }
  window.location.assign('/');
}

// ---- sessions list ----

function seenKey() {
  return `usher.seen.${app.me ? app.me.id : ''}`;
}

function loadSeen() {
  try {
    return JSON.parse(localStorage.getItem(seenKey()) || '{}') || {};
  } catch {
    return {};
  }
}

// mergeSeen takes in what another tab saw (a map like app.seen): per
// session, the most messages either saw. It reports whether app.seen grew.
function mergeSeen(other) {
  let grew = false;
  for (const [runId, n] of Object.entries(other || {})) {
    if (typeof n === 'number' && !(app.seen[runId] >= n)) {
      app.seen[runId] = n;
      grew = true;
    }
  }
  return grew;
}

// saveSeen stores what this tab saw, merged with what the others stored
// meanwhile: a tab never takes back what another marked as read.
function saveSeen() {
  try {
    mergeSeen(loadSeen());
    localStorage.setItem(seenKey(), JSON.stringify(app.seen));
  } catch {
    // Storage may be full or off: unread markers then last for the page.
  }
}

// followSeen takes in, as they happen, the sessions the person reads in
// the other tabs of this browser.
function followSeen() {
  window.addEventListener('storage', (e) => {
    if (e.key !== seenKey() || !e.newValue) return;
    let other;
    try {
      other = JSON.parse(e.newValue);
    } catch {
      return;
    }
    if (mergeSeen(other)) renderSidebar();
  });
}

// markSeen records that the person saw run's messages (it is open).
function markSeen(run) {
  if (!run || !run.runId) return;
  if (app.seen[run.runId] !== run.messageCount) {
    app.seen[run.runId] = run.messageCount;
    saveSeen();
    renderSidebar();
  }
}

function isOpen(runId) {
  return app.view instanceof Conversation && app.view.runId === runId;
}

async function refreshRuns() {
  try {
    const data = await request(path.runs());
    const fresh = new Map();
    for (const run of data.runs || []) {
      fresh.set(run.runId, run);
      // A session seen for the first time is not "unread".
      if (app.seen[run.runId] === undefined) app.seen[run.runId] = run.messageCount;
    }
    app.runs = fresh;
    if (data.limits) {
      app.maxActive = data.limits.maxActiveRuns;
      setAttachmentLimit(data.limits.maxAttachmentBytes);
      setRetention(data.limits);
    }
    saveSeen();
    renderSidebar();
    if (app.view && app.view.limitsChanged) app.view.limitsChanged();
  } catch (err) {
    if (!(err instanceof APIError && err.status === 401)) announce(`Sessions could not be loaded: ${err.message}`);
  }
}

// runUpdated merges a changed run into the list; fromFeed: someone else
// (another tab, a turn) changed it.
function runUpdated(run, fromFeed = false) {
  if (run.deleted) {
    app.runs.delete(run.runId);
    if (isOpen(run.runId)) app.view.deleted();
    renderSidebar();
    return;
  }
  const known = app.runs.get(run.runId);
  app.runs.set(run.runId, { ...known, ...run });
  if (!known && app.seen[run.runId] === undefined) app.seen[run.runId] = fromFeed ? 0 : run.messageCount;
  if (isOpen(run.runId)) {
    markSeen(app.runs.get(run.runId));
    if (fromFeed) app.view.applyRun(run);
  }
  renderSidebar();
  if (app.view && app.view.limitsChanged) app.view.limitsChanged();
}

// searchSessions searches the titles and messages of the person's
// sessions on the server (GET /api/assistant/search), a moment after the
// last keystroke; an empty query shows every session again.
const SEARCH_DELAY = 250;
function searchSessions(value) {
  clearTimeout(app.searchTimer);
  const q = value.trim();
  app.search = q;
  if (!/[\p{L}\p{N}]/u.test(q)) {
    app.hits = null;
    renderSidebar();
    return;
  }
  app.searchTimer = setTimeout(async () => {
    try {
      const data = await request(`/api/assistant/search?q=${encodeURIComponent(q)}`);
      if (app.search !== q) return; // a later query is under way
      app.hits = data.results || [];
      for (const hit of app.hits) app.runs.set(hit.run.runId, { ...app.runs.get(hit.run.runId), ...hit.run });
    } catch (err) {
      if (app.search !== q) return;
      app.hits = [];
      app.searchError = err.message;
    }
    renderSidebar();
    announce(`${app.hits.length} session${app.hits.length === 1 ? '' : 's'} found.`);
  }, SEARCH_DELAY);
}

// dateGroup names the group of the sidebar a session updated at `at`
// falls in: Today, Yesterday, Previous 7 days, Previous 30 days, Older.
function dateGroup(at) {
  const day = (d) => new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime();
  const days = Math.round((day(new Date()) - day(new Date(at))) / 86_400_000);
  if (days <= 0) return 'Today';
  if (days === 1) return 'Yesterday';
  if (days <= 7) return 'Previous 7 days';
  if (days <= 30) return 'Previous 30 days';
  return 'Older';
}

function renderSidebar() {
  const e = app.els;
  if (!e.list) return;
  // An open menu stays as it is, with the person's focus in it: the list
  // is drawn again when it closes.
  if (app.menuOpen) {
    app.redraw = true;
    return;
  }
  app.redraw = false;
  const runs = [...app.runs.values()].sort((a, b) => (Boolean(b.pinned) - Boolean(a.pinned)) || (new Date(b.updatedAt) - new Date(a.updatedAt)));
  const searching = Boolean(app.hits);
  const shown = searching ? app.hits.map((hit) => ({ run: app.runs.get(hit.run.runId) || hit.run, snippet: hit.snippet }))
    : runs.map((run) => ({ run }));
  const current = app.view instanceof Conversation ? app.view.runId : null;
  const items = [];
  let group = null;
  for (const { run, snippet } of shown) {
    const inGroup = run.pinned ? 'Pinned' : dateGroup(run.updatedAt);
    if (!searching && inGroup !== group) {
      group = inGroup;
      const text = group;
      items.push({ key: `group:${text}`, sig: '', make: () => h('li', { class: 'session-group' }, text) });
    }
    const [label, cls] = runStatus(run);
    const unread = !isOpen(run.runId) && app.seen[run.runId] !== undefined && run.messageCount > app.seen[run.runId];
    const below = snippet || run.preview;
    // What the row shows, and what its menu acts on: the row is drawn
    // again only when one of these changes.
    const sig = JSON.stringify([runTitle(run), run.title, run.pinned, label, cls, unread, run.status, run.runId === current, below, Boolean(snippet)]);
    items.push({ key: `run:${run.runId}`, sig, make: () => h('li', { class: 'session-row' }, h('a', {
      href: `/runs/${encodeURIComponent(run.runId)}`,
      class: `session-item${unread ? ' unread' : ''}${run.status === 'Completed' ? ' completed' : ''}`,
      'aria-current': run.runId === current ? 'page' : null,
    },
    h('span', { class: 'session-top' },
      unread ? h('span', { class: 'unread-dot', role: 'img', 'aria-label': 'New messages' }) : null,
      h('span', { class: 'session-title' }, runTitle(run))),
    h('span', { class: 'session-bottom' },
      h('span', { class: `badge small ${cls}` }, label),
      below ? h('span', { class: `session-preview${snippet ? ' snippet' : ''}` }, below) : null)),
    sessionMenu(run)) });
  }
  keyedChildren(e.list, items);
  e.empty.textContent = runs.length === 0 ? 'No sessions yet. Start one with New session.'
    : (searching && shown.length === 0 ? (app.searchError || 'No session has those words in its title or messages.') : '');
  app.searchError = '';
  e.empty.hidden = !e.empty.textContent;
}

// sessionMenu is a session's menu in the list: rename, pin or unpin,
// export and delete.
function sessionMenu(run) {
  const title = runTitle(run);
  return menuButton({
    label: `Actions for ${title}`,
    className: 'session-menu',
    onToggle: (open) => {
      app.menuOpen = open;
      if (!open && app.redraw) setTimeout(renderSidebar);
    },
    items: [
      { label: 'Rename', class: 'menu-rename', run: () => promptDialog({
        title: 'Rename the session', label: 'Title', value: run.title || '', confirm: 'Rename',
        onSave: async (t) => {
          runUpdated(await request(path.run(run.runId), { method: 'PATCH', body: { title: t } }));
          announce(`Renamed to ${t}.`);
        },
      }) },
      { label: run.pinned ? 'Unpin' : 'Pin to the top', class: 'menu-pin', run: () => pinRun(run, !run.pinned) },
      { label: 'Export as Markdown', class: 'menu-export', run: () => exportRun(run, 'md').catch((err) => announce(`The session could not be exported: ${err.message}`)) },
      { label: 'Delete', class: 'menu-delete', run: () => confirmDialog({
        title: 'Delete this session?',
        body: `“${title}” and its messages leave your list for good. ${afterDeletion()}`,
        confirm: 'Delete',
        onConfirm: async () => {
          // Where the focus goes once the row is gone: the next session
          // in the list (the one before, for the last), or New session.
          const rows = [...document.querySelectorAll('.session-list a.session-item')];
          const at = rows.findIndex((a) => a.getAttribute('href') === `/runs/${encodeURIComponent(run.runId)}`);
          const near = at < 0 ? null : rows[at + 1] || rows[at - 1];
          const nearHref = near ? near.getAttribute('href') : null;
          await request(path.run(run.runId), { method: 'DELETE' });
          const open = isOpen(run.runId);
          runUpdated({ runId: run.runId, deleted: true });
          announce(`Deleted ${title}.`);
          if (open) {
            navigate('/');
            return;
          }
          // After the dialog closed (it gives the focus back to its
          // opener, which left with the row).
          setTimeout(() => {
            const next = nearHref && document.querySelector(`.session-list a.session-item[href="${CSS.escape(nearHref)}"]`);
            (next || document.querySelector('.sidebar .new-session')).focus();
          });
        },
      }) },
    ],
  });
}

// pinRun pins the run to the top of the list, or unpins it.
async function pinRun(run, pin) {
  try {
    const view = await request(`${path.run(run.runId)}/pin`, { method: pin ? 'PUT' : 'DELETE' });
    runUpdated({ ...view, pinned: Boolean(view.pinned) });
    announce(pin ? `Pinned ${runTitle(run)}.` : `Unpinned ${runTitle(run)}.`);
  } catch (err) {
    announce(`The session could not be ${pin ? 'pinned' : 'unpinned'}: ${err.message}`);
  }
}

async function refreshApprovals() {
  try {
    const data = await request(path.approvals());
    app.pending = (data.approvals || []).filter((a) => a.status === 'pending' && (a.can_approve || a.can_deny)).length;
  } catch {
    return;
  }
  const c = app.els.inboxCount;
  if (!c) return;
  c.hidden = app.pending === 0;
  c.textContent = String(app.pending);
  app.els.inboxWaiting.hidden = c.hidden;
}

// ---- routing ----

function interceptLinks(e) {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = e.target.closest && e.target.closest('a[href]');
  if (!a || a.target || a.origin !== window.location.origin) return;
  if (!/^\/($|runs\/|approvals($|\/)|apps$|operator$|review($|\/))/.test(a.pathname)) return;
  e.preventDefault();
  navigate(a.pathname + a.search);
}

function navigate(to) {
  if (to !== window.location.pathname + window.location.search) window.history.pushState(null, '', to);
  route();
}

function route() {
  const p = window.location.pathname;
  if (app.view && app.view.destroy) app.view.destroy();
  app.view = null;
  toggleSidebar(false);
  for (const [link, here] of [[app.els.inbox, p === '/approvals'], [app.els.apps, p === '/apps'], [app.els.operator, p === operatorPath], [app.els.review, /^\/review($|\/)/.test(p)]]) {
    if (!link) continue;
    if (here) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  let m;
  if ((m = /^\/runs\/([^/]+)$/.exec(p))) {
    const view = new Conversation({
      runUpdated: (run) => runUpdated(run),
      seen: (run) => { if (isOpen(run.runId)) markSeen(run); },
      approvalsChanged: () => refreshApprovals(),
      navigate: (to) => navigate(to),
    }, decodeURIComponent(m[1]));
    app.view = view;
    renderSidebar();
    view.mount(app.els.main);
  } else if ((m = /^\/approvals\/([^/]+)$/.exec(p))) {
    app.view = approvalView(decodeURIComponent(m[1]));
  } else if (p === '/approvals') {
    app.view = inboxView();
  } else if (p === '/apps') {
    app.view = appsView(app.els.main);
  } else if (p === operatorPath) {
    app.view = operatorView(app.els.main);
  } else if (/^\/review($|\/)/.test(p)) {
    app.view = reviewView(app.els.main, p);
  } else {
    app.view = homeView();
  }
  renderSidebar();
}

// ---- views ----

function homeView() {
  document.title = 'New session · Usher';
  const key = newKey(); // one draft, one run, however often Send is retried
  const picker = modelPicker({ current: () => settings().defaultModel });
  const create = async (text, attachments = []) => {
    const model = picker.value();
    const body = model ? { message: text, model } : { message: text };
    if (attachments.length) body.attachments = attachments.map((a) => a.id);
    const run = await request(path.runs(), { method: 'POST', body, headers: { 'Idempotency-Key': key } });
    runUpdated(run);
    navigate(`/runs/${encodeURIComponent(run.runId)}`);
  };
  const form = composer({
    label: 'Your first message',
    placeholder: 'Ask Usher anything…',
    extra: picker,
    attach: true,
    submit: async (text, _key, attachments) => {
      try {
        await create(text, attachments);
      } catch (err) {
        // At the limit: the offer to set a quiet session aside, and send.
        if (err instanceof APIError && err.code === 'too_many_active_runs') {
          unsent = text;
          unsentAttachments = attachments;
          showLimits();
          limits.querySelector('button')?.focus();
        }
        throw err;
      }
    },
    draftKey: 'usher.draft.new',
  });
  const heading = h('h2', { id: 'home-title', tabindex: '-1' }, 'New session');
  const limits = h('div', { class: 'home-limits', role: 'status' });
  app.els.main.replaceChildren(h('section', { class: 'home', 'aria-labelledby': 'home-title' },
    h('div', { class: 'home-intro' },
      heading,
      h('p', { class: 'lede' }, 'Ask a question or give a task. Usher calls tools only through its MCP server, under your organisation’s policy: anything consequential waits for your approval.')),
    limits,
    form));
  form.querySelector('textarea').focus();
  // How many sessions are going, in plain words; at the limit, the offer
  // to set the least recently used quiet one aside (it picks up again on
  // its next message) — and send the message that was refused, when there
  // is one — or to complete the oldest, before anyone types.
  let unsent = ''; // the message the limit refused, sent once there is room
  let unsentAttachments = []; // and the files it carried
  const showLimits = () => {
    if (!app.maxActive) {
      limits.replaceChildren();
      return;
    }
    const active = [...app.runs.values()].filter((r) => r.status === 'InProgress' || r.status === 'AwaitingApproval')
      .sort((a, b) => new Date(a.updatedAt) - new Date(b.updatedAt));
    if (active.length < app.maxActive) {
      limits.className = 'home-limits';
      limits.replaceChildren(h('p', { class: 'hint' }, active.length === 0
        ? `You can have up to ${app.maxActive} sessions going at once.`
        : `${active.length} of your sessions ${active.length === 1 ? 'is' : 'are'} going; you can have up to ${app.maxActive} at once. A session that stays quiet for 30 minutes is set aside by itself and picks up again when you write in it.`));
      return;
    }
    const quiet = active.find((r) => r.status === 'InProgress' && !r.working);
    const error = h('p', { class: 'form-error', role: 'alert' });
    // action is a button that POSTs to the run's route, then does next.
    const action = (run, route, cls, label, next) => {
      const button = h('button', { type: 'button', class: `button ${cls}` }, label);
      button.addEventListener('click', async () => {
        button.disabled = true;
        try {
          runUpdated(await request(`${path.run(run.runId)}/${route}`, { method: 'POST' }));
          await next();
        } catch (err) {
          error.textContent = err.message;
          button.disabled = false;
        }
      });
      return button;
    };
    const again = () => {
      showLimits();
      form.querySelector('textarea').focus();
    };
    const actions = h('p', { class: 'limit-actions' });
    if (quiet) {
      actions.append(action(quiet, 'park', 'primary park-quiet',
        unsent ? `Set aside “${runTitle(quiet)}” and start` : `Set aside “${runTitle(quiet)}”`,
        async () => {
          if (!unsent) {
            again();
            return;
          }
          await create(unsent, unsentAttachments);
          unsent = '';
          unsentAttachments = [];
          try { localStorage.removeItem('usher.draft.new'); } catch { /* private mode */ }
        }));
    }
    const oldest = active[0];
    actions.append(action(oldest, 'complete', 'complete-oldest', `Complete “${runTitle(oldest)}”`, again));
    limits.className = 'home-limits at-limit';
    limits.replaceChildren(h('p', null, `You have ${active.length} sessions going, as many as you can at once. `,
      quiet
        ? ['To start another, set aside ', h('a', { href: `/runs/${encodeURIComponent(quiet.runId)}` }, runTitle(quiet)),
          ', the one you used least recently: it stays in your list and picks up again when you write in it. Or complete one.']
        : 'Each of them is working or waiting for an approval: complete one to start another.'),
    actions, error);
  };
  showLimits();
  return { destroy() {}, limitsChanged: showLimits };
}

function inboxView() {
  document.title = 'Approvals · Usher';
  const heading = h('h2', { id: 'inbox-title', tabindex: '-1' }, 'Approvals');
  const list = h('div', { class: 'approval-list' }, h('p', { class: 'loading' }, 'Loading approvals…'));
  const history = approvalHistory({ runLink });
  const section = h('section', { class: 'inbox', 'aria-labelledby': 'inbox-title' },
    heading,
    h('p', { class: 'lede' }, 'Tool calls waiting for a person: those you asked for, and those you may decide.'),
    list, history);
  app.els.main.replaceChildren(section);
  heading.focus();
  let destroyed = false;
  const load = async () => {
    let items;
    try {
      items = await loadApprovals();
    } catch (err) {
      if (!destroyed) list.replaceChildren(h('p', { class: 'form-error' }, `Approvals could not be loaded: ${err.message}`));
      return;
    }
    if (destroyed) return;
    if (!items.length) {
      list.replaceChildren(h('p', { class: 'empty-state' }, 'Nothing is waiting for you.'));
      return;
    }
    // A request that did not change keeps its card as it is, with the
    // person's focus and the reason they may be typing, whatever else
    // arrives or leaves.
    keyedChildren(list, items.map((item) => ({ key: item.view.id, sig: JSON.stringify(item.view), make: () => approvalCard(item, {
      level: 3,
      runLink: runLink(item.view.run_id),
      // The decided request moves to Recent decisions; so does the focus.
      onDecided: (decided) => {
        refreshApprovals();
        history.reload({ focus: decided.view.id });
        load().then(() => { if (!section.contains(document.activeElement)) heading.focus(); });
      },
    }) })));
  };
  load();
  return {
    destroy() { destroyed = true; },
    approvalChanged() { load(); history.reload(); },
  };
}

function approvalView(id) {
  document.title = 'Approval · Usher';
  const heading = h('h2', { id: 'approval-page-title', tabindex: '-1' }, 'Approval');
  const slot = h('div', null, h('p', { class: 'loading' }, 'Loading the approval…'));
  app.els.main.replaceChildren(h('section', { class: 'inbox', 'aria-labelledby': 'approval-page-title' },
    heading, slot, h('p', null, h('a', { href: '/approvals' }, 'All approvals'))));
  heading.focus();
  let destroyed = false;
  const show = (item) => {
    const hadFocus = slot.contains(document.activeElement); // kept on the card
    slot.replaceChildren(approvalCard(item, {
      level: 3,
      open: true,
      runLink: runLink(item.view.run_id),
      onDecided: (decided) => { refreshApprovals(); show(decided); },
    }));
    if (hadFocus) slot.querySelector('.approval-title').focus({ preventScroll: true });
  };
  const load = async () => {
    try {
      const item = await loadApproval(id);
      if (!destroyed) show(item);
    } catch (err) {
      if (destroyed) return;
      slot.replaceChildren(h('p', { class: 'form-error' },
        err instanceof APIError && err.status === 404
          ? 'There is no such approval, or it is not yours to see: only its requester and its approvers can open it.'
          : `The approval could not be loaded: ${err.message}`));
    }
  };
  load();
  return {
    destroy() { destroyed = true; },
    approvalChanged(changed) { if (changed === id) load(); },
  };
}

// runLink links to a session of the signed-in person's, when it is one.
function runLink(runId) {
  if (!runId) return null;
  const run = app.runs.get(runId);
  if (!run) return h('code', null, runId);
  // The title alone is the link; when the session began is set apart.
  return h('span', { class: 'run-ref' }, h('a', { href: `/runs/${encodeURIComponent(runId)}` }, runTitle(run)),
    h('span', { class: 'run-started' }, ' (started ', timeElement(run.createdAt), ')'));
}

boot();
