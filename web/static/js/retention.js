// What the installation keeps of a person's sessions, as GET
// /api/assistant/runs' limits say: after how long without activity a
// session is deleted, and how long a deleted one's messages are kept
// before they are erased (assistant.delete_inactive_after,
// assistant.purge_deleted_after; 0: never).

let inactiveSeconds = 0;
let purgeSeconds = 0;

// setRetention takes the limits of a listing of the runs.
export function setRetention(limits) {
  inactiveSeconds = limits.deleteInactiveAfterSeconds || 0;
  purgeSeconds = limits.purgeDeletedAfterSeconds || 0;
}

// span says a number of seconds in days ("30 days", "a day") when they
// are whole days, else in hours.
function span(seconds) {
  const day = 86400;
  if (seconds % day === 0) return seconds === day ? 'a day' : `${seconds / day} days`;
  const hours = Math.round(seconds / 3600);
  return hours === 1 ? 'an hour' : `${hours} hours`;
}

// afterDeletion is what a deletion leaves, for its confirmation.
export function afterDeletion() {
  return purgeSeconds
    ? `Its messages are erased ${span(purgeSeconds)} later; a record that it existed stays in the audit trail.`
    : 'Its record stays in the audit trail.';
}

// retentionText says how long sessions are kept, for Settings; '' when
// they are kept for good.
export function retentionText() {
  const parts = [];
  if (inactiveSeconds) parts.push(`A session without activity for ${span(inactiveSeconds)} is deleted.`);
  if (purgeSeconds) parts.push(`A deleted session's messages are erased ${span(purgeSeconds)} after its deletion.`);
  return parts.join(' ');
}
