// A client of Usher's end-to-end tests (replicas_test.go): the official MCP
// TypeScript SDK's client, in one stateful session through two Usher
// replicas behind a balancer that alternates every request between them.
//
// Usage:
//
//	node replicas-client.mjs MCP_URL BROKER_TOKEN
//	    Opens a session, lists and calls tools, sets the log level and
//	    hears the upstream's log messages of a call, lists prompts, reads a
//	    resource, answers a tool's elicitation, ends the session, and tries
//	    it once more. Prints one JSON
//	    object with what each step saw.
//
// Failures are printed as {"error": ...} with exit status 1.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, token] = process.argv.slice(2);

async function main() {
  const headers = { Authorization: `Bearer ${token}` };
  const client = new Client({ name: 'replicas-client', version: '1' }, { capabilities: { elicitation: {} } });
  const logs = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push(n.params.level); });
  let asked = 0;
  client.setRequestHandler(ElicitRequestSchema, async () => {
    asked++;
    return { action: 'accept', content: { username: 'ada' } };
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  await client.connect(transport);
  const sessionId = transport.sessionId;
  const out = { sessionId: Boolean(sessionId), protocolVersion: transport.protocolVersion ?? '' };

  const lists = [];
  for (let i = 0; i < 3; i++) {
    lists.push((await client.listTools()).tools.length);
  }
  out.toolLists = lists;
  const simple = await client.callTool({ name: 'test_simple_text', arguments: {} });
  out.simpleText = simple.content?.[0]?.text ?? '';
  await client.setLoggingLevel('debug');
  const logged = await client.callTool({ name: 'test_tool_with_logging', arguments: {} });
  out.loggingCallError = Boolean(logged.isError);
  out.logs = logs.length;
  out.prompts = (await client.listPrompts()).prompts.length;
  const read = await client.readResource({ uri: 'test://static-text' });
  out.resourceText = read.contents?.[0]?.text ?? '';
  // The elicitation goes out on the call's stream from one replica; the
  // answer, a request of its own, goes to the other.
  const elicited = await client.callTool({ name: 'test_elicitation', arguments: { message: 'Your name?' } });
  out.elicitationText = elicited.content?.[0]?.text ?? '';
  out.elicitationAsked = asked;

  await transport.terminateSession();
  // The ended session, on whichever replica the balancer picks next.
  const after = [];
  for (let i = 0; i < 2; i++) {
    const resp = await fetch(url, {
      method: 'POST',
      headers: {
        ...headers,
        'Content-Type': 'application/json',
        Accept: 'application/json, text/event-stream',
        'Mcp-Session-Id': sessionId,
        'Mcp-Protocol-Version': out.protocolVersion,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 99, method: 'tools/list' }),
    });
    await resp.text();
    after.push(resp.status);
  }
  out.afterEnd = after;
  await client.close();
  return out;
}

main().then(
  (out) => { console.log(JSON.stringify(out)); },
  (err) => { console.log(JSON.stringify({ error: String(err?.stack ?? err) })); process.exit(1); },
);
