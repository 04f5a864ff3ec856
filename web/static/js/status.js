// How a run's status reads to a person.

import { settings } from './settings.js';

const CLOSED = new Set(['Completed', 'Failed', 'Cancelled']);

// isClosed reports whether a run takes no more messages.
export function isClosed(run) {
  return CLOSED.has(run.status);
}

// runStatus returns [label, CSS class] for a run (RunView).
export function runStatus(run) {
  switch (run.status) {
    case 'InProgress':
      return run.working ? ['Working', 'status-working'] : ['Active', 'status-active'];
    case 'AwaitingApproval':
      return ['Awaiting approval', 'status-awaiting'];
    case 'Idle':
      return ['Idle', 'status-muted'];
    case 'Completed':
      return ['Completed', 'status-ok'];
    case 'Failed':
      return ['Failed', 'status-bad'];
    case 'Cancelled':
      return ['Cancelled', 'status-muted'];
    default:
      return [run.status || 'Unknown', 'status-muted'];
  }
}

// runTitle is a run's title, or a stand-in.
export function runTitle(run) {
  return (run.title || '').trim() || 'Untitled session';
}

// contextUse returns [text, title, high] for the run's context use, as
// "context: 61% of 128k" (a share under half a percent reads "<1%") with
// the exact figures in title (which says that the person's custom
// instructions count in it, when they have any), and high when the context holds 80% of the
// model's limit or more; null before a turn recorded one.
export function contextUse(run) {
  const c = run.context;
  if (!c || !(c.limit > 0)) return null;
  const share = c.tokens / c.limit;
  const percent = Math.round(share * 100);
  const how = c.source === 'reported' ? 'as the model provider reported' : 'estimated';
  return [
    `context: ${percent === 0 && c.tokens > 0 ? '<1' : percent}% of ${shortTokens(c.limit)}`,
    `${c.tokens.toLocaleString('en')} of ${c.limit.toLocaleString('en')} tokens, ${how}${settings().instructions.trim() ? ', your custom instructions included' : ''}`,
    share >= 0.8,
  ];
}

// shortTokens writes a token count as 950, 80k, 1.5k or 2M.
function shortTokens(n) {
  const short = (v, unit) => `${Number.isInteger(v) ? v : v.toFixed(1).replace(/\.0$/, '')}${unit}`;
  if (n >= 1e6) return short(Math.round(n / 1e5) / 10, 'M');
  if (n >= 1e3) return short(Math.round(n / 1e2) / 10, 'k');
  return String(n);
}
