// Export a conversation as a Markdown or JSON file: the messages of the
// line the page shows, read from the API (GET …/messages).

import { request, path } from './api.js';

const PAGE = 200;

// messagesOf reads every message of the run, oldest first.
async function messagesOf(runId) {
  const out = [];
  let after = 0;
  for (;;) {
    const page = await request(path.messages(runId, { after, take: PAGE }));
    const msgs = page.messages || [];
    out.push(...msgs);
    if (!page.hasMore || !msgs.length) return out;
    after = msgs[msgs.length - 1].seq;
  }
}

const fence = (text) => {
  const ticks = Math.max(3, ...[...String(text).matchAll(/`+/g)].map((m) => m[0].length + 1));
  return `${'`'.repeat(ticks)}\n${text}\n${'`'.repeat(ticks)}`;
};

// attachmentLines lists a message's attachments as Markdown links to
// their content (GET /api/assistant/attachments/{id}, for who may read the
// run), each with its name, type and size.
const attachmentLines = (list) => (list || []).map((a) => {
  const name = String(a.name || a.id).replace(/[[\]\\]/g, '\\$&');
  return `- Attachment: [${name}](${location.origin}/api/assistant/attachments/${encodeURIComponent(a.id)}) (${a.type || 'file'}, ${a.size ?? '?'} bytes)`;
});

// toMarkdown writes a run and its messages as Markdown.
export function toMarkdown(run, messages) {
  const lines = [`# ${run.title || 'Untitled session'}`, '', `Exported from Usher on ${new Date().toISOString()}.`, ''];
  const json = (v) => (typeof v === 'string' ? v : JSON.stringify(v, null, 2));
  for (const m of messages) {
    const d = m.data || {};
    const when = m.createdAt ? ` (${m.createdAt})` : '';
    switch (m.type) {
      case 'message.user':
        lines.push(`## You${when}`, '', d.content || '', '');
        if (d.attachments?.length) lines.push(...attachmentLines(d.attachments), '');
        break;
      case 'message.assistant':
        lines.push(`## Usher${when}`, '');
        if (d.content) lines.push(d.content, '');
        for (const c of d.toolCalls || []) lines.push(`Tool call \`${c.name}\`:`, '', fence(json(c.arguments)), '');
        break;
      case 'message.tool':
        lines.push(`Result of \`${d.name || 'the tool'}\` (${d.status || 'done'}):`, '', fence(d.content || ''), '');
        break;
      case 'message.summary':
        lines.push(`## Summary of the earlier conversation${when}`, '', d.content || '', '');
        break;
      default:
    }
  }
  return lines.join('\n');
}

// exportRun downloads the run as TITLE.md (format "md": Markdown, each
// attachment a link by its name) or TITLE.json ("json": the run and its
// messages as the API gives them, attachments' metadata — id, name, type,
// size, SHA-256 — in their messages' data).
export async function exportRun(run, format = 'md') {
  const messages = await messagesOf(run.runId);
  const body = format === 'json'
    ? JSON.stringify({ exportedAt: new Date().toISOString(), run, messages }, null, 2)
    : toMarkdown(run, messages);
  const type = format === 'json' ? 'application/json' : 'text/markdown;charset=utf-8';
  const url = URL.createObjectURL(new Blob([body], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = `${(run.title || 'session').replace(/[^\p{L}\p{N} ._-]+/gu, '').trim().slice(0, 80) || 'session'}.${format}`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
