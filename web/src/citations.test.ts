import { describe, expect, it } from "vitest";
import {
  citedIndices,
  mergeCitations,
  passageWindow,
  retrievalNote,
  shownCitations,
  snippet,
  storeFromCitations,
} from "./citations";
import type { Citation, FileContentPart } from "./types";

// A document and its chunks as ingestion cuts them: exact slices, overlapping, the blank lines sometimes left out.
const TEXT =
  "# Normans\n\nThe Normans were the people who gave their name to Normandy.\n\n" +
  "They descended from Norse raiders and pirates led by Rollo.\n\n" +
  "Their identity emerged in the first half of the 10th century.";
function part(from: string, to: string, id: string): FileContentPart {
  const start = TEXT.indexOf(from);
  const end = TEXT.indexOf(to) + to.length;
  return { type: "text", text: TEXT.slice(start, end), chunk_id: id, start_offset: start, end_offset: end };
}
const PARTS = [
  part("# Normans", "Normandy.", "file-1:0"),
  part("They descended", "Rollo.", "file-1:1"),
  part("They descended", "10th century.", "file-1:2"), // overlaps the previous chunk
];

function citation(index: number, chunk = PARTS[1]!, text: string | null = chunk.text): Citation {
  return {
    index,
    vector_store_id: "vs_1",
    file_id: "file-1",
    filename: "normans.md",
    chunk_id: chunk.chunk_id,
    start: chunk.start_offset,
    end: chunk.end_offset,
    score: 0.5,
    text,
  };
}

describe("which citations an answer lists", () => {
  it("lists those the answer refers to by [n], in order, else every passage it was given", () => {
    const given = [citation(3), citation(1), citation(2)];
    expect(shownCitations("Rollo led them [2], as [1] says; see [2].", given).map((c) => c.index)).toEqual([1, 2]);
    expect(shownCitations("Rollo led them.", given).map((c) => c.index)).toEqual([1, 2, 3]);
    expect(shownCitations("Only [9] is cited, which was not given.", given).map((c) => c.index)).toEqual([1, 2, 3]);
    expect(shownCitations("anything", undefined)).toEqual([]);
  });

  it("reads [n] markers but not markdown links", () => {
    expect([...citedIndices("see [1] and [12], not [3](https://example.com) or [x]")]).toEqual([1, 12]);
  });
});

describe("stored citations and the streamed ones", () => {
  it("keeps the server's list and takes each passage's text from the same streamed citation", () => {
    const streamed = [citation(1, PARTS[0]!), citation(2)];
    const stored = [citation(1, PARTS[0]!, null), citation(2, PARTS[1]!, null)];
    expect(mergeCitations(stored, streamed)).toEqual(streamed);
    // A stored citation the stream did not carry (another chunk at that index) keeps no text.
    const other = [citation(1, PARTS[2]!, null)];
    expect(mergeCitations(other, streamed)).toEqual(other);
    expect(mergeCitations(undefined, streamed)).toBe(streamed);
    expect(mergeCitations(null, [])).toBeUndefined();
    expect(mergeCitations(stored, undefined)).toEqual(stored);
  });

  it("finds the conversation's store from its latest cited answer", () => {
    const later = { ...citation(1), vector_store_id: "vs_2" };
    expect(storeFromCitations([{ citations: [citation(1)] }, {}, { citations: [later] }, { citations: [] }])).toBe("vs_2");
    expect(storeFromCitations([{}, { citations: null }])).toBeNull();
  });
});

describe("the cited passage in its context", () => {
  it("rebuilds the text around the span from overlapping chunks, the span exactly the cited characters", () => {
    const c = citation(1);
    const view = passageWindow(PARTS, c.start, c.end)!;
    expect(view.cited).toBe(TEXT.slice(c.start, c.end));
    expect(view.cited).toContain("Rollo");
    // Before: the first chunk, then the blank line no chunk holds, shown as one line break.
    expect(view.before).toBe(`${TEXT.slice(0, c.start).trimEnd()}\n`);
    // After: the overlapping third chunk holds the blank line and the rest.
    expect(view.after).toBe(TEXT.slice(c.end));
    expect([view.clippedBefore, view.clippedAfter]).toEqual([false, false]);
  });

  it("clips long context at word boundaries and says so", () => {
    const c = citation(1);
    const view = passageWindow(PARTS, c.start, c.end, 12)!;
    expect(view.cited).toBe(TEXT.slice(c.start, c.end));
    expect(view.clippedBefore && view.clippedAfter).toBe(true);
    expect(view.before.length).toBeLessThanOrEqual(12);
    expect(TEXT).toContain(view.before.trim());
    expect(view.after.startsWith("\n")).toBe(true); // the context goes on past the paragraph break
    expect(/\S$/.test(view.after) && TEXT.includes(view.after.trim())).toBe(true);
  });

  it("is null when the chunks do not hold the span (the file was deleted or indexed again)", () => {
    expect(passageWindow([], 0, 10)).toBeNull();
    expect(passageWindow(PARTS, 0, TEXT.length + 5)).toBeNull();
    const gap = TEXT.indexOf("\n\nThey");
    expect(passageWindow([PARTS[0]!, PARTS[1]!], gap, gap + 5)).toBeNull();
  });
});

describe("notes and previews", () => {
  it("says when the files were not used", () => {
    expect(retrievalNote({ status: "used" })).toBeNull();
    expect(retrievalNote(undefined)).toBeNull();
    expect(retrievalNote({ status: "skipped", reason: "latency_budget" })).toMatch(/not searched in time/);
    expect(retrievalNote({ status: "skipped", reason: "search_failed" })).toMatch(/could not be searched/);
    expect(retrievalNote({ status: "empty" })).toMatch(/No passage from your files/);
  });

  it("shortens a passage at a word", () => {
    expect(snippet("short\n\ntext")).toBe("short text");
    const long = "word ".repeat(60);
    const cut = snippet(long, 20);
    expect(cut.endsWith("…") && cut.length <= 21 && !cut.includes("  ")).toBe(true);
  });
});
