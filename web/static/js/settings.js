// The person's settings, stored by Usher for them (GET and PUT
// /api/assistant/settings) so that they follow them from browser to
// browser: custom instructions (added to the system prompt of their new
// turns), the model new sessions start with, the theme, and the key that
// sends a message. The settings dialog edits them.

import { h, announce, uniqueId } from './dom.js';
import { request } from './api.js';
import { loadModels } from './models.js';
import { readUsage, usageText } from './usage.js';
import { retentionText } from './retention.js';
import { modalForm } from './dialog.js';
import { applyTheme, rememberTheme, setSendKey } from './prefs.js';

const SETTINGS = '/api/assistant/settings';
const MAX_INSTRUCTIONS = 4000;

let current = { instructions: '', defaultModel: '', theme: 'system', sendKey: 'enter' };

// settings returns the settings as last read or saved.
export function settings() {
  return current;
}

// apply makes the page follow s: its theme and its send key.
function apply(s) {
  current = s;
  rememberTheme(s.theme);
  applyTheme(s.theme);
  setSendKey(s.sendKey);
}

// A change not yet saved (the page was left, or reloaded, before its PUT
// was answered) waits in this browser, marked with whose it is, and is
// saved at the next load, so that a theme chosen just before a reload is
// the one shown after it.
const UNSAVED = 'usher.settings.unsaved';
let owner = '';

function unsaved() {
  try {
    const u = JSON.parse(localStorage.getItem(UNSAVED) || 'null');
    return u && u.owner === owner && u.change ? u.change : null;
  } catch {
    return null;
  }
}

function keepUnsaved(change) {
  try {
    if (change) localStorage.setItem(UNSAVED, JSON.stringify({ owner, change }));
    else localStorage.removeItem(UNSAVED);
  } catch {
    // Private mode: a save under way when the page is left is lost.
  }
}

// loadSettings reads the settings of the person signed in (who: their
// principal id) and applies them, with a change of theirs this browser
// has not saved yet, which it saves now; the page keeps this browser's
// settings while they cannot be read.
export async function loadSettings(who = owner) {
  owner = who;
  try {
    const s = await request(SETTINGS);
    const change = unsaved();
    apply({ ...s, ...change });
    if (change) saveSettings({}).catch(() => {});
  } catch {
    // Signed out, or unreachable: what this browser remembers stays.
  }
  return current;
}

let saving = Promise.resolve();
let queued = 0;

// saveSettings saves a change of some fields and applies the result. The
// saves go one after another, each with every change not yet saved, so
// that the last change made is the one kept, and shown.
export function saveSettings(change) {
  const all = { ...unsaved(), ...change };
  keepUnsaved(all);
  queued += 1;
  const save = saving.catch(() => {}).then(() => request(SETTINGS, { method: 'PUT', body: all })).then((s) => {
    queued -= 1;
    // Only the last save's answer is shown: an earlier one would turn
    // the page back to a choice already changed.
    if (queued === 0) {
      keepUnsaved(null);
      apply(s);
    }
    return current;
  }, (err) => {
    queued -= 1;
    throw err;
  });
  saving = save;
  return save;
}

// radios is a fieldset of radio buttons for one setting.
function radios(legend, name, options, value) {
  return h('fieldset', { class: 'settings-choice' }, h('legend', null, legend),
    options.map(([v, label]) => {
      const id = uniqueId(`settings-${name}`);
      return h('span', { class: 'settings-option' },
        h('input', { type: 'radio', id, name, value: v, checked: v === value }), h('label', { for: id }, label));
    }));
}

// openSettings shows the settings dialog; Save stores every field at once,
// Cancel or Escape keeps what was.
export async function openSettings() {
  const s = await loadSettings();
  const instrId = uniqueId('settings-instructions');
  const modelId = uniqueId('settings-model');
  const countId = uniqueId('settings-count');
  const instructions = h('textarea', { id: instrId, name: 'instructions', rows: '5', maxlength: String(MAX_INSTRUCTIONS), 'aria-describedby': countId });
  instructions.value = s.instructions;
  const count = h('p', { id: countId, class: 'hint' });
  const counted = () => { count.textContent = `Added to what Usher is told at the start of each of your new turns. ${instructions.value.length} of ${MAX_INSTRUCTIONS} characters.`; };
  counted();
  instructions.addEventListener('input', counted);
  const model = h('select', { id: modelId, name: 'defaultModel', class: 'select' }, h('option', { value: '' }, 'The default model'));
  const [models, usage] = await Promise.all([loadModels(), readUsage()]);
  for (const m of models) model.append(h('option', { value: m.name }, m.default ? `${m.name} (default)` : m.name));
  model.value = models.some((m) => m.name === s.defaultModel) ? s.defaultModel : '';
  modalForm({
    title: 'Settings',
    className: 'settings-dialog',
    confirm: 'Save',
    focus: instructions,
    body: [
      h('p', null, h('label', { for: instrId }, 'Custom instructions')), instructions, count,
      models.length > 1 ? h('p', { class: 'settings-row' }, h('label', { for: modelId }, 'Model for new sessions'), model) : null,
      radios('Theme', 'theme', [['system', 'As the device'], ['light', 'Light'], ['dark', 'Dark']], s.theme),
      radios('Send a message with', 'sendKey', [['enter', 'Enter (Shift+Enter: new line)'], ['ctrl-enter', 'Ctrl+Enter (Enter: new line)']], s.sendKey),
      usage ? h('p', { class: 'hint settings-usage' }, usageText(usage, true)) : null,
      retentionText() ? h('p', { class: 'hint settings-retention' }, retentionText()) : null,
    ],
    onSubmit: async (form) => {
      const data = new FormData(form);
      await saveSettings({
        instructions: instructions.value,
        defaultModel: models.length > 1 ? model.value : s.defaultModel,
        theme: data.get('theme'),
        sendKey: data.get('sendKey'),
      });
      announce('Settings saved.');
    },
  });
}
