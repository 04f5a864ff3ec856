// Live updates. A run's events come over Server-Sent Events from the run's
// log, each with its sequence as the event id; the browser's EventSource
// resumes after the last id it saw (Last-Event-ID) on its own. Events are
// delivered in order, once: anything at or below the highest sequence
// already delivered is dropped. When the stream cannot be had, the same
// events are read by (long-)polling the event log from that sequence.

import { request, path, APIError } from './api.js';

// The event types of a run's log; others are skipped.
export const RUN_EVENT_TYPES = [
  'message.user', 'message.assistant', 'message.tool', 'message.summary',
  'agent.turn.start', 'agent.turn.pause', 'agent.turn.end',
  'agent.system_prompt', 'agent.runtime_context', 'agent.branch.switch',
  'agent.context.compacted', 'agent.context.compaction_failed', 'agent.run.continued', 'agent.step.restart',
];

const SILENCE_LIMIT = 75_000; // no word from a stream this long: reopen it
// (or three heartbeat intervals, when the server's heartbeat is slower)
const POLL_WAIT = '25s'; // long-poll bound; below common proxy timeouts
const RETRY_STREAM_AFTER = 60_000; // polling: try the stream again this often
const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// Watchdog reopens a stream that went silent: a proxy that buffers, a
// half-open connection. Heartbeats set how long silence may last.
class Watchdog {
  constructor(onSilence) {
    this.onSilence = onSilence;
    this.limit = SILENCE_LIMIT;
    this.lastBeat = 0;
    this.timer = null;
  }

  alive(heartbeat = false) {
    const now = Date.now();
    if (heartbeat) {
      if (this.lastBeat) this.limit = Math.max(SILENCE_LIMIT, 3 * (now - this.lastBeat));
      this.lastBeat = now;
    }
    clearTimeout(this.timer);
    this.timer = setTimeout(this.onSilence, this.limit);
  }

  stop() {
    clearTimeout(this.timer);
    this.lastBeat = 0;
  }
}

function parse(data) {
  try {
    return JSON.parse(data);
  } catch {
    return null;
  }
}

// RunStream follows one run from sequence `after`. handlers:
//   event(ev)       a log event {seq, type, createdAt, data}, in order, once
//   delta(d)        streamed assistant text {runId, messageSeq, text}
//   status(run)     the run (RunView) after its status changed
//   connection(s)   'live', 'reconnecting' or 'polling'
//   reconnected()   the stream was re-established: partial deltas are gone
export class RunStream {
  constructor(runId, after, handlers) {
    this.runId = runId;
    this.after = after;
    this.on = handlers;
    this.stopped = false;
    this.source = null;
    // A silent stream is reopened from what was delivered.
    this.watchdog = new Watchdog(() => {
      this.closeStream();
      if (!this.stopped) this.openStream();
    });
    this.streamFailures = 0;
    this.everOpened = false;
  }

  start() {
    this.openStream();
  }

  stop() {
    this.stopped = true;
    this.closeStream();
  }

  // pause lets go of the connection (the page is hidden: browsers allow
  // six connections per host over HTTP/1.1, and every tab holds streams);
  // resume picks up after the last event delivered.
  pause() {
    if (this.stopped) return;
    this.stopped = true;
    this.paused = true;
    this.closeStream();
  }

  resume() {
    if (!this.paused) return;
    this.paused = false;
    this.stopped = false;
    this.streamFailures = 0;
    this.everOpened = true; // what streamed meanwhile is gone
    this.openStream();
  }

  // retryNow makes the next poll of an Usher that was out of reach go now
  // (the polls back off up to 30 s apart): the browser is back online, or
  // the person asked to try now. Asked while a poll is on its way, it cuts
  // the wait after that poll.
  retryNow() {
    if (this.wake) this.wake();
    else this.retrySoon = true;
  }

