import { describe, expect, it } from "vitest";
import { fromStored, lastUserIndex, reconcile, statusFromFinish, type UiMessage } from "./chatModel";
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
