/** Wire shapes of the fleetchat API that the web chat uses. */

export type Tier = "free" | "plus" | "enterprise" | string;

export interface ErrorBody {
  message: string;
  type?: string | null;
  param?: string | null;
  code?: string | null;
}

export interface SessionObject {
  object: "session";
  tenant: { id: string; name: string; tier: Tier; limits?: Record<string, unknown> };
  key: { id: string; hint?: string; label?: string };
  expires_at: number | null;
  /** The gateway's own tools this caller may ask for here (`python`: the code interpreter). */
  server_tools?: string[];
}

export interface ModelObject {
  id: string;
  object?: string;
  /** fleetchat's extension: what the model answers (absent from older gateways, which list chat models only). */
  capabilities?: { chat_completions?: boolean; vision?: boolean };
}

/** The chat models that take images (`capabilities.vision`). */
export function visionModels(models: ModelObject[]): string[] {
  return models.filter((m) => m.capabilities?.vision).map((m) => m.id);
}

/** The models the chat can talk to: `/v1/models` also lists embedding models and the moderation guard. */
export function chatModels(models: ModelObject[]): string[] {
  return models.filter((m) => m.capabilities?.chat_completions ?? true).map((m) => m.id);
}

export interface ConversationSummary {
  id: string;
  title: string | null;
  /** The user's instructions for this conversation (they end its system prompt). */
  instructions?: string | null;
  created_at: number;
  updated_at: number;
  version: number;
  /** Every stored message, the other versions (branches) included. */
  message_count: number;
  expires_at?: number | null;
  /** The id of the shown branch's last message (the active leaf); null for an empty conversation. */
  current_node?: number | null;
}

export type FinishReason = "stop" | "length" | "stopped" | "content_filter" | string | null;

export interface StoredMessage {
  /**
   * Its place in the conversation's append-only stored list: stable for the conversation's life (an edit or a
   * regenerate adds a version, nothing is deleted). Absent from older gateways, whose list is one chain (the id is
   * then the position in `messages`).
   */
  id?: number;
  /** The message it answers or follows; null for a first message. */
  parent_id?: number | null;
  /** Its versions: the ids of all children of its parent, ascending, itself included. */
  sibling_ids?: number[];
  role: "user" | "assistant" | "system" | string;
  content: string;
  created_at?: number;
  finish_reason?: FinishReason;
  /** An answer given with retrieval: the passages it was given (stored without their text). */
  citations?: Citation[] | null;
  /** An answer the gateway's own tools helped give: each call as the chat showed it. */
  server_tool_runs?: ServerToolRun[] | null;
  /** The model version that answered; `fleetchat-care@…`: the safety stage's supportive reply, no model. */
  model_version?: string | null;
  /** A user message with images: its parts as sent (text, and each image as the data URI the model saw). */
  content_parts?: ContentPart[] | null;
}

/** The model version the service's own supportive reply to a self-harm ask is stored under (functions/safety/care.py). */
export const CARE_VERSION_PREFIX = "fleetchat-care@";

/** The server's statuses, and the chat's own `unfinished` for a run whose stream ended before it did. */
export type ServerToolRunStatus =
  | "running"
  | "ok"
  | "error"
  | "timeout"
  | "quota"
  | "busy"
  | "breaker_open"
  | "unfinished"
  | string;

/** A file a python run wrote to /mnt/data/out, kept for download (`GET /v1/files/{file_id}/content`). */
export interface RunFile {
  file_id: string;
  filename: string;
  bytes: number;
}

/** One call of the gateway's own tools (docs/server-tools.md): streamed as it starts and as it ends, stored. */
export interface ServerToolRun {
  tool_call_id: string;
  tool: string;
  status: ServerToolRunStatus;
  /** As the model wrote them (JSON text): the python tool's program is their `code`. */
  arguments?: string;
  duration_ms?: number | null;
  /** The python tool's `exit_code`, `output`, `output_truncated`, `error`, `files_dropped`; the calculator's `value`. */
  result?: Record<string, unknown> | null;
  files?: RunFile[];
  /** The safety filter kept the code or the output back. */
  content_filtered?: boolean;
}

export interface Conversation extends ConversationSummary {
  /** The shown branch (the active path): from the first message down to `current_node`, in order. */
  messages: StoredMessage[];
  /** Every stored message not on the active path (the other versions and what follows them), in id order. */
  branches?: StoredMessage[];
  /** Stored messages (after the system prompt) the last answer's prompt left out. */
  out_of_context?: number;
}

