// The OAuth client of Usher's end-to-end tests (oauth_test.go): the official
// MCP TypeScript SDK's client, with its own authorization flow, against a
// started Usher. The browser's part — the sign-in at the development
// provider as "alice" and the consent page — is driven over HTTP with a
// cookie jar, so that the whole flow runs unattended.
//
// Usage:
//
//	node oauth-client.mjs flow MCP_URL USER_API_TOKEN
//	    The whole flow twice, once with a client registered by DCR and once
//	    with a Client ID Metadata Document served by this script on
//	    loopback; each time tools/list, tools/call, an approval and a
//	    refresh. Prints one JSON object with what each step saw.
//	node oauth-client.mjs token MCP_URL
//	    The flow with a DCR client only; prints {"access_token": ...}.
//	node oauth-client.mjs authorize AUTHORIZATION_URL
//	    The browser's part only, for another client's authorization
//	    request: signs in, approves, and follows the redirect to the
//	    client's redirect URI. Prints {"redirect": ...}.
//
// Failures are printed as {"error": ...} with exit status 1.

import http from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const USER = 'alice';

// ---- The browser: a cookie jar, redirects followed by hand, two forms.

// decodeEntities undoes html/template's escaping of attribute values.
function decodeEntities(s) {
  return s.replace(/&(#x[0-9a-f]+|#[0-9]+|amp|lt|gt|quot|apos|#39);/gi, (m, e) => {
    const l = e.toLowerCase();
    if (l.startsWith('#x')) return String.fromCodePoint(parseInt(l.slice(2), 16));
    if (l.startsWith('#')) return String.fromCodePoint(parseInt(l.slice(1), 10));
    return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[l];
  });
}

// attrs parses the attributes of one tag.
function attrs(tag) {
  const out = {};
  for (const m of tag.matchAll(/([a-zA-Z_:-]+)\s*=\s*"([^"]*)"/g)) out[m[1].toLowerCase()] = decodeEntities(m[2]);
  return out;
}

// parseForm finds the page's one POST form: its action and its fields
// (hidden inputs, the text input's name, the submit buttons' values).
function parseForm(html) {
  const form = html.match(/<form\b[^>]*>/i);
  if (!form) return undefined;
  const f = attrs(form[0]);
  const hidden = {}, text = [], buttons = [];
  for (const m of html.matchAll(/<(input|button)\b[^>]*>/gi)) {
    const a = attrs(m[0]);
    if (m[1].toLowerCase() === 'button') { if (a.name) buttons.push({ name: a.name, value: a.value }); continue; }
    if (a.type === 'hidden') hidden[a.name] = a.value ?? '';
    else if (a.name) text.push(a.name);
  }
  return { method: (f.method || 'get').toLowerCase(), action: f.action ?? '', hidden, text, buttons };
}

class Browser {
  constructor() { this.cookies = new Map(); this.hops = []; }

  cookieHeader(url) {
    const jar = this.cookies.get(url.host);
    return jar ? [...jar].map(([k, v]) => `${k}=${v}`).join('; ') : '';
  }

  keep(url, res) {
    for (const c of res.headers.getSetCookie()) {
      const [pair, ...rest] = c.split(';');
      const i = pair.indexOf('=');
      const name = pair.slice(0, i).trim(), value = pair.slice(i + 1).trim();
      const jar = this.cookies.get(url.host) ?? new Map();
      const expired = rest.some(p => /^\s*max-age=(0|-)/i.test(p));
      if (expired || value === '') jar.delete(name); else jar.set(name, value);
      this.cookies.set(url.host, jar);
    }
  }

  async request(url, { method = 'GET', form, origin } = {}) {
    const headers = { accept: 'text/html' };
    const cookie = this.cookieHeader(url);
    if (cookie) headers.cookie = cookie;
    let body;
    if (form) {
      body = new URLSearchParams(form).toString();
      headers['content-type'] = 'application/x-www-form-urlencoded';
      headers.origin = origin;
    }
    const res = await fetch(url, { method, headers, body, redirect: 'manual' });
    this.keep(url, res);
    this.hops.push({ method, path: url.pathname, status: res.status });
    return res;
  }

  // authorize follows an authorization request from the authorization
  // endpoint to the client's redirect URI, signing in as USER and
  // approving, and returns that final URL (not requested unless follow).
  async authorize(start, { isRedirect, follow = false }) {
    let url = new URL(start), opts = {};
    for (let i = 0; i < 20; i++) {
      const res = await this.request(url, opts);
      opts = {};
      if (res.status >= 300 && res.status < 400) {
        await res.arrayBuffer();
        const next = new URL(res.headers.get('location'), url);
        if (isRedirect(next)) {
          if (follow) {
            const r = await this.request(next);
            await r.arrayBuffer();
          }
          return next;
        }
        url = next;
        continue;
      }
      const html = await res.text();
      if (res.status !== 200) throw new Error(`${url.pathname}: ${res.status} ${html.slice(0, 500)}`);
      const form = parseForm(html);
      if (!form || form.method !== 'post') throw new Error(`${url.pathname}: a page without a form: ${html.slice(0, 500)}`);
      const fields = { ...form.hidden };
      const approve = form.buttons.find(b => b.value === 'approve');
      if (form.text.includes('username')) {
        fields.username = USER; // the development provider's sign-in
        this.hops.at(-1).page = 'sign-in';
      } else if (approve && 'csrf_token' in form.hidden) {
        fields[approve.name] = approve.value; // Usher's consent page
        this.hops.at(-1).page = 'consent';
        this.hops.at(-1).fields = Object.keys(fields).sort();
      } else {
        throw new Error(`${url.pathname}: an unknown form: ${html.slice(0, 500)}`);
      }
      const action = new URL(form.action || url.href, url);
      opts = { method: 'POST', form: fields, origin: url.origin };
      url = action;
    }
    throw new Error('more than 20 hops');
  }
}

