/**
 * The open conversation's attached files: upload (purpose `assistants`), add to the conversation's vector store
 * (created on the first file, one per conversation, remembered in src/chatStores.ts), poll each file's indexing until
 * it completes or fails, remove. A new chat's files move with it when the chat gets its id (`adopt`).
 */
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "../api";
import {
  attachmentsReducer,
  fromStoreFile,
  indexing,
  searchable,
  type Attachment,
  type AttachmentEvent,
} from "../attachments";
import { newKey } from "../chatModel";
import { forgetStore, rememberStore, storeFor } from "../chatStores";
import { filesApi } from "../filesApi";
import { forgetChunks } from "../passages";

/** How often a file still indexing is asked for its status. */
export const POLL_MS = 1000;
const STORE_NAME = "Chat files";

function messageOf(err: unknown, fallback: string): string {
  return err instanceof Error && err.message ? err.message : fallback;
}

export interface AttachmentsController {
  attachments: Attachment[];
  add(files: File[]): void;
  remove(key: string): void;
  /** A new chat got its id: its store (if any) is now that conversation's. */
  adopt(conversationId: string): void;
  /** The open conversation is gone; one this view started (its first turn never saved) keeps its files for the
   * new chat that starts again in its place. */
  conversationGone(conversationId: string): void;
  /** The file was deleted (files panel). */
  fileDeleted(fileId: string): void;
  /** The conversation was deleted: its store goes too (its files stay). */
  conversationDeleted(conversationId: string): void;
  /** What a chat request names as `vector_store_ids`. */
  vectorStoreIds(): string[];
}

/**
 * `conversationId`: the open conversation (null: a new chat). `hintStoreId`: the store its stored citations name,
 * used when this browser does not remember the conversation's store.
 */
