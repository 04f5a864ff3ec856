// The sidebar's menus: each conversation's actions (rename, pin, export,
// delete) behind a menu button that follows the WAI-ARIA menu button
// pattern — aria-expanded, arrow keys, Home and End, Escape — and closes on
// a click outside it; and the closing of the page's other disclosure menus
// (<details class="more-actions">) on an outside click; a dialog that asks
// for a line of text.

import { h, uniqueId } from './dom.js';
import { modalForm } from './dialog.js';

let openMenu = null; // the open menu's close function

// menuButton is a button that opens a menu of items ({label, run, class});
// choosing one closes the menu and runs it. onToggle(open) follows the
// menu's state (the list defers its redraws while a menu is open).
export function menuButton({ label, text = '⋯', items, onToggle = () => {}, className = '' }) {
  const menuId = uniqueId('menu');
  const button = h('button', {
    type: 'button', class: `button subtle menu-button ${className}`, 'aria-haspopup': 'menu',
    'aria-expanded': 'false', 'aria-controls': menuId, 'aria-label': label, title: label,
  }, h('span', { 'aria-hidden': 'true' }, text));
  const entries = items.map((item) => h('button', { type: 'button', role: 'menuitem', tabindex: '-1', class: `menu-item ${item.class || ''}` }, item.label));
  const menu = h('div', { id: menuId, role: 'menu', class: 'menu', 'aria-label': label, hidden: true }, entries);
  const wrap = h('div', { class: 'menu-wrap' }, button, menu);

  const focusAt = (i) => entries[(i + entries.length) % entries.length].focus();
  const close = (refocus) => {
    if (menu.hidden) return;
    menu.hidden = true;
    button.setAttribute('aria-expanded', 'false');
    document.removeEventListener('pointerdown', outside, true);
    if (openMenu === close) openMenu = null;
    if (refocus) button.focus();
    onToggle(false);
  };
  const outside = (e) => {
    if (!wrap.contains(e.target)) close(false);
  };
  const open = (at) => {
    if (openMenu) openMenu(false);
    menu.hidden = false;
    button.setAttribute('aria-expanded', 'true');
    document.addEventListener('pointerdown', outside, true);
    openMenu = close;
    onToggle(true);
    focusAt(at);
  };
  button.addEventListener('click', () => (menu.hidden ? open(0) : close(true)));
  button.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      open(e.key === 'ArrowDown' ? 0 : -1);
    }
  });
  menu.addEventListener('keydown', (e) => {
    const i = entries.indexOf(document.activeElement);
    const moves = { ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: -1 };
    if (e.key in moves) {
      e.preventDefault();
      focusAt(moves[e.key]);
    } else if (e.key === 'Escape') {
      e.preventDefault();
      e.stopPropagation();
      close(true);
    } else if (e.key === 'Tab') {
      close(false);
    }
  });
  entries.forEach((entry, i) => entry.addEventListener('click', () => {
    close(true);
    items[i].run();
  }));
  return wrap;
}

// closeMenusOnOutsideClick closes the page's open <details> menus
// (class more-actions) when the person clicks or taps outside them.
export function closeMenusOnOutsideClick() {
  document.addEventListener('pointerdown', (e) => {
    for (const d of document.querySelectorAll('details.more-actions[open]')) {
      if (!d.contains(e.target)) d.open = false;
    }
  }, true);
}

// promptDialog asks for one line of text in a modal dialog: Enter or the
// confirm button saves (onSave may throw an error to show), Escape or
// Cancel keeps what was.
export function promptDialog({ title, label, value, confirm, maxLength = 200, onSave }) {
  const inputId = uniqueId('dialog-input');
  const input = h('input', { id: inputId, type: 'text', maxlength: String(maxLength), required: true, value });
  modalForm({
    title,
    confirm,
    body: [h('p', null, h('label', { for: inputId }, label)), h('p', null, input)],
    focus: input,
    onSubmit: async () => {
      if (!input.value.trim()) throw new Error('Type a title.');
      await onSave(input.value.trim());
    },
  });
  input.select();
}
