/**
 * Answer feedback: the API calls (`/v1/conversations/{id}/messages/{index}/feedback`, `index` the answer's stored
 * message id) and the per-answer state the thumbs and the comment box show. What the server holds (`rating`,
 * `comment`) changes only when a call succeeds; a failed call leaves it, keeps the typed comment and says what went
 * wrong.
 */
import { apiFetch, ApiError } from "./api";

export type Rating = "up" | "down";
export const MAX_COMMENT_CHARS = 2000;

export interface FeedbackObject {
  object: "conversation.message.feedback";
  conversation_id: string;
  /** The answer's stored message id. */
  message_index: number;
  rating: Rating;
  comment: string | null;
  created_at: number;
  model: string | null;
}

const enc = encodeURIComponent;

function messagePath(conversationId: string, index: number): string {
  return `/v1/conversations/${enc(conversationId)}/messages/${index}/feedback`;
}

export const feedbackApi = {
  async list(conversationId: string): Promise<FeedbackObject[]> {
    const response = await apiFetch(`/v1/conversations/${enc(conversationId)}/feedback`);
    return ((await response.json()) as { data: FeedbackObject[] }).data;
  },
  async give(conversationId: string, index: number, rating: Rating, comment: string | null): Promise<FeedbackObject> {
    const body = comment ? { rating, comment } : { rating };
    const response = await apiFetch(messagePath(conversationId, index), { method: "POST", body });
    return (await response.json()) as FeedbackObject;
  },
  async remove(conversationId: string, index: number): Promise<void> {
    await apiFetch(messagePath(conversationId, index), { method: "DELETE" });
  },
};

/** One answer's feedback as the view shows it. */
export interface FeedbackEntry {
  /** The answer text this entry is about: an entry read for another text starts without a rating. */
  answer: string;
  /** What the server holds. */
  rating: Rating | null;
  comment: string | null;
  /** The comment box's text, kept while the box is hidden (Close, Escape); null when nothing is being written. */
  draft: string | null;
  /** Whether the comment box is shown. */
  open: boolean;
  pending: boolean;
  error: string | null;
}

export type FeedbackMap = Record<number, FeedbackEntry>;

export function emptyEntry(answer: string): FeedbackEntry {
  return { answer, rating: null, comment: null, draft: null, open: false, pending: false, error: null };
}

/** The entry for the answer now at `index`, or a fresh one when the stored entry was about another answer. */
export function entryFor(map: FeedbackMap, index: number, answer: string): FeedbackEntry {
  const entry = map[index];
  return entry && entry.answer === answer ? entry : emptyEntry(answer);
}

/** The server's listing as entries, for the answers the view shows (by stored message id). */
export function fromListing(items: FeedbackObject[], answers: Map<number, string>): FeedbackMap {
  const map: FeedbackMap = {};
  for (const item of items) {
    const answer = answers.get(item.message_index);
    if (answer === undefined) continue;
    map[item.message_index] = { ...emptyEntry(answer), rating: item.rating, comment: item.comment };
  }
  return map;
}

/** What a thumb click does: remove the rating when it is the one held, else give it (keeping the comment). */
export type ThumbAction = { kind: "remove" } | { kind: "give"; rating: Rating; comment: string | null };

export function thumbAction(entry: FeedbackEntry, rating: Rating): ThumbAction {
  if (entry.rating === rating) return { kind: "remove" };
  return { kind: "give", rating, comment: entry.comment };
}

export function started(entry: FeedbackEntry): FeedbackEntry {
  return { ...entry, pending: true, error: null };
}

/** A rating was stored: the comment box opens (with the kept draft, else the stored comment) unless one was just
 * sent. */
export function given(entry: FeedbackEntry, stored: FeedbackObject, commentSent: boolean): FeedbackEntry {
  return {
    ...entry,
    rating: stored.rating,
    comment: stored.comment,
    draft: commentSent ? null : (entry.draft ?? stored.comment ?? ""),
    open: !commentSent,
    pending: false,
    error: null,
  };
}

export function removed(entry: FeedbackEntry): FeedbackEntry {
  return { ...entry, rating: null, comment: null, draft: null, open: false, pending: false, error: null };
}

/** Show the comment box again: the draft kept from before, else the stored comment to edit. */
export function reopened(entry: FeedbackEntry): FeedbackEntry {
  return { ...entry, draft: entry.draft ?? entry.comment ?? "", open: true };
}

/** Hide the comment box; what was typed is kept for when it opens again. */
export function hidden(entry: FeedbackEntry): FeedbackEntry {
  return { ...entry, open: false, error: null };
}

/** A call failed: what the server holds and the typed comment stay; the error is shown. */
export function failed(entry: FeedbackEntry, error: unknown): FeedbackEntry {
  return { ...entry, pending: false, error: describe(error) };
}

function describe(error: unknown): string {
  if (error instanceof ApiError) {
    if (error.kind === "network") return "Feedback not sent: the service could not be reached. Try again.";
    if (error.status === 404) return "Feedback not sent: this conversation no longer exists.";
    return `Feedback not sent: ${error.message}`;
  }
  return "Feedback not sent. Try again.";
}
