// How a run's status reads to a person.

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
