// Loading placeholders: grey shapes where the sessions list or a
// conversation will be, shown only when loading takes longer than 200 ms
// (app.css delays them), so that a fast load does not flicker.

import { h } from './dom.js';

// skeleton is a placeholder of rows bars, with label for screen readers.
export function skeleton(label, rows = 4, kind = 'lines') {
  return h('div', { class: `skeleton skeleton-${kind}`, role: 'status' },
    h('span', { class: 'visually-hidden' }, label),
    Array.from({ length: rows }, (_, i) => h('span', { class: `skeleton-bar skeleton-bar-${i % 3}`, 'aria-hidden': 'true' })));
}
