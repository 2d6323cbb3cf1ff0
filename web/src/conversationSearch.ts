/**
 * Full-text search over the caller's conversations (`GET /v1/conversations/search`, docs/conversations.md
 * "Search"): the wire shapes, the call, and a hit's snippet split into plain and marked pieces for display.
 */
import { json } from "./api";

/** Where a searched word is in a snippet: offsets in Unicode code points (the server counts in Python). */
export interface TextSpan {
  start: number;
  end: number;
}

export interface ConversationSearchHit {
  object: "conversation.search_hit";
  conversation_id: string;
  title: string | null;
  /** The message the words were found in, on any branch (`PATCH {"current_node": id}` shows it). */
  message_id: number;
  role: "user" | "assistant";
  created_at: number;
  updated_at: number;
  /** About 180 characters of the message around its first match, on one line. */
  snippet: string;
  /** Where the searched words are in `snippet`, in order. */
  highlights: TextSpan[];
  score: number;
}

export interface ConversationSearchResults {
  object: "list";
  query: string;
  data: ConversationSearchHit[];
}

/** Queries shorter than this (trimmed, in characters) are not sent. */
export const MIN_QUERY_CHARS = 2;
/** The server's default and the sidebar's page: the best this many. */
export const SEARCH_LIMIT = 20;

/** The query as it is sent, or null when it is too short to search. */
export function searchableQuery(query: string): string | null {
  const trimmed = query.trim();
  return [...trimmed].length >= MIN_QUERY_CHARS ? trimmed : null;
}

export function searchConversations(
  query: string,
  options: { limit?: number; signal?: AbortSignal } = {},
): Promise<ConversationSearchResults> {
  const limit = options.limit ?? SEARCH_LIMIT;
  return json<ConversationSearchResults>(
    `/v1/conversations/search?q=${encodeURIComponent(query)}&limit=${limit}`,
    { signal: options.signal },
  );
}

/** A piece of a snippet: shown as it is, or marked as a searched word. */
export interface Segment {
  text: string;
  marked: boolean;
}

/** The UTF-16 index (a JS string's) at each code point offset of `text`, 0 through its length in code points. */
function utf16Offsets(text: string): number[] {
  const offsets = [0];
  let units = 0;
  for (const char of text) {
    units += char.length;
    offsets.push(units);
  }
  return offsets;
}

/**
 * `snippet` split at its `highlights` (code point offsets, as the server sends them) into plain and marked pieces, in
 * order, every character in exactly one piece. Spans that are not whole numbers, are empty or reversed, reach past
 * the snippet, or overlap a span before them are ignored; an empty list gives the snippet as one plain piece.
 */
export function highlightSegments(snippet: string, highlights: readonly TextSpan[] | null | undefined): Segment[] {
  const offsets = utf16Offsets(snippet);
  const length = offsets.length - 1;
  const spans = (highlights ?? [])
    .filter(
      (span) =>
        span != null &&
        Number.isInteger(span.start) &&
        Number.isInteger(span.end) &&
        span.start >= 0 &&
        span.start < span.end &&
        span.end <= length,
    )
    .slice()
    .sort((a, b) => a.start - b.start || a.end - b.end);
  const segments: Segment[] = [];
  const push = (text: string, marked: boolean) => {
    if (!text) return;
    const last = segments[segments.length - 1];
    if (last && last.marked === marked && !marked) last.text += text;
    else segments.push({ text, marked });
  };
  let cursor = 0; // in code points
  for (const span of spans) {
    if (span.start < cursor) continue; // overlaps the one before it
    push(snippet.slice(offsets[cursor]!, offsets[span.start]!), false);
    push(snippet.slice(offsets[span.start]!, offsets[span.end]!), true);
    cursor = span.end;
  }
  push(snippet.slice(offsets[cursor]!), false);
  return segments;
}

/** Who wrote a hit's message, as the sidebar says it. */
export function speaker(role: ConversationSearchHit["role"]): string {
  return role === "user" ? "You" : "Assistant";
}
