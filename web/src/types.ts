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
}

export interface ModelObject {
  id: string;
  object?: string;
}

export interface ConversationSummary {
  id: string;
  title: string | null;
  created_at: number;
  updated_at: number;
  version: number;
  message_count: number;
  expires_at?: number | null;
}

export type FinishReason = "stop" | "length" | "stopped" | "content_filter" | string | null;

export interface StoredMessage {
  role: "user" | "assistant" | "system" | string;
  content: string;
  created_at?: number;
  finish_reason?: FinishReason;
}

export interface Conversation extends ConversationSummary {
  messages: StoredMessage[];
}

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
}

export interface ChatMessageParam {
  role: "user";
  content: string;
}

export interface ChatRequestBody {
  model: string;
  stream: true;
  stream_options: { include_usage: true };
  messages: ChatMessageParam[];
  store?: true;
  conversation_id?: string;
  replace_from?: number;
}

export interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  total_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number } | null;
}
