/**
 * An incremental Server-Sent Events parser (the WHATWG event-stream grammar).
 *
 * feed() takes bytes (or already-decoded text) in pieces split anywhere — mid-line, mid-CRLF, or in the middle of a
 * multi-byte UTF-8 character — and returns the events completed by that piece. end() flushes at end of stream: per
 * the spec an event that was never terminated by a blank line is discarded.
 */

export interface SSEEvent {
  /** The `event:` field, "message" when absent. */
  event: string;
  /** The `data:` lines joined with "\n". */
  data: string;
  /** The last `id:` seen (the spec's "last event ID"), "" when none. */
  id: string;
}

export class SSEParser {
  private readonly decoder = new TextDecoder("utf-8");
  private buffer = "";
  /** The previous piece ended with "\r": a "\n" starting the next piece belongs to that line break. */
  private skipLeadingLF = false;
  private started = false;
  private eventType = "";
  private dataLines: string[] = [];
  private lastEventId = "";
  /** Reconnection time asked for by a `retry:` field (unused by fetch-based readers, kept for completeness). */
  retry: number | null = null;

  feed(chunk: Uint8Array | string): SSEEvent[] {
    const text = typeof chunk === "string" ? chunk : this.decoder.decode(chunk, { stream: true });
    return this.push(text);
  }

  /** End of stream: flush the decoder; an unterminated last line is processed, an unterminated event dropped. */
  end(): SSEEvent[] {
    const events = this.push(this.decoder.decode());
    if (this.buffer.length > 0) {
      this.processLine(this.buffer, events);
      this.buffer = "";
    }
    this.dataLines = [];
    this.eventType = "";
    return events;
  }

  private push(text: string): SSEEvent[] {
    const events: SSEEvent[] = [];
    if (text.length === 0) return events;
    if (!this.started) {
      this.started = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.skipLeadingLF && text.charCodeAt(0) === 10) text = text.slice(1);
    this.skipLeadingLF = false;
    let buf = this.buffer + text;
    let start = 0;
    for (;;) {
      let i = start;
      const n = buf.length;
      while (i < n) {
        const c = buf.charCodeAt(i);
        if (c === 10 || c === 13) break;
        i++;
      }
      if (i >= n) break;
      const line = buf.slice(start, i);
      if (buf.charCodeAt(i) === 13) {
        if (i + 1 < n) {
          start = buf.charCodeAt(i + 1) === 10 ? i + 2 : i + 1;
        } else {
          start = i + 1;
          this.skipLeadingLF = true;
        }
      } else {
        start = i + 1;
      }
      this.processLine(line, events);
    }
    buf = buf.slice(start);
    this.buffer = buf;
    return events;
  }

  private processLine(line: string, events: SSEEvent[]): void {
    if (line.length === 0) {
      this.dispatch(events);
      return;
    }
    if (line.charCodeAt(0) === 58 /* ":" */) return; // comment
    const colon = line.indexOf(":");
    let field: string;
    let value: string;
    if (colon === -1) {
      field = line;
      value = "";
    } else {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.charCodeAt(0) === 32) value = value.slice(1);
    }
    switch (field) {
      case "event":
        this.eventType = value;
        break;
      case "data":
        this.dataLines.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.lastEventId = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
      default:
        break; // unknown fields are ignored
    }
  }

  private dispatch(events: SSEEvent[]): void {
    if (this.dataLines.length === 0) {
      this.eventType = "";
      return;
    }
    events.push({ event: this.eventType || "message", data: this.dataLines.join("\n"), id: this.lastEventId });
    this.dataLines = [];
    this.eventType = "";
  }
}