// ---- The OAuth client provider of the SDK, kept in memory.

class Provider {
  constructor({ redirectUrl, clientInformation, log }) {
    this._redirectUrl = redirectUrl;
    this._client = clientInformation;
    this._tokens = undefined;
    this._verifier = undefined;
    this._state = undefined;
    this.log = log;
    this.browser = new Browser();
    this.code = undefined;
    this.tamper = false; // tokens() answers with a spoilt access token
  }
  get redirectUrl() { return this._redirectUrl; }
  get clientMetadata() {
    return {
      client_name: 'Usher e2e SDK client',
      redirect_uris: [this._redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  state() { this._state = crypto.randomUUID(); return this._state; }
  clientInformation() { return this._client; }
  saveClientInformation(info) { this._client = info; }
  tokens() {
    if (!this._tokens || !this.tamper) return this._tokens;
    // A token Usher no longer accepts, as an expired one: its
    // signature spoilt, so that the next request is answered 401.
    const t = this._tokens.access_token;
    return { ...this._tokens, access_token: t.slice(0, -4) + (t.endsWith('AAAA') ? 'BBBB' : 'AAAA') };
  }
  saveTokens(tokens) { this._tokens = tokens; this.tamper = false; }
  saveCodeVerifier(v) { this._verifier = v; }
  codeVerifier() { return this._verifier; }
  async redirectToAuthorization(authorizationUrl) {
    const redirect = new URL(this._redirectUrl);
    const params = Object.fromEntries(authorizationUrl.searchParams);
    this.log.authorizationRequest = { ...params, code_challenge: params.code_challenge ? 'present' : 'missing' };
    const from = this.browser.hops.length;
    const back = await this.browser.authorize(authorizationUrl, {
      isRedirect: u => u.origin === redirect.origin && u.pathname === redirect.pathname,
    });
    this.log.hops = this.browser.hops.slice(from);
    const q = back.searchParams;
    if (q.get('error')) throw new Error(`authorization error: ${q.get('error')} ${q.get('error_description')}`);
    this.log.authorizationResponse = { state_matches: q.get('state') === this._state, iss: q.get('iss'), code: q.get('code') ? 'present' : 'missing' };
    this.code = q.get('code');
  }
}

// jwtClaims decodes a JWT's payload (not verified: Usher did that).
function jwtClaims(token) {
  return JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
}

// loggingFetch records every request the SDK makes: method, path, status,
// and the grant type of a token request.
function loggingFetch(requests) {
  return async (url, init = {}) => {
    const u = new URL(url instanceof Request ? url.url : url);
    const entry = { method: (init.method || 'GET').toUpperCase(), path: u.pathname };
    if (u.pathname.endsWith('/oauth/token') && init.body) {
      entry.grant_type = new URLSearchParams(String(init.body)).get('grant_type');
    }
    let body;
    if (entry.path === '/mcp' && typeof init.body === 'string') {
      try { body = JSON.parse(init.body); entry.rpc = body.method; } catch { /* not JSON */ }
    }
    const res = await fetch(url, init);
    entry.status = res.status;
    if (res.status === 401) entry.www_authenticate = res.headers.get('www-authenticate');
    requests.push(entry);
    return res;
  };
}

// connect connects a new SDK client, going through the authorization flow
// when Usher asks for it.
async function connect(mcpURL, provider, requests) {
  const make = () => new StreamableHTTPClientTransport(new URL(mcpURL), { authProvider: provider, fetch: loggingFetch(requests) });
  let transport = make();
  let client = new Client({ name: 'usher-e2e-oauth', version: '1.0.0' });
  try {
    await client.connect(transport);
    return { client, authorized: false };
  } catch (err) {
    if (!(err instanceof UnauthorizedError) || !provider.code) throw err;
  }
  await transport.finishAuth(provider.code);
  await client.close().catch(() => {});
  transport = make();
  client = new Client({ name: 'usher-e2e-oauth', version: '1.0.0' });
  await client.connect(transport);
  return { client, authorized: true };
}

// approve approves an approval as the user, through Usher's API.
async function approve(base, userToken, id) {
  const res = await fetch(`${base}/api/approvals/${id}/decision`, {
    method: 'POST',
    headers: { authorization: `Bearer ${userToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({ decision: 'approve', reason: 'e2e' }),
  });
  return { status: res.status, body: await res.text() };
}

// run is one whole flow with one kind of client registration.
async function run(mcpURL, userToken, kind, loopback, { tokenOnly = false } = {}) {
  const out = { kind, requests: [], auth: {} };
  const redirectUrl = `${loopback.url}/callback`;
  let clientInformation;
  if (kind === 'cimd') {
    // The SDK only uses a metadata document's URL of its own accord when
    // it is https; this one is loopback http, which Usher accepts because
    // its own public URL is loopback. So the client knows its client_id
    // beforehand, as a pre-registered client does, and registers nothing.
    const clientID = `${loopback.url}/client-${crypto.randomUUID()}.json`;
    loopback.documents.set(new URL(clientID).pathname, {
      client_id: clientID,
      client_name: 'Usher e2e CIMD client',
      redirect_uris: [redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    });
    clientInformation = { client_id: clientID };
    out.client_id = clientID;
  }
  const provider = new Provider({ redirectUrl, clientInformation, log: out.auth });
  const { client, authorized } = await connect(mcpURL, provider, out.requests);
  out.authorized = authorized;
  if (kind === 'dcr') out.client_id = provider.clientInformation()?.client_id;
  if (kind === 'cimd') out.document_fetches = loopback.fetches.get(new URL(out.client_id).pathname) ?? 0;
  out.token = { scope: provider._tokens.scope, expires_in: provider._tokens.expires_in, has_refresh: !!provider._tokens.refresh_token };
  const first = jwtClaims(provider._tokens.access_token);
  out.token.claims = { aud: first.aud, client_id: first.client_id, scope: first.scope, jti: first.jti, sub: first.sub };

  if (tokenOnly) {
    await client.close();
    return { access_token: provider._tokens.access_token };
  }
  out.tools = (await client.listTools()).tools.map(t => t.name).sort();
  out.notes_list = await client.callTool({ name: 'notes_list', arguments: {} });

  const args = { name: `oauth-${kind}`, body: 'written through OAuth' };
  const pending = await client.callTool({ name: 'notes_write', arguments: args });
  out.pending = pending;
  const approval = pending._meta?.['usher/approval'];
  if (approval?.id) {
    out.decision = await approve(new URL(mcpURL).origin, userToken, approval.id);
    out.approved = await client.callTool({ name: 'notes_write', arguments: args });
  }

  // Refresh: the access token is spoilt, Usher answers 401, the SDK
  // redeems its refresh token and retries.
  const before = out.requests.length;
  provider.tamper = true;
  out.after_refresh = { tools: (await client.listTools()).tools.length };
  out.after_refresh.requests = out.requests.slice(before);
  const second = jwtClaims(provider._tokens.access_token);
  out.after_refresh.jti = second.jti;
  out.after_refresh.client_id = second.client_id;
  out.after_refresh.sub = second.sub;
  out.access_token = provider._tokens.access_token;
  await client.close();

  // A second authorization of the same client, with the same browser:
  // alice is signed in and consented before, so the code comes at once.
  if (kind === 'dcr') {
    provider._tokens = undefined;
    provider.code = undefined;
    out.reauthorize = { requests: [], auth: {} };
    provider.log = out.reauthorize.auth;
    const again = await connect(mcpURL, provider, out.reauthorize.requests);
    out.reauthorize.authorized = again.authorized;
    out.reauthorize.jti = jwtClaims(provider._tokens.access_token).jti;
    out.reauthorize.tools = (await again.client.listTools()).tools.length;
    await again.client.close();
  }
  return out;
}

// startLoopback serves the metadata documents (and the callback, which
// the browser never requests) on 127.0.0.1.
async function startLoopback() {
  const documents = new Map(), fetches = new Map();
  const server = http.createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    const doc = documents.get(path);
    if (req.method === 'GET' && doc) {
      fetches.set(path, (fetches.get(path) ?? 0) + 1);
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=300' });
      res.end(JSON.stringify(doc));
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise(resolve => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, documents, fetches, close: () => server.close() };
}

async function main() {
  const [mode, arg, userToken] = process.argv.slice(2);
  if (mode === 'authorize') {
    const browser = new Browser();
    const start = new URL(arg);
    const redirect = new URL(start.searchParams.get('redirect_uri'));
    const back = await browser.authorize(start, {
      isRedirect: u => u.origin === redirect.origin && u.pathname === redirect.pathname,
      follow: true,
    });
    return { redirect: back.href, hops: browser.hops };
  }
  const loopback = await startLoopback();
  try {
    if (mode === 'token') {
      return await run(arg, undefined, 'dcr', loopback, { tokenOnly: true });
    }
    if (mode === 'flow') {
      return { dcr: await run(arg, userToken, 'dcr', loopback), cimd: await run(arg, userToken, 'cimd', loopback) };
    }
    throw new Error(`unknown mode ${mode}`);
  } finally {
    loopback.close();
  }
}

main().then(
  out => { process.stdout.write(JSON.stringify(out) + '\n'); process.exit(0); },
  err => { process.stdout.write(JSON.stringify({ error: String(err?.stack ?? err) }) + '\n'); process.exit(1); },
);
