/** Turn an ApiError into what a person can act on: a title, the server's words, a countdown, and whether to retry. */
import { ApiError } from "./api";

export interface ErrorView {
  title: string;
  detail: string;
  /** Seconds to wait before retrying (429 / 503 with retry-after), else null. */
  countdown: number | null;
  /** Countdown text; "{n}" is replaced by the seconds left. */
  countdownLabel: string;
  canRetry: boolean;
}

export function describeError(error: unknown): ErrorView {
  const err =
    error instanceof ApiError
      ? error
      : new ApiError(error instanceof Error ? error.message : "Something went wrong.", { kind: "network" });
  const view: ErrorView = { title: "Something went wrong", detail: err.message, countdown: null, countdownLabel: "", canRetry: true };
  if (err.kind === "network") {
    return { ...view, title: "Network error", detail: "The service could not be reached. Check your connection and retry." };
  }
  if (err.kind === "disconnected") {
    return { ...view, title: "Connection lost", detail: "The answer was interrupted before it finished. What arrived is kept." };
  }
  if (err.kind === "stream") {
    return { ...view, title: "The answer could not be completed" };
  }
  const status = err.status;
  if (status === 429) {
    if (!err.shouldRetry || err.code === "insufficient_quota") {
      return { ...view, title: "Quota reached", canRetry: false };
    }
    return {
      ...view,
      title: "Too many requests",
      countdown: err.retryAfter,
      countdownLabel: "Rate limited — retry in {n} s",
    };
  }
  if (status === 503) {
    return {
      ...view,
      title: "Service unavailable",
      countdown: err.retryAfter,
      countdownLabel: "Service busy — retry in {n} s",
    };
  }
  if (status === 400 && err.code === "content_policy_violation") {
    return { ...view, title: "This request was blocked by the content policy", canRetry: false };
  }
  if (status === 400 && err.code === "context_length_exceeded") {
    return { ...view, title: "This conversation is too long", canRetry: false };
  }
  if (status === 401) return { ...view, title: "Session expired", canRetry: false };
  if (status === 404) return { ...view, title: "Not found", canRetry: false };
  if (status === 413) return { ...view, title: "Message too large", canRetry: false };
  if (status >= 500) return { ...view, title: "Server error" };
  if (status === 408 || status === 409 || status === 425) return view;
  if (status >= 400) return { ...view, title: "Request rejected", canRetry: false };
  return view;
}
