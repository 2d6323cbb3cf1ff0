import { describe, expect, it } from "vitest";
import {
  contextCutIndex,
  fromStored,
  lastUserIndex,
  markTurnUnsaved,
  reconcile,
  replaceIndex,
  showsTurn,
  statusFromFinish,
  withoutReplaceMarks,
  type UiMessage,
} from "./chatModel";
import type { StoredMessage } from "./types";

const stored: StoredMessage[] = [
  { role: "system", content: "be nice" },
  { role: "user", content: "hi" },
  { role: "assistant", content: "hello", finish_reason: "stop" },
  { role: "user", content: "more" },
  { role: "assistant", content: "partial answer", finish_reason: "stopped" },
];

describe("fromStored", () => {
  it("hides system messages but keeps their place in the stored indices", () => {
    const view = fromStored(stored);
    expect(view.map((m) => [m.role, m.storedIndex, m.status])).toEqual([
      ["user", 1, undefined],
      ["assistant", 2, "done"],
      ["user", 3, undefined],
      ["assistant", 4, "stopped"],
    ]);
  });

  it("maps finish reasons to statuses", () => {
    expect(statusFromFinish("stopped")).toBe("stopped");
    expect(statusFromFinish("content_filter")).toBe("filtered");
    expect(statusFromFinish("length")).toBe("done");
    expect(statusFromFinish(null)).toBe("done");
  });
});

describe("citations in the view", () => {
  const cite = (text: string | null) => ({
    index: 1, vector_store_id: "vs_1", file_id: "file-1", filename: "n.md", chunk_id: "file-1:0", start: 0, end: 5, text,
  });

  it("a stored answer brings its citations (stored without text); other messages have none", () => {
    const view = fromStored([
      { role: "user", content: "who?" },
      { role: "assistant", content: "Rollo [1]", finish_reason: "stop", citations: [cite(null)] },
      { role: "assistant", content: "no sources", finish_reason: "stop", citations: [] },
    ]);
    expect(view[1]!.citations).toEqual([cite(null)]);
    expect(view[2]!.citations).toBeUndefined();
  });

  it("reconciling keeps the streamed passage text on the server's citations", () => {
    const local: UiMessage[] = [
      { key: "u", role: "user", content: "who?" },
      { key: "a", role: "assistant", content: "Rollo [1]", status: "done", citations: [cite("Rollo")], retrieval: { status: "used" } },
    ];
    const merged = reconcile(local, [
      { role: "user", content: "who?" },
      { role: "assistant", content: "Rollo [1]", finish_reason: "stop", citations: [cite(null)] },
    ]);
    expect(merged[1]).toMatchObject({ key: "a", storedIndex: 1, citations: [cite("Rollo")], retrieval: { status: "used" } });
    // An answer the view holds without citations (its first chunk was never read) gets the server's.
    const bare = reconcile([local[0]!, { ...local[1]!, citations: undefined }], [
      { role: "user", content: "who?" },
      { role: "assistant", content: "Rollo [1]", finish_reason: "stop", citations: [cite(null)] },
    ]);
    expect(bare[1]!.citations).toEqual([cite(null)]);
  });
});

describe("reconcile", () => {
  const local = (): UiMessage[] => [
    { key: "a", role: "user", content: "hi" },
    { key: "b", role: "assistant", content: "hello", status: "done" },
    { key: "c", role: "user", content: "more" },
    { key: "d", role: "assistant", content: "partial", status: "stopped" },
  ];

  it("assigns stored indices and keeps local keys; takes the server's longer stopped answer", () => {
    const out = reconcile(local(), stored);
    expect(out.map((m) => [m.key, m.storedIndex])).toEqual([
      ["a", 1],
      ["b", 2],
      ["c", 3],
      ["d", 4],
    ]);
    expect(out[3]!.content).toBe("partial answer");
    expect(out[3]!.status).toBe("stopped");
  });

  it("keeps a failed, unsaved turn at the end without stored indices", () => {
    const mine: UiMessage[] = [
      ...local().slice(0, 2),
      { key: "x", role: "user", content: "failed one", storedIndex: 3 },
      { key: "y", role: "assistant", content: "par", status: "error" },
    ];
    const out = reconcile(mine, stored.slice(0, 3));
    expect(out.map((m) => [m.key, m.storedIndex])).toEqual([
      ["a", 1],
      ["b", 2],
      ["x", undefined],
      ["y", undefined],
    ]);
    expect(out[3]!.status).toBe("error");
  });

  it("adds turns another tab stored", () => {
    const out = reconcile(local().slice(0, 2), stored);
    expect(out.map((m) => m.content)).toEqual(["hi", "hello", "more", "partial answer"]);
    expect(lastUserIndex(out)).toBe(2);
  });
});

