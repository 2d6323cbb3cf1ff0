/** The files and vector-store calls the web chat makes (`/v1/files`, `/v1/vector_stores`; OpenAI's shapes). */
import { json } from "./api";
import type { FileContentPart, FileObject, ListPage, VectorStoreFileObject, VectorStoreObject } from "./types";

const enc = encodeURIComponent;

/** What the web chat marks its per-conversation stores with (so they can be told apart from API-made ones). */
export const CHAT_STORE_METADATA = { created_by: "fleetchat-web" };

export const filesApi = {
  /** Upload one file for retrieval (purpose `assistants`); a 400 (wrong type) or 413 (too large) throws ApiError. */
  upload(file: Blob, filename: string, signal?: AbortSignal): Promise<FileObject> {
    const form = new FormData();
    form.append("purpose", "assistants");
    form.append("file", file, filename);
    return json<FileObject>("/v1/files", { method: "POST", form, signal });
  },
  list: (limit = 100, after?: string | null) =>
    json<ListPage<FileObject>>(`/v1/files?limit=${limit}${after ? `&after=${enc(after)}` : ""}`),
  get: (id: string) => json<FileObject>(`/v1/files/${enc(id)}`),
  remove: (id: string) => json<{ id: string; deleted: boolean }>(`/v1/files/${enc(id)}`, { method: "DELETE" }),
  createStore: (name: string) =>
    json<VectorStoreObject>("/v1/vector_stores", { method: "POST", body: { name, metadata: CHAT_STORE_METADATA } }),
  deleteStore: (storeId: string) =>
    json<{ id: string; deleted: boolean }>(`/v1/vector_stores/${enc(storeId)}`, { method: "DELETE" }),
  attach: (storeId: string, fileId: string) =>
    json<VectorStoreFileObject>(`/v1/vector_stores/${enc(storeId)}/files`, { method: "POST", body: { file_id: fileId } }),
  detach: (storeId: string, fileId: string) =>
    json<{ id: string; deleted: boolean }>(`/v1/vector_stores/${enc(storeId)}/files/${enc(fileId)}`, {
      method: "DELETE",
    }),
  storeFile: (storeId: string, fileId: string) =>
    json<VectorStoreFileObject>(`/v1/vector_stores/${enc(storeId)}/files/${enc(fileId)}`),
  storeFiles: (storeId: string) =>
    json<ListPage<VectorStoreFileObject>>(`/v1/vector_stores/${enc(storeId)}/files?limit=100&order=asc`),
  /** The file's indexed chunks in reading order, with their offsets (a citation's passage and its context). */
  content: (storeId: string, fileId: string) =>
    json<{ data: FileContentPart[] }>(`/v1/vector_stores/${enc(storeId)}/files/${enc(fileId)}/content`).then(
      (page) => page.data,
    ),
};
