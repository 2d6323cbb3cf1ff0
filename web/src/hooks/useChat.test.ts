/**
 * useChat against a scripted server: Stop before and after the answer starts, the wait for a stopped answer to be
 * saved, switching conversations while a send waits, and the versions edits and regenerates leave.
 */
import { h, render } from "preact";
import { act } from "preact/test-utils";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { api, ApiError } from "../api";
import { openChatStream, type ChatEvent, type ChatStreamMeta } from "../stream";
import type { ChatRequestBody, Conversation, StoredMessage } from "../types";
import { SAVE_WAIT_MS, useChat, type ChatController, type ChatOptions } from "./useChat";

vi.mock("../api", async (importOriginal) => {
  const actual = await importOriginal<typeof import("../api")>();
  return { ...actual, api: { ...actual.api, getConversation: vi.fn(), cancelCompletion: vi.fn(), setCurrentNode: vi.fn() } };
});
vi.mock("../stream", () => ({ openChatStream: vi.fn() }));

const getConversation = vi.mocked(api.getConversation);
const cancelCompletion = vi.mocked(api.cancelCompletion);
const setCurrentNode = vi.mocked(api.setCurrentNode);
const openStream = vi.mocked(openChatStream);

interface Call {
  body: ChatRequestBody;
  signal: AbortSignal;
  /** The response headers arrive; then `events`, then (hang) the stream stays open until aborted. */
  respond(events: ChatEvent[], meta?: Partial<ChatStreamMeta>): void;
}

let calls: Call[] = [];
let chat!: ChatController;
let options!: ChatOptions & { restoreDraft: ReturnType<typeof vi.fn<(text: string) => void>> };
let root: HTMLElement;

function conversation(id: string, version: number, messages: StoredMessage[]): Conversation {
  return { id, title: "t", created_at: 1, updated_at: 1, version, message_count: messages.length, messages };
}

const BASE: StoredMessage[] = [
  { role: "system", content: "sys" },
  { role: "user", content: "hi" },
  { role: "assistant", content: "hello", finish_reason: "stop" },
];

function Harness({ opts }: { opts: ChatOptions }) {
  chat = useChat(opts);
  return null;
}

async function flush(ms = 0) {
  await act(async () => {
    await vi.advanceTimersByTimeAsync(ms);
  });
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
  calls = [];
  getConversation.mockReset();
  cancelCompletion.mockReset();
  cancelCompletion.mockResolvedValue({ id: "req_1", status: "cancelled" });
  setCurrentNode.mockReset();
  openStream.mockReset();
  openStream.mockImplementation(
    (body, signal) =>
      new Promise((resolve, reject) => {
        signal.addEventListener("abort", () => reject(new DOMException("Aborted", "AbortError")));
        calls.push({
          body,
          signal,
          respond(events, meta) {
            async function* gen(): AsyncGenerator<ChatEvent, void, undefined> {
              for (const event of events) yield event;
              if (events.some((e) => e.type === "done")) return;
              await new Promise<void>((done) => {
                if (signal.aborted) done();
                signal.addEventListener("abort", () => done());
              });
            }
            resolve({
              meta: { conversationId: null, brownout: false, fallbackModel: null, stored: null, requestId: null, care: false, ...meta },
              events: gen(),
            });
          },
        });
      }),
  );
  options = {
    model: "m",
    restoreDraft: vi.fn<(text: string) => void>(),
    clearDraftIf: vi.fn(),
    onConversationStarted: vi.fn(),
    onTurnSettled: vi.fn(),
    onConversationSeen: vi.fn(),
    onConversationGone: vi.fn(),
  };
  root = document.createElement("div");
  render(h(Harness, { opts: options }), root);
});

afterEach(() => {
  render(null, root);
  vi.useRealTimers();
});

async function openC1(messages: StoredMessage[] = BASE, version = 1) {
  getConversation.mockResolvedValue(conversation("c1", version, messages));
  await act(async () => {
    await chat.openConversation("c1");
  });
}