describe("showsTurn", () => {
  it("compares versions when the version before the turn is known", () => {
    expect(showsTurn({ version: 3, count: 5 }, { version: 3, message_count: 9 }, 7)).toBe(false);
    expect(showsTurn({ version: 3, count: 5 }, { version: 4, message_count: 5 }, 7)).toBe(true);
    // a new chat: version 0 before its first turn is saved
    expect(showsTurn({ version: 0, count: 0 }, { version: 1, message_count: 3 }, 2)).toBe(true);
  });

  it("falls back to the message count, and otherwise says no", () => {
    expect(showsTurn({ version: null, count: 5 }, { version: 8, message_count: 5 }, 7)).toBe(false);
    expect(showsTurn({ version: null, count: 5 }, { version: 8, message_count: 7 }, 7)).toBe(true);
    expect(showsTurn({ version: null, count: null }, { version: 8, message_count: 7 }, null)).toBe(false);
  });
});

describe("unsaved turns", () => {
  const view = (): UiMessage[] => [
    { key: "a", role: "user", content: "hi", storedIndex: 1 },
    { key: "b", role: "assistant", content: "hello", status: "done", storedIndex: 2 },
    { key: "u", role: "user", content: "more", storedIndex: 3 },
    { key: "x", role: "assistant", content: "", status: "stopped", storedIndex: 4 },
  ];

  it("markTurnUnsaved drops the turn's stored indices and keeps a replace's index", () => {
    const plain = markTurnUnsaved(view(), "u", "x");
    expect(plain.map((m) => m.storedIndex)).toEqual([1, 2, undefined, undefined]);
    expect(replaceIndex(plain[2]!)).toBeUndefined();
    const replaced = markTurnUnsaved(view(), "u", "x", 3);
    expect(replaced[2]!.storedIndex).toBeUndefined();
    expect(replaceIndex(replaced[2]!)).toBe(3);
    expect(replaceIndex(replaced[0]!)).toBe(1);
  });

  it("reconcile keeps an unsaved replacement in place of the stored messages it replaces", () => {
    // Regenerate (same text) stopped before anything was streamed: the server still holds the old answer.
    const mine = markTurnUnsaved(view(), "u", "x", 3);
    const out = reconcile(mine, stored);
    expect(out.map((m) => [m.key, m.storedIndex, m.replaceFrom])).toEqual([
      ["a", 1, undefined],
      ["b", 2, undefined],
      ["u", undefined, 3],
      ["x", undefined, undefined],
    ]);
    expect(out.map((m) => m.content)).toEqual(["hi", "hello", "more", ""]);
  });

  it("withoutReplaceMarks turns an unsaved replacement into an ordinary unsaved turn", () => {
    const mine = markTurnUnsaved(view(), "u", "x", 3);
    const plain = withoutReplaceMarks(mine);
    expect(plain.some((m) => m.replaceFrom !== undefined)).toBe(false);
    const unchanged = view();
    expect(withoutReplaceMarks(unchanged)).toBe(unchanged);
  });

  it("reconcile after the stopped replace was saved assigns its indices", () => {
    const mine: UiMessage[] = [
      ...view().slice(0, 2),
      { key: "u", role: "user", content: "edited" },
      { key: "x", role: "assistant", content: "par", status: "stopped" },
    ];
    const after: StoredMessage[] = [
      ...stored.slice(0, 3),
      { role: "user", content: "edited" },
      { role: "assistant", content: "partial", finish_reason: "stopped" },
    ];
    const out = reconcile(mine, after);
    expect(out.map((m) => [m.key, m.storedIndex])).toEqual([
      ["a", 1],
      ["b", 2],
      ["u", 3],
      ["x", 4],
    ]);
    expect(out[3]!.content).toBe("partial");
  });
});

describe("contextCutIndex", () => {
  const many: StoredMessage[] = [
    { role: "system", content: "be nice" },
    ...Array.from({ length: 6 }, (_, i): StoredMessage => ({ role: i % 2 ? "assistant" : "user", content: `m${i}` })),
  ];

  it("puts the divider before the first message the model still sees, after the hidden system prompt", () => {
    const view = fromStored(many); // stored indices 1..6
    expect(contextCutIndex(view, 2)).toBe(2); // stored 1 and 2 are out: the divider goes before stored 3
    expect(view[2]!.storedIndex).toBe(3);
  });

  it("counts from the first message when there is no system prompt", () => {
    const view = fromStored(many.slice(1)); // stored indices 0..5
    expect(contextCutIndex(view, 4)).toBe(4);
  });

  it("shows no divider when nothing is out of context or the cut is not in view", () => {
    const view = fromStored(many);
    expect(contextCutIndex(view, 0)).toBeNull();
    expect(contextCutIndex(view, 40)).toBeNull();
    expect(contextCutIndex([], 3)).toBeNull();
  });
});