/** A share link (`/v1/conversations/{id}/shares`): a read-only snapshot; `url` only in the answer that made it. */
export interface ShareLink {
  id: string;
  object: "conversation.share";
  conversation_id: string;
  title: string | null;
  message_count: number;
  created_at: number;
  expires_at: number;
  url: string | null;
}

/** One fact the account asked to be remembered (`/v1/account/memory/items`). */
export interface MemoryItem {
  id: string;
  object: "account.memory.item";
  text: string;
  created_at: number;
  updated_at: number;
}

/** The account's memory: opt-in; while enabled its items end every stored conversation's system prompt. */
export interface MemoryObject {
  object: "account.memory";
  enabled: boolean;
  items: MemoryItem[];
  max_items: number;
}

/** At most this many characters per remembered fact. */
export const MAX_MEMORY_CHARS = 300;

/** The account's custom instructions (`/v1/account/instructions`): they end every stored conversation's system prompt. */
export interface InstructionsObject {
  object: "account.instructions";
  instructions: string | null;
}

/** At most this many characters each (the account's, a conversation's). */
export const MAX_INSTRUCTIONS_CHARS = 1500;

export interface ConversationPage {
  data: ConversationSummary[];
  has_more: boolean;
  next_cursor: string | null;
}

export interface TokenTotals {
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
}

export interface UsageObject {
  object: "usage";
  tenant_id: string;
  start: string | number;
  end: string | number;
  data: unknown[];
  totals: TokenTotals;
  by_model: Record<string, Partial<TokenTotals>>;
}

export interface ConversationExtension {
  id: string;
  stored: boolean;
  history?: string;
  version?: number | null;
  /** Stored messages (after the system prompt) the prompt left out: the conversation outgrew the model's context. */
  out_of_context?: number;
  /** The stored ids of this turn's new messages: the user message then the answer (a regenerate: the answer only). */
  message_ids?: number[];
}

/** A message's content part as OpenAI's chat API takes it: text, or an image (a URL or data URI). */
export type ContentPart = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string } };

export interface ChatMessageParam {
  role: "user";
  content: string | ContentPart[];
}

export interface ChatRequestBody {
  model: string;
  stream: true;
  stream_options: { include_usage: true };
  messages: ChatMessageParam[];
  store?: true;
  conversation_id?: string;
  /** A new version of this stored user message (an edit; the same text: a new answer to it, a regenerate). */
  replace_from?: number;
  /** Extension: continue under this stored message (the last one shown) instead of the conversation's active leaf. */
  parent_message_id?: number;
  /** Extension: answer from these vector stores' passages, with citations (docs/files.md). */
  vector_store_ids?: string[];
  /** Extension: tools the gateway runs itself for this answer (`python`: the code interpreter). */
  server_tools?: string[];
}

export interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  total_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number } | null;
}

/** One passage an answer was given (`retrieval.citations`); `index` is its `[n]` in the context the model read. */
export interface Citation {
  index: number;
  vector_store_id: string;
  file_id: string;
  filename: string;
  chunk_id: string;
  /** Character offsets of the passage in the file's extracted text. */
  start: number;
  end: number;
  score?: number;
  /** The passage: in responses; stored turns keep it out (null). */
  text?: string | null;
}

export type RetrievalStatus = "used" | "empty" | "skipped" | "no_room" | string;

export interface RetrievalReport {
  status: RetrievalStatus;
  reason?: string | null;
  vector_store_ids?: string[];
  citations?: Citation[];
}

export interface FileObject {
  id: string;
  object: "file";
  bytes: number;
  created_at: number;
  filename: string;
  purpose: string;
  status?: string;
}

export interface ListPage<T> {
  object: "list";
  data: T[];
  has_more: boolean;
  last_id?: string | null;
}

export interface VectorStoreObject {
  id: string;
  object: "vector_store";
  name: string;
  status: string;
}

export type VectorStoreFileStatus = "in_progress" | "completed" | "cancelled" | "failed";

export interface VectorStoreFileObject {
  id: string;
  object: "vector_store.file";
  vector_store_id: string;
  status: VectorStoreFileStatus;
  last_error?: { code: string; message: string } | null;
}

/** One indexed chunk of a vector store file (`GET /v1/vector_stores/{id}/files/{file_id}/content`). */
export interface FileContentPart {
  type: "text";
  text: string;
  chunk_id: string;
  start_offset: number;
  end_offset: number;
}
