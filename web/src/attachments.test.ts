import { describe, expect, it } from "vitest";
import {
  attachmentsReducer,
  formatBytes,
  fromStoreFile,
  indexing,
  searchable,
  type Attachment,
  type AttachmentEvent,
} from "./attachments";
import type { VectorStoreFileObject } from "./types";

function storeFile(status: VectorStoreFileObject["status"], message?: string): VectorStoreFileObject {
  return {
    id: "file-1",
    object: "vector_store.file",
    vector_store_id: "vs_1",
    status,
    last_error: message ? { code: "invalid_file", message } : null,
  };
}

function run(events: AttachmentEvent[], start: Attachment[] = []): Attachment[] {
  return events.reduce(attachmentsReducer, start);
}

const added: AttachmentEvent = { type: "added", key: "a", filename: "notes.md", bytes: 2048 };

describe("the attachment state machine", () => {
  it("goes uploading → attaching → in_progress → completed", () => {
    const steps: Array<[AttachmentEvent, string]> = [
      [added, "uploading"],
      [{ type: "uploaded", key: "a", fileId: "file-1" }, "attaching"],
      [{ type: "attached", key: "a", file: storeFile("in_progress") }, "in_progress"],
      [{ type: "polled", key: "a", file: storeFile("in_progress") }, "in_progress"],
      [{ type: "polled", key: "a", file: storeFile("completed") }, "completed"],
    ];
    let list: Attachment[] = [];
    for (const [event, status] of steps) {
      list = attachmentsReducer(list, event);
      expect(list.map((a) => a.status)).toEqual([status]);
    }
    expect(list[0]).toMatchObject({ fileId: "file-1", filename: "notes.md", bytes: 2048, error: undefined });
  });

  it("a rejected upload (400, 413) keeps the API's message and never gets a file id", () => {
    const message = "The content of `scan.pdf` is not PDF: by its content it is text.";
    const list = run([added, { type: "upload_failed", key: "a", message }]);
    expect(list).toEqual([{ key: "a", filename: "notes.md", bytes: 2048, status: "rejected", error: message }]);
    expect(searchable(list)).toBe(false);
    // A late answer for a rejected chip changes nothing.
    expect(attachmentsReducer(list, { type: "attached", key: "a", file: storeFile("completed") })).toBe(list);
  });

  it("a failed ingestion shows last_error's message; a cancelled one is a failure too", () => {
    const base = run([added, { type: "uploaded", key: "a", fileId: "file-1" }]);
    const failed = run([{ type: "attached", key: "a", file: storeFile("in_progress") }, { type: "polled", key: "a", file: storeFile("failed", "The PDF is malformed.") }], base);
    expect(failed[0]).toMatchObject({ status: "failed", error: "The PDF is malformed." });
    expect(fromStoreFile(storeFile("cancelled"))).toEqual({ status: "failed", error: "Indexing was cancelled." });
    expect(fromStoreFile(storeFile("failed"))).toEqual({ status: "failed", error: "The file could not be indexed." });
    const attachError = run([{ type: "attach_failed", key: "a", message: "No such vector store: vs_1" }], base);
    expect(attachError[0]).toMatchObject({ status: "failed", error: "No such vector store: vs_1" });
  });

  it("a finished chip is not taken back to in_progress by a late poll, and events for unknown chips do nothing", () => {
    const done = run([added, { type: "uploaded", key: "a", fileId: "file-1" }, { type: "attached", key: "a", file: storeFile("completed") }]);
    expect(done[0]!.status).toBe("completed");
    expect(attachmentsReducer(done, { type: "polled", key: "a", file: storeFile("in_progress") })).toBe(done);
    expect(attachmentsReducer(done, { type: "uploaded", key: "zz", fileId: "file-9" })).toBe(done);
    expect(attachmentsReducer(done, { type: "removed", key: "zz" })).toBe(done);
    expect(attachmentsReducer(done, added)).toBe(done); // the same key twice is one chip
  });

  it("removing a chip, or deleting its file, drops it", () => {
    const two = run([
      added,
      { type: "added", key: "b", filename: "b.txt", bytes: 1 },
      { type: "uploaded", key: "b", fileId: "file-2" },
    ]);
    expect(run([{ type: "removed", key: "a" }], two).map((a) => a.key)).toEqual(["b"]);
    expect(run([{ type: "file_deleted", fileId: "file-2" }], two).map((a) => a.key)).toEqual(["a"]);
  });

  it("names the store only while a file is (being) indexed; polls only indexing chips", () => {
    const uploading = run([added]);
    expect(searchable(uploading)).toBe(false);
    const indexingList = run([{ type: "uploaded", key: "a", fileId: "file-1" }, { type: "attached", key: "a", file: storeFile("in_progress") }], uploading);
    expect(searchable(indexingList)).toBe(true);
    expect(indexing(indexingList).map((a) => a.key)).toEqual(["a"]);
    const failed = run([{ type: "polled", key: "a", file: storeFile("failed", "bad") }], indexingList);
    expect(searchable(failed)).toBe(false);
    expect(indexing(failed)).toEqual([]);
  });

  it("loads a conversation's files as the server lists them", () => {
    const loaded: Attachment[] = [{ key: "x", filename: "a.pdf", bytes: 10, status: "completed", fileId: "file-3" }];
    expect(run([added, { type: "loaded", attachments: loaded }])).toBe(loaded);
  });
});

describe("formatBytes", () => {
  it("uses powers of 1024", () => {
    expect([0, 1023, 1024, 1536, 10 * 1024, 5 * 1024 * 1024, 32 * 1024 * 1024 + 1].map(formatBytes)).toEqual([
      "0 B",
      "1023 B",
      "1.0 KB",
      "1.5 KB",
      "10 KB",
      "5.0 MB",
      "32 MB",
    ]);
  });
});
