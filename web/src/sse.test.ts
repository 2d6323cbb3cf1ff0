import { describe, expect, it } from "vitest";
import { SSEParser, type SSEEvent } from "./sse";

const enc = new TextEncoder();

function parseAll(pieces: Array<Uint8Array | string>): SSEEvent[] {
  const parser = new SSEParser();
  const out: SSEEvent[] = [];
  for (const piece of pieces) out.push(...parser.feed(piece));
  out.push(...parser.end());
  return out;
}

/** Split bytes at every boundary pair: [0,i) [i,j) [j,n). */
function* splits3(bytes: Uint8Array): Generator<Uint8Array[]> {
  for (let i = 0; i <= bytes.length; i++) {
    for (let j = i; j <= bytes.length; j += Math.max(1, Math.floor(bytes.length / 17))) {
      yield [bytes.slice(0, i), bytes.slice(i, j), bytes.slice(j)];
    }
  }
}

const STREAM =
  'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"Héllo 👋 — 世界"},"finish_reason":null}]}\n\n' +
  ": keep-alive comment\n\n" +
  'data: {"choices":[{"index":0,"delta":{"content":" ✓"},"finish_reason":"stop"}]}\n\n' +
  'event: error\ndata: {"error":{"message":"worker died","type":"server_error","param":null,"code":null}}\n\n' +
  'data: {"choices":[],"conversation":{"id":"conv_1","stored":false}}\n\n' +
  "data: [DONE]\n\n";

describe("SSEParser", () => {
  const expected = parseAll([STREAM]);

  it("parses data events, event types, comments and [DONE]", () => {
    expect(expected.map((e) => e.event)).toEqual(["message", "message", "error", "message", "message"]);
    expect(JSON.parse(expected[0]!.data).choices[0].delta.content).toBe("Héllo 👋 — 世界");
    expect(JSON.parse(expected[2]!.data).error.message).toBe("worker died");
    expect(expected[4]!.data).toBe("[DONE]");
  });

  it("gives the same events when the bytes are split at every single boundary (incl. mid-UTF-8)", () => {
    const bytes = enc.encode(STREAM);
    for (let i = 0; i <= bytes.length; i++) {
      expect(parseAll([bytes.slice(0, i), bytes.slice(i)])).toEqual(expected);
    }
  });

  it("gives the same events for three-way splits", () => {
    const bytes = enc.encode(STREAM);
    for (const pieces of splits3(bytes)) expect(parseAll(pieces)).toEqual(expected);
  });

  it("gives the same events fed one byte at a time", () => {
    const bytes = enc.encode(STREAM);
    const pieces: Uint8Array[] = [];
    for (let i = 0; i < bytes.length; i++) pieces.push(bytes.slice(i, i + 1));
    expect(parseAll(pieces)).toEqual(expected);
  });

  it("handles CRLF and lone CR line endings, split between CR and LF", () => {
    const crlf = STREAM.replace(/\n/g, "\r\n");
    const cr = STREAM.replace(/\n/g, "\r");
    for (const text of [crlf, cr]) {
      const bytes = enc.encode(text);
      expect(parseAll([text])).toEqual(expected);
      for (let i = 0; i <= bytes.length; i++) {
        expect(parseAll([bytes.slice(0, i), bytes.slice(i)])).toEqual(expected);
      }
    }
  });

  it("joins multi-line data with newlines and strips one leading space only", () => {
    const events = parseAll(["data: line one\ndata:line two\ndata:  indented\n\n"]);
    expect(events).toHaveLength(1);
    expect(events[0]!.data).toBe("line one\nline two\n indented");
  });

  it("accepts string input split anywhere", () => {
    for (let i = 0; i <= STREAM.length; i++) {
      expect(parseAll([STREAM.slice(0, i), STREAM.slice(i)])).toEqual(expected);
    }
  });

  it("drops an event that was never terminated by a blank line", () => {
    const events = parseAll(['data: {"a":1}\n\ndata: [DONE]']);
    expect(events.map((e) => e.data)).toEqual(['{"a":1}']);
  });

  it("ignores a BOM, unknown fields, data-less events; keeps the last id", () => {
    const events = parseAll(["\ufeffid: 7\nfoo: bar\n\nevent: ping\n\nid: 8\ndata: x\n\n"]);
    expect(events).toEqual([{ event: "message", data: "x", id: "8" }]);
  });

  it("treats a field line without a colon as an empty value", () => {
    const events = parseAll(["data\n\n"]);
    expect(events).toEqual([{ event: "message", data: "", id: "" }]);
  });
});
