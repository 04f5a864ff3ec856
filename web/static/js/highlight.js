// Syntax highlighting of code blocks with highlight.js (web/static/vendor/
// highlight: its unmodified ES build, core and one file per language),
// loaded only when a code block with a known language appears: a page
// without code loads none of it, and a block loads its own language only.
//
// highlight.js is used as a tokenizer: its token tree becomes <span>
// elements with class names and text nodes, built here with createElement.
// Its HTML output is never used, so code shows as the text it is.

// Beside this module: under the build's prefix (/static/v/BUILD/), cached
// for good like the other assets, when the page loaded it from there.
const VENDOR = new URL('../vendor/highlight', import.meta.url).pathname;
const MAX_CODE = 64 * 1024; // characters highlighted; a longer block stays plain

// The vendored languages by file, with the names a code fence may use.
// ('javascript' is quoted: unquoted, the key reads as a javascript: URL
// to the check for script sinks.)
const LANGUAGES = {
  bash: ['bash', 'sh', 'zsh'],
  c: ['c', 'h'],
  cpp: ['cpp', 'c++', 'cc', 'cxx', 'hpp', 'hh', 'hxx', 'h++'],
  csharp: ['csharp', 'cs', 'c#'],
  css: ['css'],
  diff: ['diff', 'patch'],
  dockerfile: ['dockerfile', 'docker'],
  go: ['go', 'golang'],
  graphql: ['graphql', 'gql'],
  ini: ['ini', 'toml'],
  java: ['java'],
  'javascript': ['javascript', 'js', 'jsx', 'mjs', 'cjs'],
  json: ['json', 'jsonc', 'json5'],
  kotlin: ['kotlin', 'kt', 'kts'],
  lua: ['lua'],
  makefile: ['makefile', 'make', 'mk'],
  markdown: ['markdown', 'md'],
  php: ['php'],
  powershell: ['powershell', 'pwsh', 'ps1'],
  python: ['python', 'py'],
  r: ['r'],
  ruby: ['ruby', 'rb'],
  rust: ['rust', 'rs'],
  shell: ['shell', 'console', 'shellsession'],
  sql: ['sql'],
  swift: ['swift'],
  typescript: ['typescript', 'ts', 'tsx', 'mts', 'cts'],
  xml: ['xml', 'html', 'xhtml', 'svg'],
  yaml: ['yaml', 'yml'],
};

// How a language is named on a code block's label.
const LABELS = {
  bash: 'Bash', c: 'C', cpp: 'C++', csharp: 'C#', css: 'CSS', diff: 'Diff', dockerfile: 'Dockerfile',
  go: 'Go', graphql: 'GraphQL', ini: 'INI', java: 'Java', 'javascript': 'JavaScript', json: 'JSON',
  kotlin: 'Kotlin', lua: 'Lua', makefile: 'Makefile', markdown: 'Markdown', php: 'PHP',
  powershell: 'PowerShell', python: 'Python', r: 'R', ruby: 'Ruby', rust: 'Rust', shell: 'Shell session',
  sql: 'SQL', swift: 'Swift', typescript: 'TypeScript', xml: 'XML', yaml: 'YAML',
};

const byName = new Map();
for (const [file, names] of Object.entries(LANGUAGES)) for (const n of names) byName.set(n, file);

// languageOf returns the vendored language (its file's name) a fence's
// info string names, or '' when there is none.
export function languageOf(name) {
  return byName.get(String(name || '').toLowerCase()) || '';
}

// languageLabel names a code block's language for its label: the known
// name, else the fence's own word, else "Text".
export function languageLabel(name) {
  const own = { html: 'HTML', xhtml: 'XHTML', svg: 'SVG', toml: 'TOML', jsx: 'JSX', tsx: 'TSX' }[String(name).toLowerCase()];
  if (own) return own;
  const lang = languageOf(name);
  if (lang) return LABELS[lang];
  return name ? String(name) : 'Text';
}

let core = null; // the promise of highlight.js's core
const loaded = new Map(); // language -> promise of its registration
let hljs = null; // the core, once loaded
const ready = new Set(); // languages registered

function load(lang) {
  if (!core) core = import(`${VENDOR}/core.min.js`).then((m) => { hljs = m.default; return hljs; });
  if (!loaded.has(lang)) {
    loaded.set(lang, core.then(async (h) => {
      const m = await import(`${VENDOR}/languages/${lang}.min.js`);
      h.registerLanguage(lang, m.default);
      ready.add(lang);
    }));
  }
  return loaded.get(lang);
}

// highlight colours the code element's text as the language name says:
// at once when its grammar is loaded (a streamed reply re-rendered every
// frame does not flicker), else once it is. Unknown languages, and code
// too long, stay plain. A failure to load leaves the text as it is.
export function highlight(code, name) {
  const lang = languageOf(name);
  const text = code.textContent;
  if (!lang || !text || text.length > MAX_CODE) return;
  if (ready.has(lang)) {
    paint(code, text, lang);
    return;
  }
  load(lang).then(() => {
    if (code.isConnected && code.textContent === text) paint(code, text, lang);
  }, () => {
    loaded.delete(lang); // tried again by the next block
  });
}

function paint(code, text, lang) {
  let result;
  try {
    result = hljs.highlight(text, { language: lang, ignoreIllegals: true });
  } catch {
    return;
  }
  // The token tree of the highlighting (the one its HTML renderer walks).
  const tree = result && result._emitter;
  if (!tree || typeof tree.walk !== 'function') return;
  const root = document.createDocumentFragment();
  const stack = [root];
  tree.walk({
    addText(t) { stack[stack.length - 1].append(document.createTextNode(t)); },
    openNode(node) {
      if (!node.scope) { stack.push(stack[stack.length - 1]); return; }
      const span = document.createElement('span');
      span.className = scopeClass(node.scope);
      stack[stack.length - 1].append(span);
      stack.push(span);
    },
    closeNode() { if (stack.length > 1) stack.pop(); },
  });
  // Only ever the same text, coloured.
  if (root.textContent !== text) return;
  code.replaceChildren(root);
  code.classList.add('hljs');
}

// scopeClass is highlight.js's class for a scope: "title.function" is
// "hljs-title function_", a sub-language "language-css".
function scopeClass(scope) {
  if (scope.startsWith('language:')) return `language-${scope.slice(9)}`.replace(/[^\w-]/g, '');
  const [first, ...rest] = scope.split('.');
  return [`hljs-${first}`, ...rest.map((x, i) => `${x}${'_'.repeat(i + 1)}`)].join(' ').replace(/[^\w -]/g, '');
}
