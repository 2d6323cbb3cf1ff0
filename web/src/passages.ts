/**
 * Cited files' indexed chunks, read once per (vector store, file) and kept for the page's life: a stored citation
 * has only offsets, so its passage (and the text around it) is read back from here. A failed or empty read is not
 * kept.
 */
import { passageWindow, type PassageView } from "./citations";
import { filesApi } from "./filesApi";
import type { Citation, FileContentPart } from "./types";

const cache = new Map<string, Promise<FileContentPart[]>>();

export function fileChunks(storeId: string, fileId: string): Promise<FileContentPart[]> {
  const key = `${storeId}/${fileId}`;
  let pending = cache.get(key);
  if (!pending) {
    pending = filesApi.content(storeId, fileId);
    cache.set(key, pending);
    // Nothing indexed (yet) or a failed read: asked again next time.
    pending.then((parts) => parts.length === 0 && cache.delete(key)).catch(() => cache.delete(key));
  }
  return pending;
}

/** Forget a file's chunks (it was deleted or detached). */
export function forgetChunks(fileId: string): void {
  for (const key of [...cache.keys()]) if (key.endsWith(`/${fileId}`)) cache.delete(key);
}

/** The citation's passage text: the one the answer carried, else the cited chunk read back. */
export async function citationText(citation: Citation): Promise<string | null> {
  if (citation.text) return citation.text;
  const parts = await fileChunks(citation.vector_store_id, citation.file_id);
  const chunk = parts.find((p) => p.chunk_id === citation.chunk_id);
  if (chunk) return chunk.text;
  return passageWindow(parts, citation.start, citation.end, 0)?.cited ?? null;
}

/** The cited passage in its context; falls back to the passage alone when the file's chunks cannot be read. */
export async function citationView(citation: Citation): Promise<PassageView> {
  try {
    const view = passageWindow(await fileChunks(citation.vector_store_id, citation.file_id), citation.start, citation.end);
    if (view) return view;
  } catch (err) {
    if (!citation.text) throw err;
  }
  if (citation.text) return { before: "", cited: citation.text, after: "", clippedBefore: false, clippedAfter: false };
  throw new Error("This passage is no longer in the file's index (the file was deleted or indexed again).");
}
