/**
 * The chat view's messages, and how they line up with the server's stored list (whose indices `replace_from` uses:
 * system messages count even though the view hides them).
 */
import { mergeCitations } from "./citations";
import type { Citation, FinishReason, RetrievalReport, ServerToolRun, StoredMessage } from "./types";

export type AnswerStatus = "streaming" | "done" | "stopped" | "filtered" | "error";

export interface UiMessage {
  /** Stable local key for rendering. */
  key: string;
  role: "user" | "assistant";
  content: string;
  /** Assistant messages only: a reasoning model's reasoning for this answer (live turns; not stored). */
  reasoning?: string;
  /** Assistant messages only. */
  status?: AnswerStatus;
  finishReason?: FinishReason;
  /** Index in the stored `messages` list (system messages included); undefined when not (known to be) stored. */
  storedIndex?: number;
  /** This turn was answered but not saved (`x-fleetchat-stored: false` / `conversation.stored` false). */
  notSaved?: boolean;
  /** What went wrong with this answer (status "error"). */
  errorText?: string;
  /**
   * User messages only: this message was sent to replace the stored messages from this index (edit, regenerate) but
   * the server never saved it (a Stop before anything was streamed). The server still holds what it replaced; a
   * retry or an edit sends `replace_from` with this index again.
   */
  replaceFrom?: number;
  /** Assistant messages only: the passages the answer was given (retrieval), stored with the turn. */
  citations?: Citation[];
  /** Assistant messages only: the code interpreter's runs behind this answer, as they started and ended. */
  toolRuns?: ServerToolRun[];
  /** Assistant messages only: what retrieval did for this answer (not stored: shown for the live turn). */
  retrieval?: Pick<RetrievalReport, "status" | "reason">;
}

/** What the server held before a turn (for telling whether it has saved the turn since). */
export interface StoreMark {
  /** The conversation's `version` (it counts saved turns); 0 for a chat not created yet. */
  version: number | null;
  /** Length of the stored `messages` list (system messages included). */
  count: number | null;
}

let counter = 0;
export function newKey(prefix = "m"): string {
  counter += 1;
  return `${prefix}${Date.now().toString(36)}${counter.toString(36)}`;
}

export function statusFromFinish(reason: FinishReason | undefined): AnswerStatus {
  if (reason === "stopped") return "stopped";
  if (reason === "content_filter") return "filtered";
  return "done";
}

/** The stored list → view messages (system messages hidden, stored indices kept). */
export function fromStored(messages: StoredMessage[]): UiMessage[] {
  const out: UiMessage[] = [];
  messages.forEach((message, index) => {
    if (message.role !== "user" && message.role !== "assistant") return;
    const ui: UiMessage = {
      key: newKey(),
      role: message.role,
      content: message.content ?? "",
      storedIndex: index,
    };
    if (message.role === "assistant") {
      ui.status = statusFromFinish(message.finish_reason);
      ui.finishReason = message.finish_reason ?? null;
      if (message.citations && message.citations.length > 0) ui.citations = message.citations;
      if (message.server_tool_runs && message.server_tool_runs.length > 0) ui.toolRuns = message.server_tool_runs;
    }
    out.push(ui);
  });
  return out;
}

function sameMessage(local: UiMessage, stored: StoredMessage): boolean {
  if (local.role !== stored.role) return false;
  if (local.role === "user") return local.content === stored.content;
  // The server may hold a few more characters of a stopped answer than the client read before it aborted.
  const text = stored.content ?? "";
  return local.content === "" ? text === "" : text.startsWith(local.content);
}

function isUnsavedReplacement(message: UiMessage): boolean {
  return message.role === "user" && message.storedIndex === undefined && message.replaceFrom !== undefined;
}

/**
 * Line the view up with the server's stored list after a turn: matched messages get their stored indices (and the
 * server's text for an answer it holds more of); the server's messages the view lacks are added; view messages the
 * server does not hold (a turn that failed and was not saved) stay at the end, unstored. An unsaved replacement
 * (`replaceFrom`) stands in for the stored messages from its index on: those are not added back.
 */
