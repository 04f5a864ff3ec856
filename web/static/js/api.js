// The API client: same-origin fetch with the session cookie. State-changing
// requests are plain same-origin fetches, which the server's CSRF
// protection (Sec-Fetch-Site / Origin) accepts and any other site's are
// refused.

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let onSignedOut = () => {};

// whenSignedOut sets what happens when the API answers 401: the session
// expired or was signed out in another tab.
export function whenSignedOut(fn) {
  onSignedOut = fn;
}

// request calls the API and returns its JSON body, or, with raw: true,
// {data, text}: the body's exact text too (for the exact arguments of an
// approval). Errors are APIError with the API's code and message.
export async function request(path, { method = 'GET', body, headers = {}, raw = false, signal } = {}) {
  const init = { method, headers: { Accept: 'application/json', ...headers }, credentials: 'same-origin', signal, cache: 'no-store' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    if (err && err.name === 'AbortError') throw err;
    throw new APIError(0, 'network', 'Usher could not be reached. Check your connection and try again.');
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!res.ok) {
    const e = (data && data.error) || {};
    if (res.status === 401) onSignedOut();
    throw new APIError(res.status, e.code || `http_${res.status}`, e.message || `The request failed (${res.status}).`);
  }
  return raw ? { data, text } : data;
}

export const path = {
  runs: () => '/api/assistant/runs',
  run: (id) => `/api/assistant/runs/${encodeURIComponent(id)}`,
  messages: (id, query) => `/api/assistant/runs/${encodeURIComponent(id)}/messages?${new URLSearchParams(query)}`,
  events: (id, query) => `/api/assistant/runs/${encodeURIComponent(id)}/events?${new URLSearchParams(query)}`,
  eventStream: (id, after) => `/api/assistant/runs/${encodeURIComponent(id)}/events/stream?after=${encodeURIComponent(after)}`,
  updates: () => '/api/assistant/updates/stream',
  models: () => '/api/assistant/models',
  usage: () => '/api/assistant/usage',
  approvals: () => '/api/approvals',
  approval: (id) => `/api/approvals/${encodeURIComponent(id)}`,
  apps: () => '/api/oauth/apps',
  // A client id may be a URL: its slashes are escaped, one path segment.
  app: (clientId) => `/api/oauth/apps/${encodeURIComponent(clientId)}`,
};

// newKey returns a random Idempotency-Key.
export function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}