export function useAttachments(conversationId: string | null, hintStoreId: string | null): AttachmentsController {
  const [attachments, setAttachments] = useState<Attachment[]>([]);
  const listRef = useRef<Attachment[]>([]);
  const storeRef = useRef<string | null>(null);
  const creating = useRef<Promise<string> | null>(null);
  /** The conversation the chips belong to (undefined: none followed yet). */
  const convRef = useRef<string | null | undefined>(undefined);
  /** Bumped when the view switches conversation: late results for the old one are dropped. */
  const viewSeq = useRef(0);

  const dispatch = useCallback((event: AttachmentEvent) => {
    const next = attachmentsReducer(listRef.current, event);
    if (next !== listRef.current) {
      listRef.current = next;
      setAttachments(next);
    }
  }, []);

  const load = useCallback(
    async (convId: string, storeId: string) => {
      const seq = viewSeq.current;
      storeRef.current = storeId;
      try {
        const files = (await filesApi.storeFiles(storeId)).data;
        const named = await Promise.all(
          files.map(async (file): Promise<Attachment | null> => {
            try {
              const meta = await filesApi.get(file.id);
              return { key: newKey("f"), filename: meta.filename, bytes: meta.bytes, fileId: file.id, ...fromStoreFile(file) };
            } catch {
              return null; // deleted meanwhile
            }
          }),
        );
        if (seq !== viewSeq.current) return;
        rememberStore(convId, storeId);
        dispatch({ type: "loaded", attachments: named.filter((a): a is Attachment => a !== null) });
      } catch (err) {
        if (seq !== viewSeq.current) return;
        if (err instanceof ApiError && err.status === 404) {
          // The store is gone (deleted, expired): the conversation has no files now.
          forgetStore(convId);
          if (storeRef.current === storeId) storeRef.current = null;
        }
      }
    },
    [dispatch],
  );

  // Follow the open conversation (a new chat adopting its id is not a switch: see `adopt`).
  useEffect(() => {
    if (conversationId === convRef.current) {
      // Opened in a browser that did not remember its store: the stored citations name it.
      if (conversationId && !storeRef.current && hintStoreId && !storeFor(conversationId)) {
        void load(conversationId, hintStoreId);
      }
      return;
    }
    convRef.current = conversationId;
    viewSeq.current += 1;
    storeRef.current = null;
    creating.current = null;
    listRef.current = [];
    setAttachments([]);
    if (!conversationId) return;
    const storeId = storeFor(conversationId) ?? hintStoreId;
    if (storeId) void load(conversationId, storeId);
  }, [conversationId, hintStoreId, load]);

  const ensureStore = useCallback(async (): Promise<string> => {
    if (storeRef.current) return storeRef.current;
    if (!creating.current) {
      const seq = viewSeq.current;
      const pending = filesApi.createStore(STORE_NAME).then((store) => {
        if (seq === viewSeq.current) {
          storeRef.current = store.id;
          if (convRef.current) rememberStore(convRef.current, store.id);
        }
        return store.id;
      });
      creating.current = pending;
      pending.catch(() => {
        if (creating.current === pending) creating.current = null;
      });
    }
    return creating.current;
  }, []);

  const addOne = useCallback(
    async (file: File) => {
      const seq = viewSeq.current;
      const key = newKey("f");
      dispatch({ type: "added", key, filename: file.name, bytes: file.size });
      let fileId: string;
      try {
        fileId = (await filesApi.upload(file, file.name)).id;
      } catch (err) {
        if (seq === viewSeq.current) dispatch({ type: "upload_failed", key, message: messageOf(err, "The upload failed.") });
        return;
      }
      if (seq !== viewSeq.current) return; // another chat opened meanwhile: the file stays in the files panel only
      dispatch({ type: "uploaded", key, fileId });
      try {
        const storeId = await ensureStore();
        if (seq !== viewSeq.current) return;
        const attached = await filesApi.attach(storeId, fileId);
        if (seq === viewSeq.current) dispatch({ type: "attached", key, file: attached });
      } catch (err) {
        if (seq === viewSeq.current) dispatch({ type: "attach_failed", key, message: messageOf(err, "The file could not be added.") });
      }
    },
    [dispatch, ensureStore],
  );

  const add = useCallback((files: File[]) => files.forEach((file) => void addOne(file)), [addOne]);

  const remove = useCallback(
    (key: string) => {
      const chip = listRef.current.find((a) => a.key === key);
      dispatch({ type: "removed", key });
      const storeId = storeRef.current;
      if (chip?.fileId && storeId && chip.status !== "rejected") {
        void filesApi.detach(storeId, chip.fileId).catch(() => undefined); // already gone: nothing to undo
      }
    },
    [dispatch],
  );

  /** The id a new chat of this view got (its files came with it). */
  const adopted = useRef<string | null>(null);
  const adopt = useCallback((id: string) => {
    if (convRef.current !== null) return;
    convRef.current = id;
    adopted.current = id;
    if (storeRef.current) rememberStore(id, storeRef.current);
  }, []);

  const conversationGone = useCallback((id: string) => {
    if (adopted.current !== id || convRef.current !== id) return;
    // The chat starts again as a new one (no switch): its files stay, and go to the id it gets next.
    convRef.current = null;
    adopted.current = null;
    forgetStore(id);
  }, []);

  const fileDeleted = useCallback(
    (fileId: string) => {
      forgetChunks(fileId);
      dispatch({ type: "file_deleted", fileId });
    },
    [dispatch],
  );

  const conversationDeleted = useCallback((id: string) => {
    const storeId = storeFor(id);
    forgetStore(id);
    if (storeId) void filesApi.deleteStore(storeId).catch(() => undefined);
  }, []);

  const vectorStoreIds = useCallback(
    () => (storeRef.current && searchable(listRef.current) ? [storeRef.current] : []),
    [],
  );

  // Poll every file still indexing until it completes or fails.
  const pollKey = indexing(attachments)
    .map((a) => a.key)
    .join(",");
  useEffect(() => {
    if (!pollKey) return;
    let live = true;
    let timer = 0;
    const tick = async () => {
      const storeId = storeRef.current;
      if (!live || !storeId) return;
      await Promise.all(
        indexing(listRef.current).map(async (chip) => {
          try {
            const file = await filesApi.storeFile(storeId, chip.fileId!);
            if (live) dispatch({ type: "polled", key: chip.key, file });
          } catch (err) {
            if (live && err instanceof ApiError && err.status === 404) {
              const gone = { id: chip.fileId!, object: "vector_store.file", vector_store_id: storeId, status: "failed" } as const;
              dispatch({ type: "polled", key: chip.key, file: { ...gone, last_error: { code: "not_found", message: "The file was removed." } } });
            }
            // Anything else (a network blip): asked again on the next tick.
          }
        }),
      );
      if (live && indexing(listRef.current).length > 0) timer = window.setTimeout(() => void tick(), POLL_MS);
    };
    timer = window.setTimeout(() => void tick(), POLL_MS);
    return () => {
      live = false;
      window.clearTimeout(timer);
    };
  }, [pollKey, dispatch]);

  return { attachments, add, remove, adopt, conversationGone, fileDeleted, conversationDeleted, vectorStoreIds };
}
