import { describe, expect, it } from "vitest";
import { readChatEvents, readMeta, type ChatEvent } from "./stream";

const enc = new TextEncoder();

function chunk(delta: Record<string, unknown>, finish: string | null = null): string {
  return `data: ${JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    model: "flagship",
    choices: [{ index: 0, delta, finish_reason: finish }],
  })}\n\n`;
}

function body(pieces: Array<string | Uint8Array>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    start(controller) {
      for (const p of pieces) controller.enqueue(typeof p === "string" ? enc.encode(p) : p);
      controller.close();
    },
  });
}

async function collect(source: ReadableStream<Uint8Array>, signal?: AbortSignal): Promise<ChatEvent[]> {
  const out: ChatEvent[] = [];
  for await (const event of readChatEvents(source, signal)) out.push(event);
  return out;
}

const FULL =
  chunk({ role: "assistant", content: "" }) +
  chunk({ content: "Hel" }) +
  chunk({ content: "lo ✓" }) +
  chunk({}, "stop") +
  `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 2 } })}\n\n` +
  `data: ${JSON.stringify({ choices: [], conversation: { id: "conv_abc", stored: true, history: "new", version: 1 } })}\n\n` +
  "data: [DONE]\n\n";

describe("readChatEvents", () => {
  it("yields role, deltas, finish, usage, conversation, done", async () => {
    const events = await collect(body([FULL]));
    expect(events).toEqual([
      { type: "role", role: "assistant" },
      { type: "delta", content: "Hel" },
      { type: "delta", content: "lo ✓" },
      { type: "finish", reason: "stop" },
      { type: "usage", usage: { prompt_tokens: 5, completion_tokens: 2 } },
      { type: "conversation", conversation: { id: "conv_abc", stored: true, history: "new", version: 1 } },
      { type: "done" },
    ]);
  });

  it("yields a reasoning model's reasoning apart from its answer (vLLM's field, and its former name)", async () => {
    const events = await collect(
      body([
        chunk({ role: "assistant", content: "" }) +
          chunk({ reasoning: "Porto or " }) +
          chunk({ reasoning_content: "Lisbon?" }) +
          chunk({ content: "Lisbon." }, "stop") +
          "data: [DONE]\n\n",
      ]),
    );
    expect(events).toEqual([
      { type: "role", role: "assistant" },
      { type: "reasoning", content: "Porto or " },
      { type: "reasoning", content: "Lisbon?" },
      { type: "delta", content: "Lisbon." },
      { type: "finish", reason: "stop" },
      { type: "done" },
    ]);
  });

  it("is unaffected by how the network splits the bytes", async () => {
    const whole = await collect(body([FULL]));
    const bytes = enc.encode(FULL);
    for (let i = 1; i < bytes.length; i += 3) {
      expect(await collect(body([bytes.slice(0, i), bytes.slice(i)]))).toEqual(whole);
    }
  });

  it("reports an in-band error event and keeps reading to [DONE]", async () => {
    const events = await collect(
      body([
        chunk({ content: "partial" }),
        'event: error\ndata: {"error":{"message":"The model worker stopped before finishing this response.","type":"server_error","param":null,"code":"upstream_error"}}\n\n',
        `data: ${JSON.stringify({ choices: [], conversation: { id: "conv_abc", stored: false } })}\n\n`,
        "data: [DONE]\n\n",
      ]),
    );
    expect(events.map((e) => e.type)).toEqual(["delta", "error", "conversation", "done"]);
    const error = events[1] as Extract<ChatEvent, { type: "error" }>;
    expect(error.error.message).toMatch(/stopped before finishing/);
    expect(error.error.code).toBe("upstream_error");
    expect(error.error.kind).toBe("stream");
  });

  it("reports a content_filter finish", async () => {
    const events = await collect(body([chunk({ content: "a" }), chunk({}, "content_filter"), "data: [DONE]\n\n"]));
    expect(events).toContainEqual({ type: "finish", reason: "content_filter" });
  });

  it("says disconnected when the body ends without [DONE]", async () => {
    const events = await collect(body([chunk({ content: "cut" }), 'data: {"choices":[{"delta":{"content":"x']));
    expect(events).toEqual([{ type: "delta", content: "cut" }, { type: "disconnected" }]);
  });

  it("says disconnected when the body errors mid-way", async () => {
    let pulls = 0;
    const broken = new ReadableStream<Uint8Array>({
      pull(controller) {
        pulls += 1;
        if (pulls === 1) controller.enqueue(enc.encode(chunk({ content: "so far" })));
        else controller.error(new TypeError("network error"));
      },
    });
    const events = await collect(broken);
    expect(events).toEqual([{ type: "delta", content: "so far" }, { type: "disconnected" }]);
  });

  it("just ends when the reader aborted (Stop)", async () => {
    const controller = new AbortController();
    let push: ReadableStreamDefaultController<Uint8Array> | null = null;
    const source = new ReadableStream<Uint8Array>({
      start(c) {
        push = c;
        c.enqueue(enc.encode(chunk({ content: "before stop" })));
      },
    });
    const events: ChatEvent[] = [];
    for await (const event of readChatEvents(source, controller.signal)) {
      events.push(event);
      controller.abort();
      push!.error(new DOMException("aborted", "AbortError"));
    }
    expect(events).toEqual([{ type: "delta", content: "before stop" }]);
  });

  it("yields the retrieval report (with its citations) of the first chunk before its delta", async () => {
    const citation = {
      index: 1, vector_store_id: "vs_1", file_id: "file-1", filename: "n.md", chunk_id: "file-1:0",
      start: 0, end: 5, score: 0.4, text: "Rollo",
    };
    const first = `data: ${JSON.stringify({
      choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }],
      retrieval: { status: "used", vector_store_ids: ["vs_1"], elapsed_ms: 3, budget_ms: 1500, citations: [citation] },
    })}\n\n`;
    const skipped = `data: ${JSON.stringify({ choices: [], retrieval: { status: "skipped", reason: "latency_budget" } })}\n\n`;
    const events = await collect(body([first, skipped, "data: [DONE]\n\n"]));
    expect(events.map((e) => e.type)).toEqual(["retrieval", "role", "retrieval", "done"]);
    expect(events[0]).toMatchObject({ type: "retrieval", report: { status: "used", citations: [citation] } });
    expect(events[2]).toMatchObject({ type: "retrieval", report: { status: "skipped", reason: "latency_budget", citations: [] } });
  });

  it("yields each code run as it starts and as it ends, before the answer", async () => {
    const run = { tool_call_id: "call_1", tool: "python", status: "running", arguments: '{"code":"print(1)"}' };
    const ended = { ...run, status: "ok", duration_ms: 40, result: { exit_code: 0, output: "1\n" } };
    const toolChunk = (view: object) =>
      `data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: null }], server_tool_run: view })}\n\n`;
    const events = await collect(
      body([chunk({ role: "assistant", content: "" }), toolChunk(run), toolChunk(ended), chunk({ content: "1" }), "data: [DONE]\n\n"]),
    );
    expect(events.map((e) => e.type)).toEqual(["role", "tool_run", "tool_run", "delta", "done"]);
    expect(events[1]).toEqual({ type: "tool_run", run });
    expect(events[2]).toEqual({ type: "tool_run", run: ended });
  });

  it("ignores events after [DONE] and non-JSON data", async () => {
    const events = await collect(body(["data: not json\n\n", chunk({ content: "a" }), "data: [DONE]\n\n", chunk({ content: "b" })]));
    expect(events).toEqual([{ type: "delta", content: "a" }, { type: "done" }]);
  });

  it("treats a data chunk carrying an error object as an error", async () => {
    const events = await collect(body(['data: {"error":{"message":"boom","type":"server_error"}}\n\n', "data: [DONE]\n\n"]));
    expect(events[0]!.type).toBe("error");
  });
});

describe("readMeta", () => {
  it("reads the headers the UI shows", () => {
    const meta = readMeta(
      new Headers({
        "x-conversation-id": "conv_0123",
        "x-fleetchat-brownout": "true",
        "x-fleetchat-fallback-model": "mini",
        "x-fleetchat-stored": "false",
      }),
    );
    expect(meta).toMatchObject({ conversationId: "conv_0123", brownout: true, fallbackModel: "mini", stored: false });
    expect(readMeta(new Headers())).toMatchObject({ conversationId: null, brownout: false, fallbackModel: null, stored: null });
  });

  it("tells the safety stage's supportive reply from a model's answer", () => {
    expect(readMeta(new Headers({ "x-fleetchat-safety": "care" })).care).toBe(true);
    expect(readMeta(new Headers()).care).toBe(false);
  });
});
