/**
 * Same-origin fetch wrapper: cookie session, the CSRF header on every state-changing request, and one error type
 * (ApiError) built from the API's `{"error": {...}}` objects, from HTTP statuses, or from a network failure.
 */
import type {
  Conversation,
  ConversationPage,
  ConversationSummary,
  ErrorBody,
  InstructionsObject,
  MemoryItem,
  MemoryObject,
  ModelObject,
  SessionObject,
  ShareLink,
  UsageObject,
} from "./types";

export const CSRF_HEADER = "X-Requested-With";
export const CSRF_VALUE = "fleetchat";

export type ErrorKind = "http" | "network" | "stream" | "disconnected";

export class ApiError extends Error {
  readonly kind: ErrorKind;
  readonly status: number;
  readonly type: string | null;
  readonly code: string | null;
  readonly param: string | null;
  /** Seconds from a `retry-after` header, when there was one. */
  readonly retryAfter: number | null;
  /** False when the server said `x-should-retry: false` (a hard quota). */
  readonly shouldRetry: boolean;

  constructor(
    message: string,
    opts: {
      kind?: ErrorKind;
      status?: number;
      type?: string | null;
      code?: string | null;
      param?: string | null;
      retryAfter?: number | null;
      shouldRetry?: boolean;
    } = {},
  ) {
    super(message);
    this.name = "ApiError";
    this.kind = opts.kind ?? "http";
    this.status = opts.status ?? 0;
    this.type = opts.type ?? null;
    this.code = opts.code ?? null;
    this.param = opts.param ?? null;
    this.retryAfter = opts.retryAfter ?? null;
    this.shouldRetry = opts.shouldRetry ?? true;
  }

  static fromBody(body: ErrorBody | undefined, kind: ErrorKind, status = 0): ApiError {
    return new ApiError(body?.message || "The service returned an error.", {
      kind,
      status,
      type: body?.type ?? null,
      code: body?.code ?? null,
      param: body?.param ?? null,
    });
  }
}

/** Seconds to wait from a `retry-after` header (delta-seconds or an HTTP date); null when absent or unreadable. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | null {
  if (value == null || value.trim() === "") return null;
  const trimmed = value.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.max(0, Math.ceil(Number(trimmed)));
  const when = Date.parse(trimmed);
  if (Number.isNaN(when)) return null;
  return Math.max(0, Math.ceil((when - now) / 1000));
}

function statusMessage(status: number): string {
  switch (status) {
    case 401:
      return "Your session has expired. Please sign in again.";
    case 404:
      return "Not found.";
    case 429:
      return "Too many requests.";
    case 503:
      return "The service is unavailable right now.";
    default:
      return `The service returned an error (HTTP ${status}).`;
  }
}

/** Build the ApiError of a non-2xx response (reads its body). */
export async function errorFromResponse(response: Response): Promise<ApiError> {
  let body: ErrorBody | undefined;
  try {
    const text = await response.text();
    const parsed = text ? (JSON.parse(text) as { error?: ErrorBody }) : undefined;
    if (parsed && typeof parsed === "object" && parsed.error && typeof parsed.error === "object") body = parsed.error;
  } catch {
    body = undefined;
  }
  return new ApiError(body?.message || statusMessage(response.status), {
    kind: "http",
    status: response.status,
    type: body?.type ?? null,
    code: body?.code ?? null,
    param: body?.param ?? null,
    retryAfter: parseRetryAfter(response.headers.get("retry-after")),
    shouldRetry: (response.headers.get("x-should-retry") || "").toLowerCase() !== "false",
  });
}

type UnauthorizedHandler = (error: ApiError) => void;
let unauthorizedHandler: UnauthorizedHandler | null = null;

/** Called on any 401 from a signed-in call (the session expired or its key was revoked). */
export function setUnauthorizedHandler(handler: UnauthorizedHandler | null): void {
  unauthorizedHandler = handler;
}

export interface ApiFetchOptions {
  method?: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  body?: unknown;
  /** A multipart body (an upload); the browser sets its Content-Type with the boundary. */
  form?: FormData;
  signal?: AbortSignal;
  headers?: Record<string, string>;
  /** Whether a 401 means "session expired" (false for sign-in and the initial session probe). */
  notifyUnauthorized?: boolean;
}

