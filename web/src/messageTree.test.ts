import { describe, expect, it } from "vitest";
import { buildTree, newestLeafUnder, pathTo, siblingsOf, switchedPath } from "./messageTree";
import type { StoredMessage } from "./types";

const m = (id: number, parent_id: number | null, role: string, content: string): StoredMessage => ({
  id,
  parent_id,
  role,
  content,
});

// 0 system; 1 "hi" → 2 "hello"; 3 "more" → 4 "answer A", regenerated: 5 "answer B"; "more" edited: 6 "other" → 7.
const active = [m(0, null, "system", "sys"), m(1, 0, "user", "hi"), m(2, 1, "assistant", "hello"), m(6, 2, "user", "other"), m(7, 6, "assistant", "seven")];
const branches = [m(3, 2, "user", "more"), m(4, 3, "assistant", "answer A"), m(5, 3, "assistant", "answer B")];

describe("the message tree", () => {
  const tree = buildTree(active, branches);

  it("knows each message's versions, in id order, itself included", () => {
    expect(siblingsOf(tree, 6)).toEqual([3, 6]);
    expect(siblingsOf(tree, 3)).toEqual([3, 6]);
    expect(siblingsOf(tree, 4)).toEqual([4, 5]);
    expect(siblingsOf(tree, 1)).toEqual([1]);
    expect(siblingsOf(tree, 0)).toEqual([0]);
    expect(siblingsOf(tree, 42)).toEqual([]);
  });

  it("finds the newest leaf under a message (itself when it has none)", () => {
    expect(newestLeafUnder(tree, 3)).toBe(5);
    expect(newestLeafUnder(tree, 2)).toBe(7);
    expect(newestLeafUnder(tree, 0)).toBe(7);
    expect(newestLeafUnder(tree, 4)).toBe(4);
  });

  it("walks from the first message down to a leaf", () => {
    expect(pathTo(tree, 4).map((n) => n.id)).toEqual([0, 1, 2, 3, 4]);
    expect(pathTo(tree, 7).map((n) => n.message.content)).toEqual(["sys", "hi", "hello", "other", "seven"]);
    expect(pathTo(tree, 99)).toEqual([]);
  });

  it("switches to a sibling and on down to its newest leaf, not past the ends", () => {
    const back = switchedPath(tree, 6, -1)!;
    expect(back).toMatchObject({ target: 3, leaf: 5, index: 0, count: 2 });
    expect(back.path.map((n) => n.id)).toEqual([0, 1, 2, 3, 5]);
    expect(switchedPath(tree, 5, -1)).toMatchObject({ target: 4, leaf: 4, index: 0, count: 2 });
    expect(switchedPath(tree, 6, 1)).toBeNull();
    expect(switchedPath(tree, 3, -1)).toBeNull();
    expect(switchedPath(tree, 1, 1)).toBeNull();
    expect(switchedPath(tree, 6, 0)).toBeNull();
  });

  it("several first messages (the first one edited, no system prompt) are versions of each other", () => {
    const roots = buildTree([m(2, null, "user", "b"), m(3, 2, "assistant", "B")], [m(0, null, "user", "a"), m(1, 0, "assistant", "A")]);
    expect(siblingsOf(roots, 2)).toEqual([0, 2]);
    expect(switchedPath(roots, 2, -1)!.path.map((n) => n.id)).toEqual([0, 1]);
  });

  it("reads an older gateway's chain (no ids: positions, each following the one before)", () => {
    const chain = buildTree([
      { role: "system", content: "sys" },
      { role: "user", content: "hi" },
      { role: "assistant", content: "hello" },
    ]);
    expect(pathTo(chain, 2).map((n) => n.id)).toEqual([0, 1, 2]);
    expect(siblingsOf(chain, 1)).toEqual([1]);
    expect(newestLeafUnder(chain, 0)).toBe(2);
  });

  it("leaves out a branch message that says nothing of where it goes", () => {
    const tree2 = buildTree(active, [{ id: 9, role: "user", content: "lost" }]);
    expect(tree2.nodes.has(9)).toBe(false);
  });
});
