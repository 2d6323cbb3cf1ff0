import { describe, expect, it, vi } from "vitest";
import { ApiError } from "./api";
import { resumableEvents, type Reopen } from "./resume";
import { readChatEvents, type ChatEvent } from "./stream";

const enc = new TextEncoder();

function event(id: number, content: string | null, finish: string | null = null): string {
  const delta = content === null ? {} : { content };
  const chunk = { id: "chatcmpl-1", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] };
  return `id: ${id}\ndata: ${JSON.stringify(chunk)}\n\n`;
}

const ANSWER = ["The ", "whole ", "answer ", "arrives."];
/** The server's events: the answer's chunks numbered 1..4, a finish chunk (5), then [DONE] (6). */
const EVENTS = [...ANSWER.map((text, i) => event(i + 1, text)), event(5, null, "stop"), "id: 6\ndata: [DONE]\n\n"];

/** A body that sends `text`, then breaks (errors) when `breaks`, else ends. */
function body(text: string, breaks: boolean): ReadableStream<Uint8Array> {
  let sent = false;
  return new ReadableStream<Uint8Array>({
    // Erroring in start() would discard what was enqueued: the break comes on the read after the text.
    pull(controller) {
      if (!sent) {
        sent = true;
        controller.enqueue(enc.encode(text));
      } else if (breaks) controller.error(new TypeError("network error"));
      else controller.close();
    },
  });
}

const noWait = async () => undefined;

async function collect(gen: AsyncGenerator<ChatEvent>): Promise<ChatEvent[]> {
  const out: ChatEvent[] = [];
  for await (const e of gen) out.push(e);
  return out;
}

function text(events: ChatEvent[]): string {
  return events.map((e) => (e.type === "delta" ? e.content : "")).join("");
}

describe("resumableEvents", () => {
  it("resumes after the last whole event and gets the whole answer once", async () => {
    // The first connection breaks in the middle of event 3: events 1 and 2 were handled, 3 was cut off.
    const cut = EVENTS.slice(0, 2).join("") + EVENTS[2]!.slice(0, 20);
    const reopen = vi.fn<Reopen>(async (after) => body(EVENTS.slice(Number(after)).join(""), false));
    const events = await collect(
      resumableEvents(body(cut, true), readChatEvents, reopen, new AbortController().signal, [0], noWait),
    );
    expect(reopen).toHaveBeenCalledTimes(1);
    expect(reopen.mock.calls[0]![0]).toBe("2");
    expect(text(events)).toBe(ANSWER.join(""));
    expect(events.filter((e) => e.type === "reconnecting")).toHaveLength(1);
    expect(events.at(-1)).toEqual({ type: "done" });
    expect(events.some((e) => e.type === "disconnected")).toBe(false);
  });

  it("keeps trying through network errors and resumes more than once", async () => {
    let attempts = 0;
    const reopen: Reopen = async (after) => {
      attempts += 1;
      if (attempts === 1) throw new ApiError("Network error", { kind: "network" });
      const rest = EVENTS.slice(Number(after));
      // The second connection breaks again after one more event; the third finishes.
      return attempts === 2 ? body(rest[0]!, true) : body(rest.join(""), false);
    };
    const events = await collect(
      resumableEvents(body(EVENTS[0]!, true), readChatEvents, reopen, new AbortController().signal, [0, 0, 0], noWait),
    );
    expect(attempts).toBe(3);
    expect(text(events)).toBe(ANSWER.join(""));
    expect(events.at(-1)).toEqual({ type: "done" });
  });

  it("gives up at once when the answer is gone (404/410) and reports the lost connection", async () => {
    for (const status of [404, 410]) {
      const reopen = vi.fn<Reopen>(async () => {
        throw new ApiError("gone", { kind: "http", status });
      });
      const events = await collect(
        resumableEvents(body(EVENTS[0]!, true), readChatEvents, reopen, new AbortController().signal, [0, 0], noWait),
      );
      expect(reopen).toHaveBeenCalledTimes(1);
      expect(text(events)).toBe("The ");
      expect(events.at(-1)).toEqual({ type: "disconnected" });
    }
  });

  it("does not try to resume with nothing numbered received, nor after Stop", async () => {
    const reopen = vi.fn<Reopen>();
    const unnumbered = `data: ${JSON.stringify({ choices: [{ delta: { content: "x" } }] })}\n\n`;
    const events = await collect(
      resumableEvents(body(unnumbered, true), readChatEvents, reopen, new AbortController().signal, [0], noWait),
    );
    expect(events.at(-1)).toEqual({ type: "disconnected" });
    const stopped = new AbortController();
    stopped.abort();
    const afterStop = await collect(resumableEvents(body(EVENTS[0]!, true), readChatEvents, reopen, stopped.signal, [0], noWait));
    expect(afterStop).toEqual([{ type: "delta", content: "The " }]); // what had arrived; no reconnect, no error
    expect(reopen).not.toHaveBeenCalled();
  });
});
