import { beforeEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "./api";
import { filesApi } from "./filesApi";
import { citationText, citationView, fileChunks, forgetChunks } from "./passages";
import type { Citation, FileContentPart } from "./types";

vi.mock("./filesApi", () => ({ filesApi: { content: vi.fn() } }));
const content = vi.mocked(filesApi.content);

const TEXT = "First paragraph here.\n\nRollo led the Norse raiders.\n\nLast words.";
const PARTS: FileContentPart[] = TEXT.split("\n\n").map((text, i) => {
  const start = TEXT.indexOf(text);
  return { type: "text", text, chunk_id: `file-1:${i}`, start_offset: start, end_offset: start + text.length };
});

function citation(fileId: string, text: string | null = null): Citation {
  const part = PARTS[1]!;
  return {
    index: 1, vector_store_id: "vs_1", file_id: fileId, filename: "n.md", chunk_id: part.chunk_id,
    start: part.start_offset, end: part.end_offset, text,
  };
}

beforeEach(() => {
  content.mockReset();
  forgetChunks("file-1");
  forgetChunks("file-2");
  forgetChunks("file-3");
});

describe("a stored citation's passage, read back from the file", () => {
  it("reads each file's chunks once and finds the cited chunk", async () => {
    content.mockResolvedValue(PARTS);
    expect(await citationText(citation("file-1"))).toBe("Rollo led the Norse raiders.");
    const view = await citationView(citation("file-1"));
    expect(view).toMatchObject({ cited: "Rollo led the Norse raiders.", before: "First paragraph here.\n", after: "\nLast words." });
    expect(content).toHaveBeenCalledTimes(1);
    expect(content).toHaveBeenCalledWith("vs_1", "file-1");
    // The answer's own copy of the text needs no read at all.
    expect(await citationText(citation("file-2", "as streamed"))).toBe("as streamed");
    expect(content).toHaveBeenCalledTimes(1);
  });

  it("falls back to the streamed text when the file cannot be read, and says so when there is none", async () => {
    content.mockRejectedValue(new ApiError("No such File object: file-2", { status: 404 }));
    await expect(citationView(citation("file-2", "the passage"))).resolves.toMatchObject({ before: "", cited: "the passage" });
    await expect(citationView(citation("file-2"))).rejects.toThrow("No such File object");
    content.mockResolvedValue([]);
    await expect(citationView(citation("file-3"))).rejects.toThrow(/no longer in the file's index/);
  });

  it("keeps neither a failed nor an empty read", async () => {
    content.mockRejectedValueOnce(new Error("offline")).mockResolvedValueOnce([]).mockResolvedValue(PARTS);
    await expect(fileChunks("vs_1", "file-1")).rejects.toThrow("offline");
    expect(await fileChunks("vs_1", "file-1")).toEqual([]);
    await Promise.resolve();
    expect(await fileChunks("vs_1", "file-1")).toEqual(PARTS);
    expect(await fileChunks("vs_1", "file-1")).toEqual(PARTS);
    expect(content).toHaveBeenCalledTimes(3);
  });
});
