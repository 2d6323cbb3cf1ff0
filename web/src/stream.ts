/**
 * The chat-completions stream: POST /v1/chat/completions with stream=true, read the response headers the UI must
 * show (new conversation id, brownout, fallback model, not saved), then turn the SSE body into ChatEvents.
 */
import { apiFetch, ApiError } from "./api";
import { resumableEvents, resumeFrom, type StreamCursor } from "./resume";
import type { ChatEvent } from "./chatEvents";
import { SSEParser } from "./sse";
import type { ChatRequestBody, ConversationExtension, ErrorBody, RetrievalReport, ServerToolRun, Usage } from "./types";

export type { ChatEvent } from "./chatEvents";

export interface ChatStreamMeta {
  conversationId: string | null;
  brownout: boolean;
  fallbackModel: string | null;
  /** `x-fleetchat-stored` when the header was sent. */
  stored: boolean | null;
  requestId: string | null;
  /** `x-fleetchat-safety: care`: the answer is the service's supportive reply to a self-harm ask, not a model's. */
  care: boolean;
}

export interface ChatStream {
  meta: ChatStreamMeta;
  events: AsyncGenerator<ChatEvent, void, undefined>;
}

export function readMeta(headers: Headers): ChatStreamMeta {
  const stored = headers.get("x-fleetchat-stored");
  return {
    conversationId: headers.get("x-conversation-id"),
    brownout: (headers.get("x-fleetchat-brownout") || "").toLowerCase() === "true",
    fallbackModel: headers.get("x-fleetchat-fallback-model") || null,
    stored: stored == null ? null : stored.toLowerCase() !== "false",
    requestId: headers.get("x-request-id"),
    care: (headers.get("x-fleetchat-safety") || "").toLowerCase() === "care",
  };
}

/**
 * Start a streamed chat turn. Throws ApiError for errors before streaming (HTTP status or network). A connection that
 * breaks mid-answer is resumed by the response's request id after the last event received.
 */
export async function openChatStream(body: ChatRequestBody, signal: AbortSignal): Promise<ChatStream> {
  const response = await apiFetch("/v1/chat/completions", {
    method: "POST",
    body,
    signal,
    // Resumable: a dropped connection keeps the answer generating for the gateway's grace period (the SDKs' default
    // is OpenAI's: a closed connection stops it).
    headers: { Accept: "text/event-stream", "X-Fleetchat-Resumable": "true" },
  });
  const meta = readMeta(response.headers);
  if (!response.body) {
    throw new ApiError("The service returned an empty response.", { kind: "stream", status: response.status });
  }
  const reopen = meta.requestId ? resumeFrom(meta.requestId) : null;
  return { meta, events: resumableEvents(response.body, readChatEvents, reopen, signal) };
}

type ByteSource = ReadableStream<Uint8Array> | AsyncIterable<Uint8Array | string> | Iterable<Uint8Array | string>;

async function* pieces(source: ByteSource): AsyncGenerator<Uint8Array | string> {
  if (typeof (source as ReadableStream<Uint8Array>).getReader === "function") {
    const reader = (source as ReadableStream<Uint8Array>).getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        if (value) yield value;
      }
    } finally {
      reader.cancel().catch(() => undefined);
      try {
        reader.releaseLock();
      } catch {
        /* already released */
      }
    }
  } else {
    yield* source as AsyncIterable<Uint8Array | string>;
  }
}

interface ChunkJson {
  choices?: Array<{
    delta?: { role?: string; content?: string | null; reasoning?: string | null; reasoning_content?: string | null };
    finish_reason?: string | null;
  }>;
  usage?: Usage | null;
  conversation?: ConversationExtension;
  retrieval?: RetrievalReport;
  server_tool_run?: ServerToolRun;
  error?: ErrorBody;
}

function* chunkEvents(chunk: ChunkJson): Generator<ChatEvent> {
  if (chunk.error && typeof chunk.error === "object") {
    yield { type: "error", error: ApiError.fromBody(chunk.error, "stream") };
    return;
  }
  if (chunk.retrieval && typeof chunk.retrieval === "object" && typeof chunk.retrieval.status === "string") {
    const citations = Array.isArray(chunk.retrieval.citations) ? chunk.retrieval.citations : [];
    yield { type: "retrieval", report: { ...chunk.retrieval, citations } };
  }
  const run = chunk.server_tool_run;
  if (run && typeof run === "object" && typeof run.tool_call_id === "string" && typeof run.status === "string") {
    yield { type: "tool_run", run };
  }
  for (const choice of chunk.choices ?? []) {
    const delta = choice.delta ?? {};
    if (delta.role) yield { type: "role", role: delta.role };
    const reasoning = delta.reasoning ?? delta.reasoning_content;
    if (typeof reasoning === "string" && reasoning.length > 0) yield { type: "reasoning", content: reasoning };
    if (typeof delta.content === "string" && delta.content.length > 0) yield { type: "delta", content: delta.content };
    if (choice.finish_reason) yield { type: "finish", reason: choice.finish_reason };
  }
  if (chunk.usage) yield { type: "usage", usage: chunk.usage };
  if (chunk.conversation && typeof chunk.conversation === "object") {
    yield { type: "conversation", conversation: chunk.conversation };
  }
}

/**
 * Read an SSE chat stream. Ends after `done`, or with `disconnected` when the body ends or breaks without [DONE].
 * When `signal` is aborted (the user pressed Stop) the generator just returns. `cursor` gets the id of each whole
 * event as it is handled (never that of an event cut off mid-way), for resuming after it.
 */
export async function* readChatEvents(
  source: ByteSource,
  signal?: AbortSignal,
  cursor?: StreamCursor,
): AsyncGenerator<ChatEvent, void, undefined> {
  const parser = new SSEParser();
  try {
    for await (const piece of pieces(source)) {
      for (const event of parser.feed(piece)) {
        const done = yield* handle(event.event, event.data);
        if (cursor && event.id) cursor.lastEventId = event.id;
        if (done) return;
      }
    }
    for (const event of parser.end()) {
      const done = yield* handle(event.event, event.data);
      if (cursor && event.id) cursor.lastEventId = event.id;
      if (done) return;
    }
  } catch {
    if (signal?.aborted) return;
  }
  if (signal?.aborted) return;
  yield { type: "disconnected" };
}

/** One SSE event → ChatEvents; returns true at [DONE]. */
function* handle(eventType: string, data: string): Generator<ChatEvent, boolean> {
  if (eventType === "error") {
    let body: ErrorBody | undefined;
    try {
      const parsed = JSON.parse(data) as { error?: ErrorBody } & ErrorBody;
      body = parsed.error ?? (parsed.message ? parsed : undefined);
    } catch {
      body = data.trim() ? { message: data.trim() } : undefined;
    }
    yield { type: "error", error: ApiError.fromBody(body, "stream") };
    return false;
  }
  const trimmed = data.trim();
  if (trimmed === "[DONE]") {
    yield { type: "done" };
    return true;
  }
  if (!trimmed) return false;
  let chunk: ChunkJson;
  try {
    chunk = JSON.parse(trimmed) as ChunkJson;
  } catch {
    return false; // not JSON: ignore (keep-alive or unknown payload)
  }
  if (chunk && typeof chunk === "object") yield* chunkEvents(chunk);
  return false;
}