export function reconcile(local: UiMessage[], stored: StoredMessage[]): UiMessage[] {
  const marker = local.findIndex(isUnsavedReplacement);
  const cut = marker === -1 ? Infinity : local[marker]!.replaceFrom!;
  const limit = marker === -1 ? local.length : marker;
  const server = stored
    .map((message, index) => ({ message, index }))
    .filter(({ message, index }) => (message.role === "user" || message.role === "assistant") && index < cut);
  const out: UiMessage[] = [];
  let i = 0;
  for (; i < server.length && i < limit; i++) {
    const { message, index } = server[i]!;
    const mine = local[i]!;
    if (!sameMessage(mine, message)) break;
    const merged: UiMessage = { ...mine, storedIndex: index, notSaved: false, replaceFrom: undefined };
    if (mine.role === "assistant") {
      merged.content = message.content ?? mine.content;
      merged.citations = mergeCitations(message.citations, mine.citations);
      if (mine.status !== "streaming") {
        if (message.finish_reason !== undefined && message.finish_reason !== null) {
          merged.finishReason = message.finish_reason;
          merged.status = statusFromFinish(message.finish_reason);
        } else if (mine.status === "error") {
          merged.status = "done";
        }
      }
    }
    out.push(merged);
  }
  if (i < server.length) {
    for (const { message, index } of server.slice(i)) out.push(...fromStored([message]).map((m) => ({ ...m, storedIndex: index })));
  }
  const rest = server.slice(i);
  for (const mine of local.slice(i)) {
    if (rest.some(({ message }) => sameMessage(mine, message))) continue; // the server's copy is already in
    out.push({ ...mine, storedIndex: undefined });
  }
  return out;
}

/**
 * Whether the stored conversation shows a turn sent when the server held `before`: its version moved on, or (the
 * version not known) its message count reached `expectCount` (the count with the turn saved, when predictable).
 */
export function showsTurn(
  before: StoreMark,
  conversation: { version?: number | null; message_count?: number | null },
  expectCount: number | null,
): boolean {
  if (before.version !== null && typeof conversation.version === "number") return conversation.version > before.version;
  if (expectCount !== null && typeof conversation.message_count === "number") return conversation.message_count >= expectCount;
  return false;
}

/**
 * A turn the server never saved: its messages lose their stored indices; the user message of a replace keeps the
 * index it replaces from, so that a retry or an edit sends `replace_from` again (the server still holds the rest).
 */
export function markTurnUnsaved(
  messages: UiMessage[],
  userKey: string,
  answerKey: string,
  replaceFrom?: number,
): UiMessage[] {
  return messages.map((m) => {
    if (m.key === userKey) return { ...m, storedIndex: undefined, replaceFrom };
    if (m.key === answerKey) return { ...m, storedIndex: undefined };
    return m;
  });
}

/**
 * The view without unsaved-replacement marks: a new message sent after an unsaved edit continues what the server
 * holds, so the unsaved turn becomes an ordinary unsaved one (shown, not stored).
 */
export function withoutReplaceMarks(messages: UiMessage[]): UiMessage[] {
  return messages.some((m) => m.replaceFrom !== undefined)
    ? messages.map((m) => (m.replaceFrom === undefined ? m : { ...m, replaceFrom: undefined }))
    : messages;
}

/** The stored index a replace of this user message sends as `replace_from`, if any. */
export function replaceIndex(message: UiMessage): number | undefined {
  return message.storedIndex ?? message.replaceFrom;
}

/** Index (in the view) of the last user message, or -1. */
export function lastUserIndex(messages: UiMessage[]): number {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.role === "user") return i;
  return -1;
}

/**
 * Where the "out of context" divider goes: the view index of the first message the model still sees, when the last
 * answer said the prompt left `outOfContext` stored messages out (counted after the conversation's leading system
 * messages, which the view hides but whose stored indices it keeps); null when nothing is out of context or the
 * first kept message is not in view.
 */
export function contextCutIndex(messages: UiMessage[], outOfContext: number): number | null {
  if (outOfContext <= 0) return null;
  const stored = messages.filter((m) => m.storedIndex !== undefined).map((m) => m.storedIndex!);
  if (stored.length === 0) return null;
  const pinned = Math.min(...stored); // the first shown stored message follows the hidden system prompt
  const index = messages.findIndex((m) => m.storedIndex === pinned + outOfContext);
  return index > 0 ? index : null;
}
