/**
 * Reconnecting a chat stream after a network blip. The gateway numbers every event (`id:`) and keeps generating a
 * dropped answer for a grace period; `GET /v1/chat/completions/{id}/stream` with `Last-Event-ID` replays what was
 * missed, then the live rest. So a broken connection continues the same answer where it broke instead of losing it
 * (or asking for a new one). Only when it cannot be resumed does the turn end as "disconnected".
 */
import { apiFetch, ApiError } from "./api";
import type { ChatEvent } from "./chatEvents";

/** Waits before each reconnect attempt: about 8 s in all, well inside the gateway's grace period (15 s). */
export const RESUME_DELAYS_MS = [250, 500, 1000, 2000, 4000];

/** What a reader has seen: the id of the last whole event it handled ("" before the first). */
export interface StreamCursor {
  lastEventId: string;
}

export type ByteStream = ReadableStream<Uint8Array>;
export type ReadEvents = (source: ByteStream, signal: AbortSignal, cursor: StreamCursor) => AsyncGenerator<ChatEvent>;
/** Open the resume endpoint after `lastEventId`; throws ApiError (HTTP status, or kind "network"). */
export type Reopen = (lastEventId: string, signal: AbortSignal) => Promise<ByteStream>;
export type Sleep = (ms: number, signal: AbortSignal) => Promise<void>;

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done);
  });
}

/** The resume endpoint of a response, by its request id (`x-request-id`) or completion id. */
export function resumeFrom(id: string): Reopen {
  return async (lastEventId, signal) => {
    const response = await apiFetch(`/v1/chat/completions/${encodeURIComponent(id)}/stream`, {
      signal,
      headers: { Accept: "text/event-stream", "Last-Event-ID": lastEventId },
    });
    if (!response.body) throw new ApiError("The service returned an empty response.", { kind: "stream" });
    return response.body;
  };
}

/** A refusal that no retry changes: the answer is gone (404/410), or the request itself is wrong or unauthorised. */
function final(err: unknown): boolean {
  return err instanceof ApiError && err.kind === "http" && err.status >= 400 && err.status < 500 && err.status !== 429;
}

/**
 * The events of `first`, then (each time the connection breaks before [DONE]) those of a resumed connection after
 * the last event handled. Yields `reconnecting` before each resume, and `disconnected` once it cannot resume.
 */
export async function* resumableEvents(
  first: ByteStream,
  read: ReadEvents,
  reopen: Reopen | null,
  signal: AbortSignal,
  delays: number[] = RESUME_DELAYS_MS,
  wait: Sleep = sleep,
): AsyncGenerator<ChatEvent, void, undefined> {
  const cursor: StreamCursor = { lastEventId: "" };
  let source: ByteStream = first;
  for (;;) {
    let broke = false;
    for await (const event of read(source, signal, cursor)) {
      if (event.type === "disconnected") {
        broke = true;
        break;
      }
      yield event;
      if (event.type === "done") return;
    }
    if (!broke || signal.aborted) return;
    // Nothing numbered was received (an old server, or a break before the first event): nothing to resume after.
    if (!reopen || cursor.lastEventId === "") {
      yield { type: "disconnected" };
      return;
    }
    yield { type: "reconnecting" };
    let reopened: ByteStream | null = null;
    for (const delay of delays) {
      await wait(delay, signal);
      if (signal.aborted) return;
      try {
        reopened = await reopen(cursor.lastEventId, signal);
        break;
      } catch (err) {
        if (signal.aborted) return;
        if (final(err)) break;
      }
    }
    if (!reopened) {
      yield { type: "disconnected" };
      return;
    }
    source = reopened;
  }
}
