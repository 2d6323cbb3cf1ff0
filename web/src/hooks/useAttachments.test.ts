/**
 * useAttachments against a scripted files API: one store per conversation (created once, on the first file, even for
 * two files dropped together), indexing polled to the end, a new chat's files moving with it when it gets its id, a
 * remembered store read back when its conversation opens, and a rejected upload that attaches nothing.
 */
import { h, render } from "preact";
import { act } from "preact/test-utils";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../api";
import { storeFor } from "../chatStores";
import { filesApi } from "../filesApi";
import type { FileObject, VectorStoreFileObject } from "../types";
import { POLL_MS, useAttachments, type AttachmentsController } from "./useAttachments";

vi.mock("../filesApi", () => ({
  filesApi: {
    upload: vi.fn(),
    get: vi.fn(),
    createStore: vi.fn(),
    deleteStore: vi.fn(),
    attach: vi.fn(),
    detach: vi.fn(),
    storeFile: vi.fn(),
    storeFiles: vi.fn(),
  },
}));

const api = vi.mocked(filesApi);
let controller!: AttachmentsController;
let root: HTMLElement;
/** The server's indexing status of each file (the test moves it on). */
let status: Record<string, VectorStoreFileObject["status"]>;

function Harness({ conversationId, hint }: { conversationId: string | null; hint: string | null }) {
  controller = useAttachments(conversationId, hint);
  return null;
}

function show(conversationId: string | null, hint: string | null = null) {
  act(() => render(h(Harness, { conversationId, hint }), root));
}

async function flush(ms = 0) {
  await act(async () => {
    await vi.advanceTimersByTimeAsync(ms);
  });
}

function storeFile(id: string, storeId = "vs_1"): VectorStoreFileObject {
  return { id, object: "vector_store.file", vector_store_id: storeId, status: status[id] ?? "in_progress" };
}

function fileObject(id: string, filename: string, bytes = 5): FileObject {
  return { id, object: "file", bytes, created_at: 1, filename, purpose: "assistants" };
}

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
  localStorage.clear();
  status = {};
  for (const fn of Object.values(api)) fn.mockReset();
  let uploaded = 0;
  api.upload.mockImplementation(async (_blob, filename) => fileObject(`file-${++uploaded}`, filename));
  api.createStore.mockImplementation(async () => ({ id: "vs_1", object: "vector_store", name: "Chat files", status: "completed" }));
  api.attach.mockImplementation(async (storeId, fileId) => storeFile(fileId, storeId));
  api.storeFile.mockImplementation(async (storeId, fileId) => storeFile(fileId, storeId));
  api.detach.mockResolvedValue({ id: "x", deleted: true });
  root = document.createElement("div");
});

afterEach(() => {
  render(null, root);
  vi.useRealTimers();
});

const file = (name: string, text = "hello") => new File([text], name, { type: "text/markdown" });

