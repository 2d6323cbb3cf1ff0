/**
 * The chat view's messages, and how they line up with the server's stored conversation: the shown branch (the
 * active path, whose positions count system messages even though the view hides them) and the message ids that
 * `replace_from`, `parent_message_id` and feedback use.
 */
import { storedImages } from "./images";
import { mergeCitations } from "./citations";
import { idOf, siblingsOf, switchedPath, type MessageTree } from "./messageTree";
import type { Citation, FinishReason, RetrievalReport, ServerToolRun, StoredMessage } from "./types";
import { CARE_VERSION_PREFIX } from "./types";

/** A message's versions: the ids of its parent's children (ascending, itself included) and its place among them. */
export interface Versions {
  ids: number[];
  index: number;
}

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
  /** Position in the shown branch (system messages included); undefined when not (known to be) stored. */
  storedIndex?: number;
  /** The server's id of this stored message (stable: edits and regenerates add versions); undefined when not (known
   * to be) stored. */
  nodeId?: number;
  /** Its versions (edits of a user message, regenerated answers), as the server last said. */
  siblings?: Versions;
  /** This turn was answered but not saved (`x-fleetchat-stored: false` / `conversation.stored` false). */
  notSaved?: boolean;
  /** What went wrong with this answer (status "error"). */
  errorText?: string;
  /**
   * User messages only: this message was sent as a new version of the stored user message with this id (edit,
   * regenerate) but the server never saved it (a Stop before anything was streamed). The server still shows that
   * message's branch; a retry or an edit sends `replace_from` with this id again.
   */
  replaceFrom?: number;
  /** Assistant messages only: the passages the answer was given (retrieval), stored with the turn. */
  citations?: Citation[];
  /** Assistant messages only: the code interpreter's runs behind this answer, as they started and ended. */
  toolRuns?: ServerToolRun[];
  /** Assistant messages only: what retrieval did for this answer (not stored: shown for the live turn). */
  retrieval?: Pick<RetrievalReport, "status" | "reason">;
  /** Assistant messages only: the service's supportive reply to a self-harm ask (no model wrote it). */
  care?: boolean;
  /** User messages only: the images sent with it (data URIs), in order. */
  images?: string[];
}