describe("Stop after the answer started", () => {
  it("waits for the stopped answer to be saved before a regenerate (replace_from, not a second copy)", async () => {
    await openC1();
    act(() => void chat.send("q"));
    await flush();
    calls[0]!.respond([{ type: "delta", content: "par" }], { conversationId: "c1" });
    await flush();
    act(() => chat.stop());
    await flush();
    expect(chat.messages[3]!.status).toBe("stopped");

    // The server saves the stopped answer late: after 3 s.
    const saved = conversation("c1", 2, [
      ...BASE,
      { role: "user", content: "q" },
      { role: "assistant", content: "partial", finish_reason: "stopped" },
    ]);
    const start = Date.now();
    getConversation.mockImplementation(async () => (Date.now() >= start + 3000 ? saved : conversation("c1", 1, BASE)));
    act(() => chat.regenerate());
    await flush(2500);
    expect(calls).toHaveLength(1); // still waiting
    await flush(1000);
    expect(calls).toHaveLength(2);
    expect(calls[1]!.body.replace_from).toBe(3);
    expect(calls[1]!.body.conversation_id).toBe("c1");
  });

  it("cancels the answer on the server by its request id (a dropped connection alone keeps it generating)", async () => {
    await openC1();
    act(() => void chat.send("q"));
    await flush();
    calls[0]!.respond([{ type: "delta", content: "par" }], { conversationId: "c1", requestId: "req_1" });
    await flush();
    expect(cancelCompletion).not.toHaveBeenCalled();
    act(() => chat.stop());
    await flush();
    expect(cancelCompletion).toHaveBeenCalledExactlyOnceWith("req_1");
    expect(calls[0]!.signal.aborted).toBe(true);
    act(() => chat.stop()); // nothing running any more: nothing to cancel
    expect(cancelCompletion).toHaveBeenCalledTimes(1);
  });

  it("treats a stopped edit the server never saved as not stored, keeping replace_from for a retry", async () => {
    const stored: StoredMessage[] = [...BASE, { role: "user", content: "q" }, { role: "assistant", content: "old", finish_reason: "stop" }];
    await openC1(stored, 2);
    act(() => void chat.saveEdit(chat.messages[2]!.key, "q2"));
    await flush();
    expect(calls[0]!.body.replace_from).toBe(3);
    calls[0]!.respond([], { conversationId: "c1" });
    await flush();
    act(() => chat.stop());
    await flush(SAVE_WAIT_MS + 1000);
    expect(chat.messages.map((m) => [m.role, m.content, m.storedIndex])).toEqual([
      ["user", "hi", 1],
      ["assistant", "hello", 2],
      ["user", "q2", undefined],
      ["assistant", "", undefined],
    ]);
    act(() => chat.regenerate());
    await flush();
    expect(calls).toHaveLength(2);
    expect(calls[1]!.body.replace_from).toBe(3);
    expect(calls[1]!.body.messages).toEqual([{ role: "user", content: "q2" }]);
  });

  it("does not send a waiting message into another conversation opened meanwhile", async () => {
    await openC1();
    act(() => void chat.send("first"));
    await flush();
    calls[0]!.respond([{ type: "delta", content: "a" }], { conversationId: "c1" });
    await flush();
    act(() => chat.stop());
    await flush();
    let sent = false;
    act(() => {
      sent = chat.send("second");
    });
    expect(sent).toBe(true);
    let finishLoad!: (c: Conversation) => void;
    getConversation.mockImplementation(
      (id) => (id === "c2" ? new Promise<Conversation>((resolve) => (finishLoad = resolve)) : Promise.resolve(conversation("c1", 1, BASE))),
    );
    act(() => void chat.openConversation("c2"));
    await flush(1000);
    expect(calls).toHaveLength(1);
    expect(options.restoreDraft).toHaveBeenCalledWith("second");
    await act(async () => finishLoad(conversation("c2", 1, BASE)));
    await flush(SAVE_WAIT_MS);
    expect(calls).toHaveLength(1);
    expect(chat.conversationId).toBe("c2");
    expect(chat.messages.map((m) => m.content)).toEqual(["hi", "hello"]);
  });
});

