import { afterEach, describe, expect, it, vi } from "vitest";
import { highlightSegments, searchableQuery, searchConversations, speaker, type Segment } from "./conversationSearch";

const marked = (segments: Segment[]) => segments.filter((s) => s.marked).map((s) => s.text);
const joined = (segments: Segment[]) => segments.map((s) => s.text).join("");

describe("a hit's snippet split at its highlights", () => {
  it("marks the spans and keeps every character, in order", () => {
    const snippet = "How do I bake sourdough bread at home?";
    const segments = highlightSegments(snippet, [
      { start: 9, end: 13 },
      { start: 24, end: 29 },
    ]);
    expect(segments).toEqual([
      { text: "How do I ", marked: false },
      { text: "bake", marked: true },
      { text: " sourdough ", marked: false },
      { text: "bread", marked: true },
      { text: " at home?", marked: false },
    ]);
    expect(joined(segments)).toBe(snippet);
  });

  it("reads the server's offsets as code points, not UTF-16 units (emoji and other astral characters)", () => {
    // The server counts "🍞" as one character; a JS string holds it as two UTF-16 units.
    const snippet = "🍞 bake 🥖 bread, 𝒷𝓇𝑒𝒶𝒹 too";
    expect(snippet.length).toBe(32); // UTF-16 units
    expect([...snippet].length).toBe(25); // code points, as Python's len()
    const segments = highlightSegments(snippet, [
      { start: 2, end: 6 }, // bake
      { start: 9, end: 14 }, // bread
      { start: 16, end: 21 }, // 𝒷𝓇𝑒𝒶𝒹 (mathematical script letters, astral)
    ]);
    expect(marked(segments)).toEqual(["bake", "bread", "𝒷𝓇𝑒𝒶𝒹"]);
    expect(joined(segments)).toBe(snippet);
    // A span over the emoji itself takes both of its halves.
    expect(marked(highlightSegments(snippet, [{ start: 0, end: 1 }]))).toEqual(["🍞"]);
  });

  it("keeps marks right after a leading ellipsis and across combining marks", () => {
    const snippet = "…the cafe\u0301 serves bread"; // "é" as e + a combining accent: two code points, two units
    const start = [...snippet].indexOf("b");
    const segments = highlightSegments(snippet, [
      { start: 5, end: 10 },
      { start, end: start + 5 },
    ]);
    expect(marked(segments)).toEqual(["cafe\u0301", "bread"]);
  });

  it("gives the snippet as one plain piece without highlights", () => {
    expect(highlightSegments("just text", [])).toEqual([{ text: "just text", marked: false }]);
    expect(highlightSegments("just text", undefined)).toEqual([{ text: "just text", marked: false }]);
    expect(highlightSegments("", [])).toEqual([]);
  });

  it("ignores spans that overlap one before them, in any order given", () => {
    const snippet = "abcdefghij";
    const segments = highlightSegments(snippet, [
      { start: 4, end: 8 },
      { start: 1, end: 3 },
      { start: 2, end: 5 }, // overlaps 1..3
      { start: 6, end: 9 }, // overlaps 4..8
    ]);
    expect(segments).toEqual([
      { text: "a", marked: false },
      { text: "bc", marked: true },
      { text: "d", marked: false },
      { text: "efgh", marked: true },
      { text: "ij", marked: false },
    ]);
  });

  it("ignores spans out of range, empty, reversed or not whole numbers", () => {
    const snippet = "🍞 bread";
    const segments = highlightSegments(snippet, [
      { start: -1, end: 2 },
      { start: 2, end: 8 }, // past the end (7 code points, though 8 UTF-16 units)
      { start: 3, end: 3 },
      { start: 5, end: 4 },
      { start: 1.5, end: 4 },
      { start: Number.NaN, end: 4 },
      null as unknown as { start: number; end: number },
      { start: 2, end: 7 },
    ]);
    expect(segments).toEqual([
      { text: "🍞 ", marked: false },
      { text: "bread", marked: true },
    ]);
  });

  it("marks two touching spans as two marks", () => {
    expect(highlightSegments("abcd", [{ start: 0, end: 2 }, { start: 2, end: 4 }])).toEqual([
      { text: "ab", marked: true },
      { text: "cd", marked: true },
    ]);
  });
});

describe("the search call", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("sends the words encoded, the limit, and the abort signal", async () => {
    const fetchMock = vi.fn(async (_url: string, _init?: RequestInit) =>
      new Response(JSON.stringify({ object: "list", query: "a&b c", data: [] }), {
        status: 200,
        headers: { "content-type": "application/json" },
      }),
    );
    vi.stubGlobal("fetch", fetchMock);
    const abort = new AbortController();
    const results = await searchConversations("a&b c", { limit: 5, signal: abort.signal });
    expect(results.data).toEqual([]);
    const [url, init] = fetchMock.mock.calls[0]!;
    expect(url).toBe("/v1/conversations/search?q=a%26b%20c&limit=5");
    expect(init?.method).toBe("GET");
    expect(init?.signal).toBe(abort.signal);
  });

  it("is asked only for two characters or more, trimmed", () => {
    expect(searchableQuery("")).toBeNull();
    expect(searchableQuery("  a  ")).toBeNull();
    expect(searchableQuery("🍞")).toBeNull(); // one character, two UTF-16 units
    expect(searchableQuery(" ab ")).toBe("ab");
  });

  it("names who wrote the message", () => {
    expect(speaker("user")).toBe("You");
    expect(speaker("assistant")).toBe("Assistant");
  });
});