/** What the server held before a turn (for telling whether it has saved the turn since). */
export interface StoreMark {
  /** The conversation's `version` (it counts saved turns); 0 for a chat not created yet. */
  version: number | null;
  /** How many messages it stores (`message_count`: every branch, system messages included). */
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

/** The server's word on a message's versions (`sibling_ids`), when it said. */
function versionsOf(message: StoredMessage, id: number): Versions | undefined {
  const ids = message.sibling_ids;
  const index = ids ? ids.indexOf(id) : -1;
  return ids && index >= 0 ? { ids: [...ids], index } : undefined;
}

/** One stored user or assistant message at `position` in the shown branch → a view message. */
function fromStoredMessage(message: StoredMessage & { role: "user" | "assistant" }, position: number): UiMessage {
  const id = idOf(message, position);
  const ui: UiMessage = {
    key: newKey(),
    role: message.role,
    content: message.content ?? "",
    storedIndex: position,
    nodeId: id,
  };
  const versions = versionsOf(message, id);
  if (versions) ui.siblings = versions;
  const images = storedImages(message);
  if (images.length > 0) ui.images = images;
  if (message.role === "assistant") {
    ui.status = statusFromFinish(message.finish_reason);
    ui.finishReason = message.finish_reason ?? null;
    if (message.citations && message.citations.length > 0) ui.citations = message.citations;
    if (message.server_tool_runs && message.server_tool_runs.length > 0) ui.toolRuns = message.server_tool_runs;
    if (message.model_version?.startsWith(CARE_VERSION_PREFIX)) ui.care = true;
  }
  return ui;
}

function shown(message: StoredMessage): message is StoredMessage & { role: "user" | "assistant" } {
  return message.role === "user" || message.role === "assistant";
}

/** The shown branch → view messages (system messages hidden, positions and ids kept). */
export function fromStored(messages: StoredMessage[]): UiMessage[] {
  const out: UiMessage[] = [];
  messages.forEach((message, index) => {
    if (shown(message)) out.push(fromStoredMessage(message, index));
  });
  return out;
}

function sameMessage(local: UiMessage, stored: StoredMessage): boolean {
  if (local.role !== stored.role) return false;
  // Both ids known: they decide (two versions may read the same).
  if (local.nodeId !== undefined && typeof stored.id === "number") return local.nodeId === stored.id;
  if (local.role === "user") return local.content === stored.content;
  // The server may hold a few more characters of a stopped answer than the client read before it aborted.
  const text = stored.content ?? "";
  return local.content === "" ? text === "" : text.startsWith(local.content);
}

function isUnsavedReplacement(message: UiMessage): boolean {
  return message.role === "user" && message.storedIndex === undefined && message.replaceFrom !== undefined;
}

/**
 * Line the view up with the server's shown branch after a turn: matched messages get their positions, ids and
 * versions (and the server's text for an answer it holds more of); the server's messages the view lacks are added;
 * view messages the server does not hold (a turn that failed and was not saved) stay at the end, unstored, while
 * those it holds on another branch (`branches`: the view showed another version) go. An unsaved replacement
 * (`replaceFrom`) stands in for the stored message it was to be a version of, and for what follows it: those are
 * not added back.
 */
export function reconcile(local: UiMessage[], stored: StoredMessage[], branches: StoredMessage[] = []): UiMessage[] {
  const elsewhere = new Set(branches.map((message) => message.id).filter((id) => typeof id === "number"));
  const marker = local.findIndex(isUnsavedReplacement);
  const replaced = marker === -1 ? -1 : stored.findIndex((message, index) => idOf(message, index) === local[marker]!.replaceFrom);
  const limit = marker === -1 ? local.length : marker;
  const server = stored
    .map((message, index) => ({ message, index, id: idOf(message, index) }))
    .filter(({ message, index }) => shown(message) && (replaced === -1 || index < replaced));
  const out: UiMessage[] = [];
  let i = 0;
  for (; i < server.length && i < limit; i++) {
    const { message, index, id } = server[i]!;
    const mine = local[i]!;
    if (!sameMessage(mine, message)) break;
    const merged: UiMessage = {
      ...mine,
      storedIndex: index,
      nodeId: id,
      siblings: versionsOf(message, id),
      notSaved: false,
      replaceFrom: undefined,
    };
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
  const rest = server.slice(i);
  for (const { message, index } of rest) out.push(fromStoredMessage(message as StoredMessage & { role: "user" | "assistant" }, index));
  for (const mine of local.slice(i)) {
    if (rest.some(({ message }) => sameMessage(mine, message))) continue; // the server's copy is already in
    if (mine.nodeId !== undefined && elsewhere.has(mine.nodeId)) continue; // stored on a branch not shown now
    out.push({ ...mine, storedIndex: undefined, nodeId: undefined, siblings: undefined });
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
 * A turn the server never saved: its messages lose their positions and ids; the user message of a replace keeps
 * the id of the message it was to be a version of, so that a retry or an edit sends `replace_from` again (the server
 * still holds that message's branch).
 */
export function markTurnUnsaved(
  messages: UiMessage[],
  userKey: string,
  answerKey: string,
  replaceFrom?: number,
): UiMessage[] {
  const unstored = { storedIndex: undefined, nodeId: undefined, siblings: undefined };
  return messages.map((m) => {
    if (m.key === userKey) return { ...m, ...unstored, replaceFrom };
    if (m.key === answerKey) return { ...m, ...unstored };
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

/** The message id a replace of this user message (an edit, a regenerate) sends as `replace_from`, if any. */
export function replaceIndex(message: UiMessage): number | undefined {
  return message.nodeId ?? message.replaceFrom;
}

/** The id of the last stored message shown: what a new message continues (`parent_message_id`). */
export function lastStoredId(messages: UiMessage[]): number | undefined {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.nodeId !== undefined) return messages[i]!.nodeId;
  return undefined;
}

/** The position in the shown branch a message after these takes (its predicted `storedIndex`), when known. */
export function nextPosition(messages: UiMessage[]): number | undefined {
  for (let i = messages.length - 1; i >= 0; i--) {
    const position = messages[i]!.storedIndex;
    if (position !== undefined) return position + 1;
  }
  return undefined;
}

/** What a version switch shows: the new branch, the message switched to, its place, and the leaf to persist. */
export interface VersionSwitch {
  messages: UiMessage[];
  leaf: number;
  /** 1-based. */
  position: number;
  count: number;
}

/**
 * Switch the message `key` to its version `delta` places along, and show that version's branch down to its newest
 * leaf, worked out from `tree` (the server's, as last read). Messages still shown keep their keys (and what the view
 * holds of them, such as the passages of a live answer); the switched-to version takes the key of the one it
 * replaces, so that the control the reader used stays where it was (and keeps the focus). Null when there is no
 * such version.
 */
export function switchVersion(view: UiMessage[], tree: MessageTree, key: string, delta: number): VersionSwitch | null {
  const from = view.find((m) => m.key === key);
  if (!from || from.nodeId === undefined) return null;
  const switched = switchedPath(tree, from.nodeId, delta);
  if (!switched) return null;
  const byId = new Map(view.filter((m) => m.nodeId !== undefined).map((m) => [m.nodeId!, m]));
  const messages = fromStored(switched.path.map(({ id, message }) => ({ ...message, id }))).map((m) => {
    const ids = siblingsOf(tree, m.nodeId!);
    const siblings = ids.length > 0 ? { ids, index: ids.indexOf(m.nodeId!) } : m.siblings;
    if (m.nodeId === switched.target) return { ...m, key: from.key, siblings };
    const mine = byId.get(m.nodeId!);
    return mine ? { ...mine, storedIndex: m.storedIndex, siblings } : { ...m, siblings };
  });
  return { messages, leaf: switched.leaf, position: switched.index + 1, count: switched.count };
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
