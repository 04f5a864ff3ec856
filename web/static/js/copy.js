// Copy buttons: a code block's code, a message's text (an assistant
// reply's Markdown source). The button says "Copied" for a moment, and the
// page's live region announces it.

import { h, announce } from './dom.js';

const SHOWN = 2000; // ms "Copied" stays on the button

// copyButton is a button that copies text() to the clipboard. label is its
// accessible name ("Copy code"); the visible word is "Copy" (by CSS, for
// a code block: see .code-copy — so that the block's text is its code).
export function copyButton({ label, text, className = 'link-button copy', visible = 'Copy' }) {
  let timer = 0;
  const button = h('button', { type: 'button', class: className, 'aria-label': label, 'data-state': 'ready' }, visible);
  button.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text());
    } catch {
      announce('The text could not be copied: select it and copy it instead.');
      return;
    }
    button.dataset.state = 'copied';
    if (visible) button.textContent = 'Copied';
    announce('Copied');
    clearTimeout(timer);
    timer = setTimeout(() => {
      button.dataset.state = 'ready';
      if (visible) button.textContent = visible;
    }, SHOWN);
  });
  return button;
}

// messageCopy puts a Copy button in a message's footer: it copies text
// (the message as written: Markdown for a reply). Its accessible name
// says which message, by its first words.
export function messageCopy(article, text) {
  const meta = article && article.querySelector('.msg-meta');
  if (!meta || !text) return;
  const words = text.replace(/\s+/g, ' ').trim();
  const about = words.length > 40 ? `${words.slice(0, 39)}…` : words;
  const label = `${article.classList.contains('msg-user') ? 'Copy your message' : 'Copy the reply'}: ${about}`;
  meta.prepend(copyButton({ label, text: () => text, className: 'link-button msg-copy' }), ' ');
}
