// The help dialog that lists the keyboard shortcuts ("?" opens it; the
// keys themselves are bound in prefs.js).

import { h, uniqueId } from './dom.js';
import { sendHint } from './prefs.js';

// The shortcuts, as the dialog lists them.
function list() {
  return [
    [['Ctrl', 'K'], 'Search the sessions (also /)'],
    [['Ctrl', 'Shift', 'O'], 'Start a new session'],
    [['Shift', 'Esc'], 'Go to the message box'],
    [['Esc'], 'Close a menu, a dialog or the sessions drawer'],
    [['?'], 'Show this list'],
  ];
}

// showShortcuts opens the list of shortcuts in a modal <dialog>.
export function showShortcuts() {
  if (document.querySelector('.shortcuts-dialog')) return;
  const titleId = uniqueId('dialog-title');
  const close = h('button', { type: 'button', class: 'button primary' }, 'Close');
  const mac = /Mac|iPhone|iPad/.test(navigator.platform);
  const keys = (ks) => ks.map((k, i) => [i ? '+' : '', h('kbd', null, mac && k === 'Ctrl' ? '⌘' : k)]);
  const dialog = h('dialog', { class: 'dialog shortcuts-dialog', 'aria-labelledby': titleId },
    h('h2', { id: titleId }, 'Keyboard shortcuts'),
    h('dl', { class: 'shortcut-list' }, list().map(([ks, what]) => [h('dt', null, keys(ks)), h('dd', null, what)])),
    h('p', { class: 'hint' }, `In the message box: ${sendHint()}`),
    h('div', { class: 'actions' }, close));
  const opener = document.activeElement;
  close.addEventListener('click', () => dialog.close());
  dialog.addEventListener('close', () => {
    dialog.remove();
    if (opener && opener.isConnected) opener.focus();
  });
  document.body.append(dialog);
  dialog.showModal();
  close.focus();
}
