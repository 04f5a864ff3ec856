// Modal dialogs: a <dialog> holding a form — a title, what it asks, an
// error line, Cancel and a confirm button. Escape or Cancel closes it and
// gives the focus back to where it was; the confirm button runs onSubmit,
// which may throw an error to show (the dialog then stays open).

import { h, uniqueId } from './dom.js';

// modalForm shows the dialog and returns it. body: the nodes between the
// title and the buttons; focus: the element to focus (Cancel by default);
// className: the dialog's classes beside "dialog".
export function modalForm({ title, body, confirm, onSubmit, focus = null, className = '' }) {
  const titleId = uniqueId('dialog-title');
  const error = h('p', { class: 'form-error', role: 'alert' });
  const ok = h('button', { type: 'submit', class: 'button primary', value: 'ok' }, confirm);
  const cancel = h('button', { type: 'button', class: 'button' }, 'Cancel');
  const form = h('form', { method: 'dialog' }, h('h2', { id: titleId }, title), body, error,
    h('div', { class: 'actions' }, cancel, ok));
  const dialog = h('dialog', { class: `dialog ${className}`.trim(), 'aria-labelledby': titleId }, form);
  const opener = document.activeElement;
  cancel.addEventListener('click', () => dialog.close());
  dialog.addEventListener('close', () => {
    dialog.remove();
    if (opener && opener.isConnected) opener.focus();
  });
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    ok.disabled = true;
    error.textContent = '';
    try {
      await onSubmit(form);
      dialog.close();
    } catch (err) {
      error.textContent = err.message;
      ok.disabled = false;
    }
  });
  document.body.append(dialog);
  dialog.showModal();
  (focus || cancel).focus();
  return dialog;
}
