/** What a chat answer's stream yields to the UI, one event a time: read by src/stream.ts, resumed by src/resume.ts. */
import type { ApiError } from "./api";
import type { ConversationExtension, RetrievalReport, ServerToolRun, Usage } from "./types";

export type ChatEvent =
  | { type: "role"; role: string }
  | { type: "delta"; content: string }
  /** A reasoning model's reasoning (vLLM's `reasoning` delta, or `reasoning_content`): shown collapsed above the answer. */
  | { type: "reasoning"; content: string }
  | { type: "finish"; reason: string }
  | { type: "usage"; usage: Usage }
  | { type: "conversation"; conversation: ConversationExtension }
  /** A call of the gateway's own tools (the code interpreter) as it starts and as it ends, before the answer. */
  | { type: "tool_run"; run: ServerToolRun }
  /** What retrieval did for this answer, with its citations (the first chunk of a request that named files). */
  | { type: "retrieval"; report: RetrievalReport }
  /** An in-band `event: error` (or a chunk carrying `error`): the answer so far is kept. */
  | { type: "error"; error: ApiError }
  /** `data: [DONE]`: the stream ended properly. */
  | { type: "done" }
  /** The connection broke before [DONE]: resuming the same answer after the last event received (src/resume.ts). */
  | { type: "reconnecting" }
  /** The body ended (or broke) without [DONE] and the answer could not be resumed: the connection was lost. */
  | { type: "disconnected" };
