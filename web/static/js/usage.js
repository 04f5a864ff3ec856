// Today's model tokens and the person's daily limit (GET
// /api/assistant/usage): a note by every message box once most of the
// day's tokens are used, read again as a view opens and as turns end, and
// a line in Settings.
// Without a limit nothing is shown, and nothing is read again.

import { h } from './dom.js';
import { request, path } from './api.js';

let usage = null; // the last answer, or null before the first
let reading = null; // the read in flight
let again = false; // read once more when it ends: asked for while it went
const notes = new Set(); // the notes on the page

// The share of the limit from which the note is shown.
const NEAR = 0.8;

const count = (n) => Number(n).toLocaleString('en-US');

// untilReset says how long until the count starts again, in hours and
// minutes.
function untilReset(resetsAt) {
  const m = Math.max(1, Math.ceil((new Date(resetsAt) - Date.now()) / 60000));
  if (m < 60) return `${m} min`;
  return m % 60 ? `${Math.floor(m / 60)} h ${m % 60} min` : `${m / 60} h`;
}

// usageText says where today's tokens stand against the limit: empty
// without a limit, or (unless always) while well within it.
export function usageText(u, always = false) {
  if (!u || !u.dailyLimit) {
    return always && u ? `You have used ${count(u.tokens)} model tokens today. There is no daily limit.` : '';
  }
  const reset = `00:00 UTC, in ${untilReset(u.resetsAt)}`;
  if (u.tokens >= u.dailyLimit) {
    return `You have used today’s ${count(u.dailyLimit)} model tokens, your daily limit. Usher can ask the model again after ${reset}.`;
  }
  const again = `The count starts again at ${reset}.`;
  if (!always && u.tokens < NEAR * u.dailyLimit) return '';
  const share = Math.floor((100 * u.tokens) / u.dailyLimit);
  return `You have used ${share}% of today’s model tokens (${count(u.tokens)} of ${count(u.dailyLimit)}, your daily limit). ${again}`;
}

function show(note) {
  const text = usageText(usage);
  note.textContent = text;
  note.hidden = !text;
  note.classList.toggle('at-limit', Boolean(usage && usage.dailyLimit && usage.tokens >= usage.dailyLimit));
}

// readUsage reads today's tokens again and shows them in every note; it
// returns the answer, or null when it could not be read. One read goes at
// a time: asked for while one goes, another follows it, since what it
// answers may be from before what asked.
export function readUsage() {
  if (reading) {
    again = true;
    return reading;
  }
  reading = request(path.usage()).then((u) => {
    usage = u;
    // A note no longer on the page (its view left) is forgotten.
    notes.forEach((n) => (n.isConnected ? show(n) : notes.delete(n)));
    return u;
  }).catch(() => null).finally(() => {
    reading = null;
    if (again) {
      again = false;
      readUsage();
    }
  });
  return reading;
}

// refreshUsage reads today's tokens again when a limit applies: after a
// turn ends, or a message was refused at the limit.
export function refreshUsage() {
  if (usage && usage.dailyLimit) readUsage();
}

// usageNote returns a note for a message box, hidden until most of the
// day's tokens are used. A new view's box reads them again where a limit
// applies: turns that ended while no view followed them count too.
export function usageNote() {
  const note = h('p', { class: 'usage-note', role: 'status', hidden: true });
  notes.add(note);
  if (usage) show(note);
  if (!usage || usage.dailyLimit) readUsage();
  return note;
}