describe("Stop before the answer started", () => {
  it("restores the view and the composer text, and reads the conversation again", async () => {
    await openC1();
    const before = chat.messages;
    act(() => void chat.send("q"));
    await flush();
    expect(chat.messages).toHaveLength(4);
    act(() => chat.stop());
    await flush();
    expect(chat.messages.map((m) => [m.content, m.storedIndex])).toEqual(before.map((m) => [m.content, m.storedIndex]));
    expect(options.restoreDraft).toHaveBeenCalledWith("q");
    const reads = getConversation.mock.calls.length;
    await flush(1500);
    expect(getConversation.mock.calls.length).toBe(reads + 1);
    act(() => chat.regenerate());
    await flush();
    expect(calls[1]!.body.replace_from).toBe(1); // a valid index, not the stored length
  });

  it("reopens the edit box for an edit", async () => {
    await openC1();
    const key = chat.messages[0]!.key;
    act(() => void chat.saveEdit(key, "edited"));
    await flush();
    expect(calls[0]!.body.replace_from).toBe(1);
    act(() => chat.stop());
    await flush();
    expect(chat.editing).toEqual({ key, draft: "edited" });
    expect(chat.messages.map((m) => m.content)).toEqual(["hi", "hello"]);
    expect(options.restoreDraft).not.toHaveBeenCalled();
  });

  it("keeps the composer text when another conversation is opened", async () => {
    await openC1();
    act(() => void chat.send("typed"));
    await flush();
    getConversation.mockResolvedValue(conversation("c2", 1, BASE));
    await act(async () => {
      await chat.openConversation("c2");
    });
    await flush();
    expect(options.restoreDraft).toHaveBeenCalledWith("typed");
    expect(calls).toHaveLength(1);
  });
});

describe("a turn with files", () => {
  it("names the conversation's vector store and shows the answer's citations, kept after the server's copy is read", async () => {
    await openC1();
    const stores = vi.fn(() => ["vs_1"]);
    options.vectorStoreIds = stores;
    const citation = {
      index: 1, vector_store_id: "vs_1", file_id: "file-1", filename: "n.md", chunk_id: "file-1:0", start: 0, end: 5,
    };
    act(() => void chat.send("who led them?"));
    await flush();
    expect(calls[0]!.body).toMatchObject({ conversation_id: "c1", vector_store_ids: ["vs_1"] });
    getConversation.mockResolvedValue(
      conversation("c1", 2, [...BASE, { role: "user", content: "who led them?" }, { role: "assistant", content: "Rollo [1]", finish_reason: "stop", citations: [citation] }]),
    );
    calls[0]!.respond(
      [
        { type: "retrieval", report: { status: "used", citations: [{ ...citation, text: "Rollo" }] } },
        { type: "delta", content: "Rollo [1]" },
        { type: "finish", reason: "stop" },
        { type: "conversation", conversation: { id: "c1", stored: true, version: 2 } },
        { type: "done" },
      ],
      { conversationId: "c1" },
    );
    await flush();
    await flush();
    const answer = chat.messages[chat.messages.length - 1]!;
    expect(answer).toMatchObject({ status: "done", storedIndex: 4, citations: [{ ...citation, text: "Rollo" }] });
    expect(getConversation).toHaveBeenCalled();

    // Without files the request names no store.
    stores.mockReturnValue([]);
    act(() => void chat.send("and then?"));
    await flush();
    expect(calls[1]!.body.vector_store_ids).toBeUndefined();
  });
});