describe("attaching files to a new chat", () => {
  it("uploads, creates one store, attaches, polls until indexed, and the store moves with the chat", async () => {
    show(null);
    act(() => controller.add([file("a.md"), file("b.md")]));
    expect(controller.attachments.map((a) => a.status)).toEqual(["uploading", "uploading"]);
    await flush();
    expect(api.upload).toHaveBeenCalledTimes(2);
    expect(api.createStore).toHaveBeenCalledTimes(1); // two files at once: still one store
    expect(api.attach.mock.calls).toEqual([
      ["vs_1", "file-1"],
      ["vs_1", "file-2"],
    ]);
    expect(controller.attachments.map((a) => a.status)).toEqual(["in_progress", "in_progress"]);
    expect(controller.vectorStoreIds()).toEqual(["vs_1"]); // a file being indexed is already searched

    status["file-1"] = "completed";
    await flush(POLL_MS);
    expect(controller.attachments.map((a) => a.status)).toEqual(["completed", "in_progress"]);
    status["file-2"] = "failed";
    api.storeFile.mockImplementation(async (storeId, fileId) => ({
      ...storeFile(fileId, storeId),
      last_error: fileId === "file-2" ? { code: "invalid_file", message: "The PDF has no text." } : null,
    }));
    await flush(POLL_MS);
    expect(controller.attachments.map((a) => [a.status, a.error])).toEqual([
      ["completed", undefined],
      ["failed", "The PDF has no text."],
    ]);
    const polls = api.storeFile.mock.calls.length;
    await flush(POLL_MS * 5);
    expect(api.storeFile.mock.calls.length).toBe(polls); // nothing left indexing: polling stopped

    // The first answer gives the chat its id: the chips stay and the store is remembered for it.
    act(() => controller.adopt("conv_1"));
    show("conv_1");
    expect(controller.attachments).toHaveLength(2);
    expect(storeFor("conv_1")).toBe("vs_1");
  });

  it("a new chat whose first turn was never saved keeps its files when it starts again", async () => {
    show(null);
    act(() => controller.add([file("a.md")]));
    await flush();
    act(() => controller.adopt("conv_lost"));
    show("conv_lost");
    act(() => controller.conversationGone("conv_lost"));
    show(null);
    expect(controller.attachments.map((a) => a.filename)).toEqual(["a.md"]);
    expect(controller.vectorStoreIds()).toEqual(["vs_1"]);
    expect(storeFor("conv_lost")).toBeNull();
    act(() => controller.adopt("conv_new"));
    show("conv_new");
    expect(storeFor("conv_new")).toBe("vs_1");
    // A conversation opened from the list that turns out to be gone is a switch: its files do not follow.
    localStorage.setItem("fleetchat.chatStores", JSON.stringify({ conv_old: "vs_old" }));
    api.storeFiles.mockResolvedValue({ object: "list", data: [], has_more: false });
    show("conv_old");
    act(() => controller.conversationGone("conv_old"));
    show(null);
    expect(controller.attachments).toEqual([]);
  });

  it("a rejected upload shows the API's message and creates or attaches nothing", async () => {
    const message = "The content of `scan.pdf` is not PDF: by its content it is text.";
    api.upload.mockRejectedValue(new ApiError(message, { status: 400, code: "invalid_file" }));
    show(null);
    act(() => controller.add([file("scan.pdf")]));
    await flush();
    expect(controller.attachments.map((a) => [a.status, a.error])).toEqual([["rejected", message]]);
    expect(api.createStore).not.toHaveBeenCalled();
    expect(api.attach).not.toHaveBeenCalled();
    expect(controller.vectorStoreIds()).toEqual([]);
    act(() => controller.remove(controller.attachments[0]!.key));
    expect(controller.attachments).toEqual([]);
    expect(api.detach).not.toHaveBeenCalled();
  });
});

describe("a conversation's files", () => {
  it("loads the remembered store's files when the conversation opens, and drops them on switching", async () => {
    localStorage.setItem("fleetchat.chatStores", JSON.stringify({ conv_2: "vs_9" }));
    status["file-7"] = "completed";
    api.storeFiles.mockResolvedValue({ object: "list", data: [storeFile("file-7", "vs_9")], has_more: false });
    api.get.mockResolvedValue(fileObject("file-7", "report.pdf", 2048));
    show("conv_2");
    await flush();
    expect(api.storeFiles).toHaveBeenCalledWith("vs_9");
    expect(controller.attachments).toMatchObject([{ filename: "report.pdf", bytes: 2048, status: "completed", fileId: "file-7" }]);
    expect(controller.vectorStoreIds()).toEqual(["vs_9"]);

    // Removing the chip detaches the file from the store (the file itself stays).
    act(() => controller.remove(controller.attachments[0]!.key));
    expect(api.detach).toHaveBeenCalledWith("vs_9", "file-7");
    expect(controller.vectorStoreIds()).toEqual([]);

    show("conv_3");
    expect(controller.attachments).toEqual([]);
    expect(controller.vectorStoreIds()).toEqual([]);
  });

  it("finds the store from the conversation's citations in a browser that does not remember it", async () => {
    status["file-7"] = "completed";
    api.storeFiles.mockResolvedValue({ object: "list", data: [storeFile("file-7", "vs_5")], has_more: false });
    api.get.mockResolvedValue(fileObject("file-7", "notes.md"));
    show("conv_4");
    await flush();
    expect(api.storeFiles).not.toHaveBeenCalled();
    show("conv_4", "vs_5"); // the stored answers loaded: their citations name the store
    await flush();
    expect(api.storeFiles).toHaveBeenCalledWith("vs_5");
    expect(controller.attachments.map((a) => a.filename)).toEqual(["notes.md"]);
    expect(storeFor("conv_4")).toBe("vs_5");
  });

  it("forgets a store that no longer exists", async () => {
    localStorage.setItem("fleetchat.chatStores", JSON.stringify({ conv_2: "vs_gone" }));
    api.storeFiles.mockRejectedValue(new ApiError("No such vector store: vs_gone", { status: 404 }));
    show("conv_2");
    await flush();
    expect(storeFor("conv_2")).toBeNull();
    act(() => controller.add([file("c.md")]));
    await flush();
    expect(api.createStore).toHaveBeenCalledTimes(1); // a fresh store for the conversation's next file
    expect(storeFor("conv_2")).toBe("vs_1");
  });
});