/** fetch() a same-origin API path; resolves with an ok Response, else throws ApiError. */
export async function apiFetch(path: string, options: ApiFetchOptions = {}): Promise<Response> {
  const method = options.method ?? "GET";
  const headers: Record<string, string> = { Accept: "application/json", ...(options.headers ?? {}) };
  if (method !== "GET") headers[CSRF_HEADER] = CSRF_VALUE;
  let body: string | FormData | undefined;
  if (options.form !== undefined) {
    body = options.form;
  } else if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(options.body);
  }
  let response: Response;
  try {
    response = await fetch(path, { method, headers, body, signal: options.signal, credentials: "same-origin" });
  } catch (err) {
    if (options.signal?.aborted) throw err;
    throw new ApiError("Network error: the service could not be reached.", { kind: "network" });
  }
  if (!response.ok) {
    const error = await errorFromResponse(response);
    if (error.status === 401 && options.notifyUnauthorized !== false) unauthorizedHandler?.(error);
    throw error;
  }
  return response;
}

export async function json<T>(path: string, options: ApiFetchOptions = {}): Promise<T> {
  const response = await apiFetch(path, options);
  if (response.status === 204) return undefined as T;
  return (await response.json()) as T;
}

const enc = encodeURIComponent;

export const api = {
  getSession: () => json<SessionObject>("/v1/session", { notifyUnauthorized: false }),
  signIn: (apiKey: string) =>
    json<SessionObject>("/v1/session", { method: "POST", body: { api_key: apiKey }, notifyUnauthorized: false }),
  signOut: () => json<void>("/v1/session", { method: "DELETE", notifyUnauthorized: false }),
  models: () => json<{ data: ModelObject[] }>("/v1/models"),
  listConversations: (after?: string | null, limit = 20) =>
    json<ConversationPage>(`/v1/conversations?limit=${limit}${after ? `&after=${enc(after)}` : ""}`),
  getConversation: (id: string) => json<Conversation>(`/v1/conversations/${enc(id)}`),
  renameConversation: (id: string, title: string) =>
    json<ConversationSummary>(`/v1/conversations/${enc(id)}`, { method: "PATCH", body: { title } }),
  setConversationInstructions: (id: string, instructions: string | null) =>
    json<ConversationSummary>(`/v1/conversations/${enc(id)}`, { method: "PATCH", body: { instructions } }),
  /** Show this message's branch: the server shows it down to its newest leaf, and says which (`current_node`). */
  setCurrentNode: (id: string, node: number) =>
    json<ConversationSummary>(`/v1/conversations/${enc(id)}`, { method: "PATCH", body: { current_node: node } }),
  getInstructions: () => json<InstructionsObject>("/v1/account/instructions"),
  createShare: (conversationId: string, expiresInDays: number, acknowledgePii = false) =>
    json<ShareLink>(`/v1/conversations/${enc(conversationId)}/shares`, {
      method: "POST",
      body: { expires_in_days: expiresInDays, acknowledge_pii: acknowledgePii },
    }),
  listShares: (conversationId: string) => json<{ data: ShareLink[] }>(`/v1/conversations/${enc(conversationId)}/shares`),
  revokeShare: (id: string) => json<{ id: string; deleted: boolean }>(`/v1/shares/${enc(id)}`, { method: "DELETE" }),
  getMemory: () => json<MemoryObject>("/v1/account/memory"),
  setMemoryEnabled: (enabled: boolean) => json<MemoryObject>("/v1/account/memory", { method: "PUT", body: { enabled } }),
  addMemory: (text: string) => json<MemoryItem>("/v1/account/memory/items", { method: "POST", body: { text } }),
  editMemory: (id: string, text: string) =>
    json<MemoryItem>(`/v1/account/memory/items/${enc(id)}`, { method: "PATCH", body: { text } }),
  deleteMemory: (id: string) =>
    json<{ id: string; deleted: boolean }>(`/v1/account/memory/items/${enc(id)}`, { method: "DELETE" }),
  setInstructions: (instructions: string | null) =>
    json<InstructionsObject>("/v1/account/instructions", { method: "PUT", body: { instructions } }),
  deleteConversation: (id: string) =>
    json<{ id: string; deleted: boolean }>(`/v1/conversations/${enc(id)}`, { method: "DELETE" }),
  usage: () => json<UsageObject>("/v1/usage"),
  /** Stop generating an answer (a dropped connection alone does not: the gateway keeps it for a resume). */
  cancelCompletion: (id: string) =>
    json<{ id: string; status: string }>(`/v1/chat/completions/${enc(id)}/cancel`, { method: "POST" }),
};

export function exportUrl(id: string, format: "markdown" | "json"): string {
  return `/v1/conversations/${enc(id)}/export?format=${format}`;
}
