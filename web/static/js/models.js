// The model picker: a compact choice of model by the message box, shown
// when the operator offers more than one (GET /api/assistant/models).

import { h, announce, uniqueId } from './dom.js';
import { request, path } from './api.js';

let offered = null; // the list, fetched once per page load

// loadModels returns the models offered, the default first ([] when they
// could not be read: the run then uses the default).
export function loadModels() {
  if (!offered) {
    offered = request(path.models()).then((data) => (data && Array.isArray(data.models) ? data.models : []))
      .catch(() => {
        offered = null;
        return [];
      });
  }
  return offered;
}

// modelPicker returns the picker, empty and hidden until the models are
// read, and left so when there is nothing to choose. current() is the
// model chosen so far ('' for the default); onChange(name) records a new
// choice and may throw an error to show, which puts the choice back. The
// element's value() is the name chosen ('' while hidden).
export function modelPicker({ current = () => '', onChange = async () => {} } = {}) {
  const wrap = h('div', { class: 'model-picker', hidden: true });
  let select = null;
  wrap.value = () => (select && !wrap.hidden ? select.value : '');
  // sync shows the model chosen elsewhere (another tab, the API).
  wrap.sync = () => {
    if (select && document.activeElement !== select) select.value = pick(current());
  };
  let names = [];
  let fallback = '';
  const pick = (name) => (names.includes(name) ? name : fallback);
  loadModels().then((models) => {
    if (models.length < 2) return;
    names = models.map((m) => m.name);
    fallback = (models.find((m) => m.default) || models[0]).name;
    const id = uniqueId('model');
    select = h('select', { id, name: 'model' },
      models.map((m) => h('option', { value: m.name }, m.default ? `${m.name} (default)` : m.name)));
    select.value = pick(current());
    let shown = select.value;
    select.addEventListener('change', async () => {
      const chosen = select.value;
      select.disabled = true;
      try {
        await onChange(chosen);
        shown = chosen;
        announce(`Model: ${chosen}.`);
      } catch (err) {
        select.value = shown;
        announce(`The model could not be changed: ${err.message}`);
      } finally {
        select.disabled = false;
      }
    });
    wrap.append(h('label', { for: id }, 'Model'), select);
    wrap.hidden = false;
  });
  return wrap;
}
