// The person's preferences in this browser: the colour theme (the
// system's, light or dark, in localStorage) and the keyboard shortcuts.

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
// the system's.
export function applyTheme(theme = storedTheme()) {
  if (theme === 'system') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
}

// themeButton cycles system → light → dark, remembering the choice.
export function themeButton() {
  const button = h('button', { type: 'button', class: 'button subtle theme-toggle' });
  const show = (t) => {
    button.textContent = THEME_LABEL[t];
    button.title = 'Change the colour theme';
  };
  show(storedTheme());
  button.addEventListener('click', () => {
    const next = THEMES[(THEMES.indexOf(storedTheme()) + 1) % THEMES.length];
    try {
      localStorage.setItem(THEME_KEY, next);
    } catch {
      // Private mode: the choice lasts as long as the page.
    }
    applyTheme(next);
    show(next);
  });
  return button;
}

// typing reports whether the key event comes from a field the person
// types in, where a shortcut's key is text.
function typing(e) {
  const t = e.target;
  return t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName));
}

// shortcuts binds the page's keyboard shortcuts: "/" searches the
// sessions, Ctrl+Shift+O (⌘⇧O) starts a new session, Shift+Escape goes to
// the message box.
export function shortcuts({ search, newSession, messageBox }) {
  document.addEventListener('keydown', (e) => {
    if (e.defaultPrevented || e.isComposing) return;
    if (e.key === '/' && !e.ctrlKey && !e.metaKey && !e.altKey && !typing(e)) {
      e.preventDefault();
      search();
    } else if ((e.ctrlKey || e.metaKey) && e.shiftKey && e.key.toLowerCase() === 'o') {
      e.preventDefault();
      newSession();
    } else if (e.key === 'Escape' && e.shiftKey) {
      e.preventDefault();
      messageBox();
    }
  });
}
