// The person's preferences in this browser: the colour theme (the
// system's, light or dark, in localStorage, and in their settings), the
// key that sends a message, and the keyboard shortcuts.

import { h } from './dom.js';

const THEME_KEY = 'usher.theme';
const THEMES = ['system', 'light', 'dark'];
const THEME_LABEL = { system: 'Theme: system', light: 'Theme: light', dark: 'Theme: dark' };

function storedTheme() {
  try {
    const t = localStorage.getItem(THEME_KEY);
    return THEMES.includes(t) ? t : 'system';
  } catch {
    return 'system';
  }
}

// applyTheme sets the theme on the page: data-theme on the root, none for
// the system's; the theme button says it.
export function applyTheme(theme = storedTheme()) {
  if (theme === 'system') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
  for (const button of document.querySelectorAll('.theme-toggle')) button.textContent = THEME_LABEL[theme] || THEME_LABEL.system;
}

// rememberTheme keeps the theme in this browser, so that the next page
// load shows it before the settings are read.
export function rememberTheme(theme) {
  if (!THEMES.includes(theme)) return;
  try {
    localStorage.setItem(THEME_KEY, theme);
  } catch {
    // Private mode: the choice lasts as long as the page.
  }
}

let sendKey = 'enter';

// setSendKey chooses the key that sends a message: "enter" (Shift+Enter
// makes a new line) or "ctrl-enter" (Enter makes a new line).
export function setSendKey(key) {
  sendKey = key === 'ctrl-enter' ? 'ctrl-enter' : 'enter';
  for (const hint of document.querySelectorAll('.composer .composer-meta .hint')) hint.textContent = sendHint();
}

// sends reports whether a keydown in the message box sends the message.
export function sends(e) {
  if (e.key !== 'Enter' || e.isComposing) return false;
  return sendKey === 'ctrl-enter' ? (e.ctrlKey || e.metaKey) : !e.shiftKey;
}

// sendHint says how to send, under the message box.
export function sendHint() {
  return sendKey === 'ctrl-enter' ? 'Ctrl+Enter sends, Enter starts a new line.' : 'Enter sends, Shift+Enter starts a new line.';
}

// themeButton cycles system → light → dark, remembering the choice;
// onChange(theme) saves it in the person's settings.
export function themeButton(onChange = () => {}) {
  const button = h('button', { type: 'button', class: 'button subtle theme-toggle', title: 'Change the colour theme' }, THEME_LABEL[storedTheme()]);
  button.addEventListener('click', () => {
    const next = THEMES[(THEMES.indexOf(storedTheme()) + 1) % THEMES.length];
    rememberTheme(next);
    applyTheme(next);
    onChange(next);
  });
  return button;
}

// typing reports whether the key event comes from a field the person
// types in, where a shortcut's key is text.
function typing(e) {
  const t = e.target;
  return t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));
}

// shortcuts binds the page's keyboard shortcuts: "/" and Ctrl+K (⌘K)
// search the sessions, Ctrl+Shift+O (⌘⇧O) starts a new session,
// Shift+Escape goes to the message box, "?" lists the shortcuts
// (shortcuts.js).
export function shortcuts({ search, newSession, messageBox, help }) {
  document.addEventListener('keydown', (e) => {
    if (e.defaultPrevented || e.isComposing) return;
    if ((e.key === '/' && !e.ctrlKey && !e.metaKey && !e.altKey && !typing(e))
      || ((e.ctrlKey || e.metaKey) && !e.shiftKey && !e.altKey && e.key.toLowerCase() === 'k')) {
      e.preventDefault();
      search();
    } else if (e.key === '?' && !e.ctrlKey && !e.metaKey && !e.altKey && !typing(e) && !document.querySelector('dialog[open]')) {
      e.preventDefault();
      help();
    } else if ((e.ctrlKey || e.metaKey) && e.shiftKey && e.key.toLowerCase() === 'o') {
      e.preventDefault();
      newSession();
    } else if (e.key === 'Escape' && e.shiftKey) {
      e.preventDefault();
      messageBox();
    }
  });
}