describe("a turn with the code interpreter", () => {
  const started = { tool_call_id: "c1", tool: "python", status: "running", arguments: '{"code":"print(7*7)"}' };

  it("asks for the python tool when switched on and shows each run as it goes; a Stop leaves none running", async () => {
    await openC1();
    options.serverTools = () => ["python"];
    act(() => void chat.send("square 7"));
    await flush();
    expect(calls[0]!.body.server_tools).toEqual(["python"]);
    calls[0]!.respond([{ type: "tool_run", run: started }], { conversationId: "c1" });
    await flush();
    expect(chat.messages[chat.messages.length - 1]!.toolRuns).toEqual([started]);
    expect(chat.liveStatus).toBe("Running code…");
    act(() => chat.stop());
    await flush();
    expect(chat.messages[chat.messages.length - 1]!.toolRuns).toEqual([{ ...started, status: "unfinished" }]);
  });

  it("marks a run the failed stream never ended as unfinished, and asks for no tool when switched off", async () => {
    await openC1();
    options.serverTools = () => ["python"];
    act(() => void chat.send("again"));
    await flush();
    calls[0]!.respond(
      [
        { type: "tool_run", run: started },
        { type: "error", error: new ApiError("busy", { kind: "stream", code: "sandbox_busy" }) },
        { type: "done" },
      ],
      { conversationId: "c1" },
    );
    await flush();
    await flush();
    expect(chat.messages[chat.messages.length - 1]!.toolRuns).toEqual([{ ...started, status: "unfinished" }]);
    options.serverTools = () => [];
    act(() => void chat.send("plain"));
    await flush();
    expect(calls[calls.length - 1]!.body.server_tools).toBeUndefined();
  });
});

