/**
 * The open conversation's answer feedback: loads the stored ratings when a conversation opens, and gives, changes
 * and removes ratings and comments. Entries are keyed by stored message id (the API's `message_index`) and bound to
 * the answer text they are about. An id is stable (a regenerate adds a version beside the old answer), so a rating
 * of a version switched away from is still shown when it is switched back to.
 */
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "../api";
import {
  entryFor,
  failed,
  feedbackApi,
  fromListing,
  given,
  hidden,
  removed,
  reopened,
  started,
  thumbAction,
  type FeedbackEntry,
  type FeedbackMap,
  type FeedbackObject,
  type Rating,
} from "../feedback";

export interface FeedbackController {
  entry(index: number, answer: string): FeedbackEntry;
  rate(index: number, answer: string, rating: Rating): Promise<void>;
  setDraft(index: number, answer: string, draft: string): void;
  sendComment(index: number, answer: string): Promise<void>;
  /** Show the comment box (the kept draft, else the stored comment). */
  openComment(index: number, answer: string): void;
  /** Hide the comment box, keeping the draft. */
  closeComment(index: number, answer: string): void;
}

/** `answers`: the stored message id → text of every stored answer the view shows. */
export function useFeedback(conversationId: string | null, answers: Map<number, string>): FeedbackController {
  const [map, setMap] = useState<FeedbackMap>({});
  // The listing as loaded, until each item is bound to the answer text the view shows with its id (an answer on
  // another branch: once it is switched to).
  const [listed, setListed] = useState<FeedbackObject[]>([]);
  const conversation = useRef(conversationId);
  const current = useRef(map);
  current.current = map;

  useEffect(() => {
    conversation.current = conversationId;
    setMap({});
    setListed([]);
    if (!conversationId) return;
    let live = true;
    feedbackApi
      .list(conversationId)
      .then((items) => {
        if (live) setListed(items);
      })
      .catch(() => {
        // Earlier ratings stay hidden; rating still works (and says so if the service is down).
      });
    return () => {
      live = false;
    };
  }, [conversationId]);

  const signature = [...answers.keys()].join(",");
  useEffect(() => {
    if (listed.length === 0) return;
    const bound = fromListing(listed, answers);
    if (Object.keys(bound).length === 0) return;
    setMap((now) => ({ ...bound, ...now })); // a rating given meanwhile wins over the listing
    setListed((items) => items.filter((item) => !(item.message_index in bound)));
  }, [listed, signature]); // `answers` is a new Map each render: its keys are what matter

  const update = useCallback((conv: string, index: number, answer: string, change: (e: FeedbackEntry) => FeedbackEntry) => {
    if (conversation.current !== conv) return; // another conversation is open now
    setMap((now) => ({ ...now, [index]: change(entryFor(now, index, answer)) }));
  }, []);

  const rate = useCallback(
    async (index: number, answer: string, rating: Rating) => {
      const conv = conversation.current;
      const entry = entryFor(current.current, index, answer);
      if (!conv || entry.pending) return;
      const action = thumbAction(entry, rating);
      update(conv, index, answer, started);
      try {
        if (action.kind === "remove") {
          await feedbackApi.remove(conv, index);
          update(conv, index, answer, removed);
        } else {
          const stored = await feedbackApi.give(conv, index, action.rating, action.comment);
          update(conv, index, answer, (e) => given(e, stored, false));
        }
      } catch (err) {
        if (action.kind === "remove" && err instanceof ApiError && err.code === "feedback_not_found") {
          update(conv, index, answer, removed); // gone already (another tab): what the user asked for
        } else {
          update(conv, index, answer, (e) => failed(e, err));
        }
      }
    },
    [update],
  );

  const sendComment = useCallback(
    async (index: number, answer: string) => {
      const conv = conversation.current;
      const entry = entryFor(current.current, index, answer);
      if (!conv || entry.pending || entry.rating === null || entry.draft === null || !entry.open) return;
      const comment = entry.draft.trim() || null;
      update(conv, index, answer, started);
      try {
        const stored = await feedbackApi.give(conv, index, entry.rating, comment);
        update(conv, index, answer, (e) => given(e, stored, true));
      } catch (err) {
        update(conv, index, answer, (e) => failed(e, err));
      }
    },
    [update],
  );

  return {
    entry: (index, answer) => entryFor(map, index, answer),
    rate,
    sendComment,
    setDraft: (index, answer, draft) => {
      const conv = conversation.current;
      if (conv) update(conv, index, answer, (e) => ({ ...e, draft }));
    },
    openComment: (index, answer) => {
      const conv = conversation.current;
      if (conv) update(conv, index, answer, reopened);
    },
    closeComment: (index, answer) => {
      const conv = conversation.current;
      if (conv) update(conv, index, answer, hidden);
    },
  };
}
