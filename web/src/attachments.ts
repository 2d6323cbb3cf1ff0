/**
 * A conversation's attached files as the composer shows them (one chip each), as a state machine:
 *
 *   uploading ──uploaded──▶ attaching ──attached──▶ in_progress ──polled──▶ completed | failed
 *       │                       │
 *       └─upload_failed─▶ rejected (400 wrong type, 413 too large: nothing was attached)
 *                               └─attach_failed─▶ failed
 *
 * Only a file the server holds in the conversation's vector store (in_progress or completed) makes a chat request
 * name that store. Events for a chip that was removed, or that do not fit its state, change nothing.
 */
import type { VectorStoreFileObject } from "./types";

export type AttachmentStatus = "uploading" | "attaching" | "in_progress" | "completed" | "failed" | "rejected";

export interface Attachment {
  key: string;
  filename: string;
  bytes: number;
  status: AttachmentStatus;
  /** Set once uploaded. */
  fileId?: string;
  /** Why it failed (ingestion's `last_error.message`) or was rejected (the API's error message). */
  error?: string;
}

export type AttachmentEvent =
  | { type: "added"; key: string; filename: string; bytes: number }
  | { type: "uploaded"; key: string; fileId: string }
  | { type: "upload_failed"; key: string; message: string }
  | { type: "attached"; key: string; file: VectorStoreFileObject }
  | { type: "attach_failed"; key: string; message: string }
  | { type: "polled"; key: string; file: VectorStoreFileObject }
  | { type: "removed"; key: string }
  /** The file was deleted (files panel): its chip goes. */
  | { type: "file_deleted"; fileId: string }
  /** A conversation opened: its store's files as the server lists them. */
  | { type: "loaded"; attachments: Attachment[] };

/** A vector store file's status → a chip's (a cancelled ingestion is a failure the person can act on). */
export function fromStoreFile(file: VectorStoreFileObject): Pick<Attachment, "status" | "error"> {
  switch (file.status) {
    case "completed":
      return { status: "completed", error: undefined };
    case "in_progress":
      return { status: "in_progress", error: undefined };
    case "cancelled":
      return { status: "failed", error: file.last_error?.message || "Indexing was cancelled." };
    default:
      return { status: "failed", error: file.last_error?.message || "The file could not be indexed." };
  }
}

function update(list: Attachment[], key: string, allowed: AttachmentStatus[], patch: Partial<Attachment>): Attachment[] {
  const index = list.findIndex((a) => a.key === key);
  if (index === -1 || !allowed.includes(list[index]!.status)) return list;
  const next = list.slice();
  next[index] = { ...list[index]!, ...patch };
  return next;
}

export function attachmentsReducer(list: Attachment[], event: AttachmentEvent): Attachment[] {
  switch (event.type) {
    case "added":
      if (list.some((a) => a.key === event.key)) return list;
      return [...list, { key: event.key, filename: event.filename, bytes: event.bytes, status: "uploading" }];
    case "uploaded":
      return update(list, event.key, ["uploading"], { status: "attaching", fileId: event.fileId });
    case "upload_failed":
      return update(list, event.key, ["uploading"], { status: "rejected", error: event.message });
    case "attached":
      return update(list, event.key, ["attaching"], fromStoreFile(event.file));
    case "attach_failed":
      return update(list, event.key, ["attaching"], { status: "failed", error: event.message });
    case "polled":
      // Only a file still indexing moves on; a late answer cannot take a finished chip back to in_progress.
      return update(list, event.key, ["in_progress"], fromStoreFile(event.file));
    case "removed":
      return list.some((a) => a.key === event.key) ? list.filter((a) => a.key !== event.key) : list;
    case "file_deleted":
      return list.some((a) => a.fileId === event.fileId) ? list.filter((a) => a.fileId !== event.fileId) : list;
    case "loaded":
      return event.attachments;
    default:
      return list;
  }
}

/** Chips whose ingestion is still running (polled for progress). */
export function indexing(list: Attachment[]): Attachment[] {
  return list.filter((a) => a.status === "in_progress" && a.fileId);
}

/** Whether a chat request should name the conversation's store: it holds at least one file being or done indexing. */
export function searchable(list: Attachment[]): boolean {
  return list.some((a) => (a.status === "in_progress" || a.status === "completed") && a.fileId);
}

/** "1.2 MB"-style sizes (powers of 1024, as the tier limits are). */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) return "";
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KB", "MB", "GB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

export const STATUS_LABEL: Record<AttachmentStatus, string> = {
  uploading: "Uploading…",
  attaching: "Adding…",
  in_progress: "Indexing…",
  completed: "Ready",
  failed: "Failed",
  rejected: "Not attached",
};

/** What the file picker offers (the server checks the content, whatever the picker allowed). */
/** What the attach button offers: documents for the chat's files, and images for a model that sees. */
export const ACCEPT = ".pdf,.docx,.md,.markdown,.txt,.html,.htm,image/png,image/jpeg,image/webp,image/gif";