describe("versions (the message tree)", () => {
  const node = (id: number, parent_id: number | null, role: string, content: string, sibling_ids = [id]): StoredMessage => ({
    id,
    parent_id,
    sibling_ids,
    role,
    content,
    ...(role === "assistant" ? { finish_reason: "stop" } : {}),
  });
  // 0 sys; 1 "hi" → 2 "hello"; 3 "more" → 4 "A" | 5 "A again"; "more" edited: 6 "other" → 7 "B" (shown).
  const ACTIVE = [node(0, null, "system", "sys"), node(1, 0, "user", "hi"), node(2, 1, "assistant", "hello"), node(6, 2, "user", "other", [3, 6]), node(7, 6, "assistant", "B")];
  const BRANCHES = [node(3, 2, "user", "more", [3, 6]), node(4, 3, "assistant", "A", [4, 5]), node(5, 3, "assistant", "A again", [4, 5])];
  const SWITCHED = [...ACTIVE.slice(0, 3), BRANCHES[0]!, BRANCHES[2]!];

  function withTree(messages: StoredMessage[], branches: StoredMessage[], version = 3): Conversation {
    return {
      ...conversation("c1", version, messages),
      message_count: messages.length + branches.length,
      branches,
      current_node: messages[messages.length - 1]!.id!,
    };
  }

  async function openTree() {
    getConversation.mockResolvedValue(withTree(ACTIVE, BRANCHES));
    await act(async () => {
      await chat.openConversation("c1");
    });
  }

  const shown = () => chat.messages.map((m) => m.content);

  it("a send continues the branch shown and takes the ids the server gave its messages", async () => {
    await openTree();
    act(() => void chat.send("next"));
    await flush();
    expect(calls[0]!.body).toMatchObject({ conversation_id: "c1", parent_message_id: 7 });
    expect(calls[0]!.body.replace_from).toBeUndefined();
    getConversation.mockResolvedValue(withTree([...ACTIVE, node(8, 7, "user", "next"), node(9, 8, "assistant", "C")], BRANCHES, 4));
    calls[0]!.respond(
      [
        { type: "delta", content: "C" },
        { type: "finish", reason: "stop" },
        { type: "conversation", conversation: { id: "c1", stored: true, version: 4, message_ids: [8, 9] } },
        { type: "done" },
      ],
      { conversationId: "c1", stored: true },
    );
    await flush();
    expect(chat.messages.slice(-2).map((m) => [m.content, m.nodeId])).toEqual([
      ["next", 8],
      ["C", 9],
    ]);
    await flush();
    expect(getConversation).toHaveBeenCalledTimes(2);
    expect(chat.messages.map((m) => m.storedIndex)).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it("a switch shows the other version at once, says so, and is saved; the next send waits for that and goes on from it", async () => {
    await openTree();
    const userKey = chat.messages[2]!.key;
    let save!: (value: { current_node: number }) => void;
    setCurrentNode.mockImplementation(() => new Promise((resolve) => (save = resolve as typeof save)));
    let switched = false;
    act(() => {
      switched = chat.selectVersion(userKey, -1);
    });
    expect(switched).toBe(true);
    expect(shown()).toEqual(["hi", "hello", "more", "A again"]); // down to that version's newest answer
    expect(chat.messages[2]).toMatchObject({ key: userKey, nodeId: 3, siblings: { ids: [3, 6], index: 0 } });
    expect(chat.messages[3]!.siblings).toEqual({ ids: [4, 5], index: 1 });
    expect(chat.liveStatus).toBe("Version 1 of 2");
    expect(setCurrentNode).toHaveBeenCalledExactlyOnceWith("c1", 5);

    act(() => void chat.send("go on"));
    await flush(100);
    expect(calls).toHaveLength(0); // waits for the switch to be saved
    await act(async () => save({ current_node: 5 }));
    await flush();
    expect(calls).toHaveLength(1);
    expect(calls[0]!.body.parent_message_id).toBe(5);
    expect(getConversation).toHaveBeenCalledTimes(1); // saved as shown: nothing to read again
  });

  it("switches an answer's versions, not past the ends", async () => {
    getConversation.mockResolvedValue(withTree(SWITCHED, [ACTIVE[3]!, ACTIVE[4]!, BRANCHES[1]!]));
    await act(async () => {
      await chat.openConversation("c1");
    });
    setCurrentNode.mockResolvedValue({ ...conversation("c1", 3, []), current_node: 4 });
    const answerKey = chat.messages[3]!.key;
    let switched = false;
    act(() => {
      switched = chat.selectVersion(answerKey, 1);
    });
    expect(switched).toBe(false);
    act(() => void chat.selectVersion(answerKey, -1));
    expect(chat.messages[3]).toMatchObject({ key: answerKey, content: "A", nodeId: 4, siblings: { ids: [4, 5], index: 0 } });
    expect(setCurrentNode).toHaveBeenCalledWith("c1", 4);
  });

  it("reads the conversation again when the switch could not be saved, or the server shows a branch further on", async () => {
    await openTree();
    setCurrentNode.mockRejectedValue(new ApiError("down", { kind: "network" }));
    act(() => void chat.selectVersion(chat.messages[2]!.key, -1));
    expect(shown()).toEqual(["hi", "hello", "more", "A again"]);
    await flush();
    expect(getConversation).toHaveBeenCalledTimes(2);
    expect(shown()).toEqual(["hi", "hello", "other", "B"]); // what the server still shows
    expect(chat.liveStatus).toBe("The version could not be switched.");

    // The server knew a newer answer under that version (another tab): it shows that, and so does the view.
    setCurrentNode.mockResolvedValue({ ...conversation("c1", 3, []), current_node: 8 });
    const newer = node(8, 3, "assistant", "A third", [4, 5, 8]);
    getConversation.mockResolvedValue(withTree([...SWITCHED.slice(0, 4), newer], [ACTIVE[3]!, ACTIVE[4]!, BRANCHES[1]!, BRANCHES[2]!]));
    act(() => void chat.selectVersion(chat.messages[2]!.key, -1));
    await flush();
    expect(getConversation).toHaveBeenCalledTimes(3);
    expect(shown()).toEqual(["hi", "hello", "more", "A third"]);
    expect(chat.messages[3]!.siblings).toEqual({ ids: [4, 5, 8], index: 2 });
  });

  it("a read of the server begun before a switch does not undo it; it is read again once the switch is saved", async () => {
    await openTree();
    act(() => void chat.send("next"));
    await flush();
    let answerRead!: (c: Conversation) => void;
    getConversation.mockImplementation(() => new Promise<Conversation>((resolve) => (answerRead = resolve)));
    calls[0]!.respond(
      [
        { type: "delta", content: "C" },
        { type: "finish", reason: "stop" },
        { type: "conversation", conversation: { id: "c1", stored: true, version: 4, message_ids: [8, 9] } },
        { type: "done" },
      ],
      { conversationId: "c1", stored: true },
    );
    await flush(); // the turn ended: the conversation is being read
    expect(getConversation).toHaveBeenCalledTimes(2);
    let save!: (value: { current_node: number }) => void;
    setCurrentNode.mockImplementation(() => new Promise((resolve) => (save = resolve as typeof save)));
    act(() => void chat.selectVersion(chat.messages[2]!.key, -1));
    expect(shown()).toEqual(["hi", "hello", "more", "A again"]);
    // The read answers with the branch from before the switch: set aside.
    const before = withTree([...ACTIVE, node(8, 7, "user", "next"), node(9, 8, "assistant", "C")], BRANCHES, 4);
    await act(async () => answerRead(before));
    await flush();
    expect(shown()).toEqual(["hi", "hello", "more", "A again"]);
    // Saved: read again, and the view lines up with the server, which shows the switched branch now.
    const after = withTree(SWITCHED, [ACTIVE[3]!, ACTIVE[4]!, BRANCHES[1]!, node(8, 7, "user", "next"), node(9, 8, "assistant", "C")], 4);
    getConversation.mockResolvedValue(after);
    await act(async () => save({ current_node: 5 }));
    await flush();
    expect(getConversation).toHaveBeenCalledTimes(3);
    expect(shown()).toEqual(["hi", "hello", "more", "A again"]);
    expect(chat.messages[2]!.siblings).toEqual({ ids: [3, 6], index: 0 });
  });

  it("switches nothing while an answer streams or an edit is open", async () => {
    await openTree();
    const key = chat.messages[2]!.key;
    act(() => chat.setEditing({ key, draft: "other" }));
    let switched = true;
    act(() => {
      switched = chat.selectVersion(key, -1);
    });
    expect(switched).toBe(false);
    act(() => chat.setEditing(null));
    act(() => void chat.send("q"));
    await flush();
    act(() => {
      switched = chat.selectVersion(key, -1);
    });
    expect(switched).toBe(false);
    expect(setCurrentNode).not.toHaveBeenCalled();
  });

  it("a regenerate keeps the user message and adds an answer version, shown as 2 / 2 once the server is read", async () => {
    const linear = [node(0, null, "system", "sys"), node(1, 0, "user", "hi"), node(2, 1, "assistant", "hello")];
    getConversation.mockResolvedValue(withTree(linear, [], 1));
    await act(async () => {
      await chat.openConversation("c1");
    });
    const user = chat.messages[0]!;
    act(() => chat.regenerate());
    await flush();
    expect(calls[0]!.body).toMatchObject({ replace_from: 1, messages: [{ role: "user", content: "hi" }] });
    expect(calls[0]!.body.parent_message_id).toBeUndefined();
    expect(chat.messages[0]).toBe(user); // the very same message, not a new one
    getConversation.mockResolvedValue(
      withTree([linear[0]!, linear[1]!, node(3, 1, "assistant", "hi there", [2, 3])], [node(2, 1, "assistant", "hello", [2, 3])], 2),
    );
    calls[0]!.respond(
      [
        { type: "delta", content: "hi there" },
        { type: "finish", reason: "stop" },
        { type: "conversation", conversation: { id: "c1", stored: true, version: 2, message_ids: [3] } },
        { type: "done" },
      ],
      { conversationId: "c1", stored: true },
    );
    await flush();
    await flush();
    expect(chat.messages.map((m) => [m.key === user.key, m.content, m.nodeId, m.siblings?.ids])).toEqual([
      [true, "hi", 1, [1]],
      [false, "hi there", 3, [2, 3]],
    ]);
    setCurrentNode.mockResolvedValue({ ...conversation("c1", 2, []), current_node: 2 });
    act(() => void chat.selectVersion(chat.messages[1]!.key, -1));
    expect(shown()).toEqual(["hi", "hello"]);
    expect(setCurrentNode).toHaveBeenCalledWith("c1", 2);
  });

  describe("a message the search found", () => {
    it("on the branch shown: opened as it is, nothing switched, the message marked", async () => {
      getConversation.mockResolvedValue(withTree(ACTIVE, BRANCHES));
      await act(async () => {
        await chat.openConversation("c1", 6);
      });
      expect(setCurrentNode).not.toHaveBeenCalled();
      expect(shown()).toEqual(["hi", "hello", "other", "B"]);
      expect(chat.found?.id).toBe(6);
      expect(chat.liveStatus).toBe("Showing the message found.");
    });

    it("on another branch: that branch is saved as the one shown, then read, shown and marked", async () => {
      const calls: string[] = [];
      const throughFour = [...ACTIVE.slice(0, 3), BRANCHES[0]!, BRANCHES[1]!];
      getConversation.mockImplementation(async () => {
        calls.push("get");
        return calls.includes("patch") ? withTree(throughFour, [BRANCHES[2]!, ACTIVE[3]!, ACTIVE[4]!]) : withTree(ACTIVE, BRANCHES);
      });
      setCurrentNode.mockImplementation(async () => {
        calls.push("patch");
        return { ...conversation("c1", 3, []), current_node: 4 };
      });
      await act(async () => {
        await chat.openConversation("c1", 4);
      });
      expect(setCurrentNode).toHaveBeenCalledExactlyOnceWith("c1", 4);
      expect(calls).toEqual(["get", "patch", "get"]);
      expect(chat.loading).toBe(false);
      expect(shown()).toEqual(["hi", "hello", "more", "A"]);
      expect(chat.messages[2]!.siblings).toEqual({ ids: [3, 6], index: 0 });
      expect(chat.messages[3]!.siblings).toEqual({ ids: [4, 5], index: 0 });
      expect(chat.found?.id).toBe(4);
    });

    it("says so when the message is not shown after all", async () => {
      getConversation.mockResolvedValue(withTree(ACTIVE, BRANCHES));
      await act(async () => {
        await chat.openConversation("c1", 42);
      });
      expect(setCurrentNode).not.toHaveBeenCalled(); // on no branch the chat knows
      expect(chat.found).toBeNull();
      expect(chat.liveStatus).toBe("The message found is no longer shown.");
    });

    it("marks the found message when the switched branch shows it", async () => {
      let patched = false;
      getConversation.mockImplementation(async () => (patched ? withTree(SWITCHED, [ACTIVE[3]!, BRANCHES[1]!, ACTIVE[4]!]) : withTree(ACTIVE, BRANCHES)));
      setCurrentNode.mockImplementation(async () => {
        patched = true;
        return { ...conversation("c1", 3, []), current_node: 5 };
      });
      await act(async () => {
        await chat.openConversation("c1", 3);
      });
      expect(shown()).toEqual(["hi", "hello", "more", "A again"]);
      expect(chat.found?.id).toBe(3);
    });

    it("when the switch cannot be saved: the branch the server shows, nothing marked", async () => {
      getConversation.mockResolvedValue(withTree(ACTIVE, BRANCHES));
      setCurrentNode.mockRejectedValue(new ApiError("down", { kind: "network" }));
      await act(async () => {
        await chat.openConversation("c1", 3);
      });
      expect(shown()).toEqual(["hi", "hello", "other", "B"]);
      expect(chat.found).toBeNull();
      expect(chat.error).toBeNull();
    });

    it("in the open conversation: shown at once when on screen, each time anew; not when it is not", async () => {
      await openTree();
      expect(chat.found).toBeNull();
      let ok = false;
      act(() => {
        ok = chat.showMessage(7);
      });
      expect(ok).toBe(true);
      const first = chat.found!;
      act(() => void chat.showMessage(7));
      expect(chat.found!.id).toBe(7);
      expect(chat.found!.seq).toBeGreaterThan(first.seq);
      act(() => {
        ok = chat.showMessage(4);
      });
      expect(ok).toBe(false);
      act(() => chat.newChat());
      expect(chat.found).toBeNull();
    });
  });
});
