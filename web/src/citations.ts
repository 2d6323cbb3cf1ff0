/**
 * Citations under an answer: which to show, how a stored turn's citations (kept without their text) line up with the
 * ones the stream carried, and the cited passage in its context, rebuilt from the file's indexed chunks.
 */
import type { Citation, FileContentPart, RetrievalReport } from "./types";

const MARKER = /\[(\d{1,3})\](?!\()/g;

/** The `[n]` markers an answer uses (not markdown links `[1](…)`). */
export function citedIndices(content: string): Set<number> {
  const found = new Set<number>();
  for (const match of content.matchAll(MARKER)) found.add(Number(match[1]));
  return found;
}

/**
 * The citations to list under an answer: those its text refers to by `[n]` when it refers to any of them, else every
 * passage it was given (a small model often cites nothing, and the sources still matter). In `[n]` order.
 */
export function shownCitations(content: string, citations: Citation[] | undefined | null): Citation[] {
  if (!citations || citations.length === 0) return [];
  const sorted = [...citations].sort((a, b) => a.index - b.index);
  const used = citedIndices(content);
  const referred = sorted.filter((c) => used.has(c.index));
  return referred.length > 0 ? referred : sorted;
}

function sameCitation(a: Citation, b: Citation): boolean {
  return a.index === b.index && a.chunk_id === b.chunk_id;
}

/**
 * A stored answer's citations (the server's list, authoritative, without text) with the passage text of the same
 * citations the stream delivered, so a reconciled answer keeps showing its passages without reading them back.
 */
export function mergeCitations(
  stored: Citation[] | null | undefined,
  local: Citation[] | null | undefined,
): Citation[] | undefined {
  if (!stored || stored.length === 0) return local && local.length > 0 ? local : undefined;
  return stored.map((citation) => {
    if (citation.text) return citation;
    const mine = local?.find((c) => sameCitation(c, citation));
    return mine?.text ? { ...citation, text: mine.text } : citation;
  });
}

/** The vector store the conversation's latest cited answer used (a way back to its files when none is remembered). */
export function storeFromCitations(messages: ReadonlyArray<{ citations?: Citation[] | null }>): string | null {
  for (let i = messages.length - 1; i >= 0; i--) {
    const cited = messages[i]!.citations;
    if (cited && cited.length > 0) return cited[cited.length - 1]!.vector_store_id;
  }
  return null;
}

/** A note under an answer whose request named files but got no passages from them; null when there is none. */
export function retrievalNote(report: Pick<RetrievalReport, "status" | "reason"> | null | undefined): string | null {
  switch (report?.status) {
    case "skipped":
      return report.reason === "latency_budget"
        ? "Your files were not searched in time: answered without them."
        : "Your files could not be searched: answered without them.";
    case "empty":
      return "No passage from your files was used for this answer.";
    case "no_room":
      return "No room left for passages from your files in this conversation.";
    default:
      return null;
  }
}

export interface PassageView {
  before: string;
  cited: string;
  after: string;
  /** Text of the file goes on before / after what is shown. */
  clippedBefore: boolean;
  clippedAfter: boolean;
}

/**
 * The cited span [start, end) with up to `context` characters of the file's text on each side, rebuilt from its
 * indexed chunks (each an exact slice of the extracted text; they may overlap, and the blank lines between
 * paragraphs may fall between them: such a gap shows as a line break). Null when the chunks do not hold the span
 * (the file was re-indexed or deleted since).
 */
export function passageWindow(parts: FileContentPart[], start: number, end: number, context = 600): PassageView | null {
  if (parts.length === 0 || end <= start) return null;
  const first = Math.min(...parts.map((p) => p.start_offset));
  const last = Math.max(...parts.map((p) => p.end_offset));
  if (start < first || end > last) return null;
  let lo = Math.max(first, start - context);
  let hi = Math.min(last, end + context);
  const chars: Array<string | null> = new Array(hi - lo).fill(null);
  for (const part of parts) {
    const from = Math.max(lo, part.start_offset);
    const to = Math.min(hi, part.end_offset);
    for (let i = from; i < to; i++) chars[i - lo] = part.text[i - part.start_offset] ?? null;
  }
  for (let i = start; i < end; i++) if (chars[i - lo] === null) return null; // the span itself must be indexed
  // Cut the context at a word (or line) boundary rather than mid-word.
  while (lo < start && lo > first && chars[0] !== null && !/\s/.test(chars[0]!)) {
    chars.shift();
    lo += 1;
  }
  while (hi > end && hi < last && chars[chars.length - 1] !== null && !/\s/.test(chars[chars.length - 1]!)) {
    chars.pop();
    hi -= 1;
  }
  const text = (from: number, to: number) => {
    let out = "";
    let gap = false;
    for (let i = from; i < to; i++) {
      const char = chars[i - lo];
      if (char === null || char === undefined) {
        if (!gap) out += "\n";
        gap = true;
      } else {
        out += char;
        gap = false;
      }
    }
    return out;
  };
  return {
    before: text(lo, start).trimStart(),
    cited: text(start, end),
    after: text(end, hi).trimEnd(),
    clippedBefore: lo > first,
    clippedAfter: hi < last,
  };
}

/** A short preview of a passage for the citation list. */
export function snippet(text: string, max = 140): string {
  const flat = text.replace(/\s+/g, " ").trim();
  if (flat.length <= max) return flat;
  const cut = flat.slice(0, max);
  const space = cut.lastIndexOf(" ");
  return `${(space > max * 0.6 ? cut.slice(0, space) : cut).trimEnd()}…`;
}
