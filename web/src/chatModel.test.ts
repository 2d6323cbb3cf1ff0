import { describe, expect, it } from "vitest";
import {
  contextCutIndex,
  fromStored,
  lastStoredId,
  lastUserIndex,
  markTurnUnsaved,
  nextPosition,
  reconcile,
  replaceIndex,
  showsTurn,
  statusFromFinish,
  switchVersion,
  withoutReplaceMarks,
  type UiMessage,
} from "./chatModel";
import { buildTree } from "./messageTree";
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

  it("marks the service's supportive reply to a self-harm ask by its stored model version", () => {
    const view = fromStored([
      { role: "user", content: "I don't want to live anymore." },
      { role: "assistant", content: "I'm really sorry…", finish_reason: "stop", model_version: "fleetchat-care@1" },
      { role: "assistant", content: "A model's answer", finish_reason: "stop", model_version: "smollm2@gguf" },
    ]);
    expect(view.map((m) => m.care)).toEqual([undefined, true, undefined]);
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
    { key: "a", role: "user", content: "hi", storedIndex: 1, nodeId: 1 },
    { key: "b", role: "assistant", content: "hello", status: "done", storedIndex: 2, nodeId: 2 },
    { key: "u", role: "user", content: "more", storedIndex: 3, nodeId: 3 },
    { key: "x", role: "assistant", content: "", status: "stopped", storedIndex: 4, nodeId: 4 },
  ];

  it("markTurnUnsaved drops the turn's stored indices and keeps a replace's index", () => {
    const plain = markTurnUnsaved(view(), "u", "x");
    expect(plain.map((m) => m.storedIndex)).toEqual([1, 2, undefined, undefined]);
    expect(plain.map((m) => m.nodeId)).toEqual([1, 2, undefined, undefined]);
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

describe("a conversation with versions (the message tree)", () => {
  const node = (id: number, parent_id: number | null, role: string, content: string, sibling_ids = [id]): StoredMessage => ({
    id,
    parent_id,
    sibling_ids,
    role,
    content,
    ...(role === "assistant" ? { finish_reason: "stop" } : {}),
  });
  // 0 sys; 1 "hi" → 2 "hello"; 3 "more" → 4 "A" | 5 "A" (regenerated, same text); "more" edited: 6 "other" → 7 "B".
  const active: StoredMessage[] = [
    node(0, null, "system", "sys"),
    node(1, 0, "user", "hi"),
    node(2, 1, "assistant", "hello"),
    node(6, 2, "user", "other", [3, 6]),
    node(7, 6, "assistant", "B"),
  ];
  const branches: StoredMessage[] = [node(3, 2, "user", "more", [3, 6]), node(4, 3, "assistant", "A", [4, 5]), node(5, 3, "assistant", "A", [4, 5])];

  it("fromStored keeps each message's id, position and versions", () => {
    const view = fromStored(active);
    expect(view.map((m) => [m.content, m.storedIndex, m.nodeId, m.siblings])).toEqual([
      ["hi", 1, 1, { ids: [1], index: 0 }],
      ["hello", 2, 2, { ids: [2], index: 0 }],
      ["other", 3, 6, { ids: [3, 6], index: 1 }],
      ["B", 4, 7, { ids: [7], index: 0 }],
    ]);
    expect(replaceIndex(view[2]!)).toBe(6); // an edit or a regenerate names the id, not the position
    expect(lastStoredId(view)).toBe(7);
    expect(nextPosition(view)).toBe(5);
    expect(lastStoredId([])).toBeUndefined();
    expect(nextPosition([{ key: "x", role: "user", content: "unsaved" }])).toBeUndefined();
  });

  it("a version switch shows the other version's branch down to its newest leaf, keeping the keys of what stays", () => {
    const view = fromStored(active);
    const tree = buildTree(active, branches);
    const back = switchVersion(view, tree, view[2]!.key, -1)!;
    expect(back).toMatchObject({ leaf: 5, position: 1, count: 2 });
    expect(back.messages.map((m) => [m.content, m.storedIndex, m.nodeId])).toEqual([
      ["hi", 1, 1],
      ["hello", 2, 2],
      ["more", 3, 3],
      ["A", 4, 5],
    ]);
    expect(back.messages.slice(0, 3).map((m) => m.key)).toEqual(view.slice(0, 3).map((m) => m.key));
    expect(back.messages[0]).toEqual(view[0]); // unchanged
    expect(back.messages[2]!.siblings).toEqual({ ids: [3, 6], index: 0 });
    expect(back.messages[3]!.siblings).toEqual({ ids: [4, 5], index: 1 });
    // Then the answer's previous version: same key, the first answer.
    const answer = switchVersion(back.messages, tree, back.messages[3]!.key, -1)!;
    expect(answer).toMatchObject({ leaf: 4, position: 1, count: 2 });
    expect(answer.messages[3]).toMatchObject({ key: back.messages[3]!.key, nodeId: 4, siblings: { ids: [4, 5], index: 0 } });
    // Past the ends, or a message without versions: nothing.
    expect(switchVersion(answer.messages, tree, answer.messages[3]!.key, -1)).toBeNull();
    expect(switchVersion(view, tree, view[2]!.key, 1)).toBeNull();
    expect(switchVersion(view, tree, view[0]!.key, 1)).toBeNull();
    expect(switchVersion(view, tree, "nope", 1)).toBeNull();
  });

  it("reconcile tells versions with the same text apart by id, and refreshes their versions", () => {
    // A regenerate answered "A" again (id 5): the view's new answer got its id from the turn's message_ids.
    const view: UiMessage[] = [
      ...fromStored([active[0]!, active[1]!, active[2]!, { ...branches[0]!, sibling_ids: [3] }, { ...branches[1]!, sibling_ids: [4] }]).slice(0, 3),
      { key: "new", role: "assistant", content: "A", status: "done", nodeId: 5 },
    ];
    const server = [active[0]!, active[1]!, active[2]!, branches[0]!, branches[2]!];
    const out = reconcile(view, server);
    expect(out.map((m) => [m.key, m.nodeId, m.storedIndex])).toEqual([
      [view[0]!.key, 1, 1],
      [view[1]!.key, 2, 2],
      [view[2]!.key, 3, 3],
      ["new", 5, 4],
    ]);
    expect(out[3]!.siblings).toEqual({ ids: [4, 5], index: 1 });
  });

  it("reconcile shows the server's branch in place of stored messages of another one", () => {
    const view = fromStored([active[0]!, active[1]!, active[2]!, branches[0]!, branches[1]!]);
    // A read that does not know the view's messages yet (a store that lags) keeps them, unstored.
    expect(reconcile(view, active).map((m) => [m.content, m.nodeId])).toEqual([
      ["hi", 1],
      ["hello", 2],
      ["other", 6],
      ["B", 7],
      ["more", undefined],
      ["A", undefined],
    ]);
    const out = reconcile(view, active, branches);
    expect(out.map((m) => [m.content, m.nodeId])).toEqual([
      ["hi", 1],
      ["hello", 2],
      ["other", 6],
      ["B", 7],
    ]);
    expect(out[0]!.key).toBe(view[0]!.key);
  });

  it("an unsaved edit stands in for the message it was to be a version of, found by id", () => {
    const view = fromStored(active);
    const mine = markTurnUnsaved(
      [...view.slice(0, 2), { key: "u", role: "user", content: "edited" }, { key: "x", role: "assistant", content: "", status: "stopped" }],
      "u",
      "x",
      6,
    );
    const out = reconcile(mine, active);
    expect(out.map((m) => [m.key, m.nodeId, m.replaceFrom])).toEqual([
      [view[0]!.key, 1, undefined],
      [view[1]!.key, 2, undefined],
      ["u", undefined, 6],
      ["x", undefined, undefined],
    ]);
  });
});
