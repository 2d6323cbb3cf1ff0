/** How a streamed turn ended, from what its stream said: the answer's status, the error to show, and whether the
 * server saved it, did not, or may still (a Stop or a lost connection: wait for the stored copy). */
import { ApiError } from "./api";
import { statusFromFinish, type AnswerStatus } from "./chatModel";
import { describeError, type ErrorView } from "./errors";
import type { FinishReason } from "./types";

export interface StreamEnd {
  aborted: boolean; // the user stopped it
  streamError: ApiError | null; // an in-band `event: error`
  ended: "done" | "disconnected" | null; // [DONE] seen, or the connection went away
  finish: FinishReason; // the last finish_reason
  stored: boolean | null; // what the server said about saving (null: it said nothing)
}

export interface TurnOutcome {
  status: AnswerStatus;
  view: ErrorView | null;
  savedTurn: boolean; // the server said it saved the turn (a Stop after its last chunk changes nothing)
  notSaved: boolean; // the server said it did not
  unknown: boolean; // it said nothing and may still save it
  liveStatus: string; // for the aria-live region
}

export function turnOutcome(end: StreamEnd): TurnOutcome {
  let status: AnswerStatus;
  let view: ErrorView | null = null;
  if (end.aborted) status = "stopped";
  else if (end.streamError) {
    status = "error";
    view = describeError(end.streamError);
  } else if (end.ended !== "done") {
    status = "error";
    view = describeError(new ApiError("Connection lost", { kind: "disconnected" }));
  } else status = statusFromFinish(end.finish);
  const live: Record<AnswerStatus, string> = {
    streaming: "Generating an answer…",
    done: "Answer complete.",
    stopped: "Stopped.",
    filtered: "The answer was stopped by the safety filter.",
    error: view ? `Error: ${view.title}.` : "Error.",
  };
  return {
    status,
    view,
    savedTurn: end.stored === true,
    notSaved: !end.aborted && end.stored === false,
    unknown: end.stored === null && (end.aborted || end.ended !== "done"),
    liveStatus: live[status],
  };
}