  // nap waits ms, or until retryNow.
  nap(ms) {
    if (this.retrySoon) {
      this.retrySoon = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        if (this.wake === done) this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }

  deliver(ev) {
    if (!ev || typeof ev.seq !== 'number' || ev.seq <= this.after) return;
    this.after = ev.seq;
    this.on.event(ev);
  }

  closeStream() {
    this.watchdog.stop();
    if (this.source) {
      this.source.close();
      this.source = null;
    }
  }

  openStream() {
    if (this.stopped || typeof EventSource === 'undefined') {
      if (!this.stopped) this.poll();
      return;
    }
    const source = new EventSource(path.eventStream(this.runId, this.after));
    this.source = source;
    let opened = false;
    const onRunEvent = (e) => {
      this.watchdog.alive();
      this.deliver(parse(e.data));
    };
    for (const type of RUN_EVENT_TYPES) source.addEventListener(type, onRunEvent);
    source.addEventListener('connected', () => {
      const again = this.everOpened;
      opened = true;
      this.everOpened = true;
      this.streamFailures = 0;
      this.watchdog.alive();
      this.on.connection('live');
      if (again && this.on.reconnected) this.on.reconnected();
    });
    source.addEventListener('delta', (e) => {
      this.watchdog.alive();
      const d = parse(e.data);
      if (d && typeof d.text === 'string') this.on.delta(d);
    });
    source.addEventListener('status', (e) => {
      this.watchdog.alive();
      const run = parse(e.data);
      if (run && run.runId) this.on.status(run);
    });
    source.addEventListener('heartbeat', () => this.watchdog.alive(true));
    source.onerror = () => {
      if (this.stopped || this.source !== source) return;
      if (source.readyState === EventSource.CLOSED || (!opened && ++this.streamFailures >= 3)) {
        // Refused (not 200 text/event-stream: no such route, long-poll
        // mode, signed out) or never got through: poll instead.
        this.closeStream();
        this.poll();
        return;
      }
      opened = false;
      this.on.connection('reconnecting');
    };
  }

  async poll() {
    this.on.connection('polling');
    const since = Date.now();
    let backoff = 1000;
    // Usher out of reach: said as 'reconnecting' until a poll gets
    // through again (then 'polling' once more: what waits to be sent goes).
    let unreachable = false;
    this.retrySoon = false; // asked for before this polling began
    const generation = (this.generation = (this.generation || 0) + 1);
    while (!this.stopped && generation === this.generation) {
      if (Date.now() - since > RETRY_STREAM_AFTER && this.streamFailures < 6) {
        this.streamFailures += 1;
        this.openStream();
        return;
      }
      const began = Date.now();
      try {
        const page = await request(path.events(this.runId, { after: this.after, wait: POLL_WAIT }));
        backoff = 1000;
        if (unreachable) {
          unreachable = false;
          this.on.connection('polling');
        }
        for (const ev of page.events || []) this.deliver(ev);
        if (!page.hasMore && Date.now() - began < 1000) await sleep(2000); // a server without long-poll
      } catch (err) {
        if (err instanceof APIError && (err.status === 401 || err.status === 404)) {
          this.stop();
          return;
        }
        if (!unreachable && err instanceof APIError && err.code === 'network') {
          unreachable = true;
          this.on.connection('reconnecting');
        }
        await this.nap(backoff);
        backoff = Math.min(backoff * 2, 30_000);
      }
    }
  }
}

// UpdatesFeed follows the signed-in person's sessions and approvals, for
// the sidebar. handlers:
//   run(run)            a run (RunView) was created or changed
//   approval(a)         an approval {id, status, runId, tool} was requested or decided
//   resync()            the feed was (re)established or is polled: reload lists
export class UpdatesFeed {
  constructor(handlers) {
    this.on = handlers;
    this.stopped = false;
    this.source = null;
    this.timer = null;
    this.failures = 0;
    this.watchdog = new Watchdog(() => {
      if (this.source) this.source.close();
      this.source = null;
      if (!this.stopped) this.start();
    });
  }

  start() {
    if (typeof EventSource === 'undefined') {
      this.poll();
      return;
    }
    const source = new EventSource(path.updates());
    this.source = source;
    source.onopen = () => {
      this.failures = 0;
      this.watchdog.alive();
      this.on.resync();
    };
    source.addEventListener('heartbeat', () => this.watchdog.alive(true));
    source.addEventListener('run', (e) => {
      this.watchdog.alive();
      const run = parse(e.data);
      if (run && run.runId) this.on.run(run);
    });
    source.addEventListener('approval', (e) => {
      this.watchdog.alive();
      const a = parse(e.data);
      if (a && a.id) this.on.approval(a);
    });
    // Many approvals may have changed (expiry, revocation, a lost
    // notification): reload the lists.
    source.addEventListener('approvals', () => {
      this.watchdog.alive();
      this.on.resync();
    });
    source.onerror = () => {
      if (this.stopped) return;
      if (source.readyState === EventSource.CLOSED || ++this.failures >= 3) {
        this.watchdog.stop();
        source.close();
        this.source = null;
        this.poll();
      }
    };
  }

  poll() {
    const tick = () => {
      if (this.stopped) return;
      this.on.resync();
      this.timer = setTimeout(tick, 15_000);
    };
    tick();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    this.watchdog.stop();
    if (this.source) this.source.close();
  }
}
