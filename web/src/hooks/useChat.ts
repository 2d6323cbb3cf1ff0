/**
 * The open conversation and its turns: send, stream (batched per animation frame), stop, regenerate, edit and
 * resend, retry; errors a person can act on; banners from the response headers. Nothing typed is ever lost: a
 * request that fails before its answer starts puts the text back where it was typed.
 */
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { api, ApiError } from "../api";
import {
  lastUserIndex,
  newKey,
  reconcile,
  statusFromFinish,
  type AnswerStatus,
  type UiMessage,
} from "../chatModel";
import { fromStored } from "../chatModel";
import { describeError, type ErrorView } from "../errors";
import { markFirstTokenReceived, resetFirstTokenMarks } from "../perf";
import { openChatStream, type ChatStream } from "../stream";
import type { ChatRequestBody, ConversationSummary } from "../types";

export interface ChatError {
  key: string;
  view: ErrorView;
  retry: (() => void) | null;
}

export interface BannerState {
  brownout: boolean;
  fallback: { used: string; requested: string } | null;
}

export interface EditingState {
  key: string;
  draft: string;
}

type Origin = "composer" | "regenerate" | "edit" | "retry";

interface TurnSpec {
  mode: "new" | "continue" | "replace";
  text: string;
  model: string;
  conversationId: string | null;
  /** For "replace": the stored index of the user message replaced. */
  replaceFrom?: number;
  /** Stored messages the server keeps before this turn, when known (the new user message's predicted index). */
  baseCount: number | null;
  /** View messages shown before this turn's user message. */
  keep: UiMessage[];
  /** The view to go back to if the request fails before its answer starts. */
  snapshot: UiMessage[];
  origin: Origin;
  editKey?: string;
}

export interface ChatOptions {
  model: string;
  /** Put text back into the composer (a failed send). */
  restoreDraft(text: string): void;
  /** A retry sends text that was put back: clear the composer if it still holds just that. */
  clearDraftIf(text: string): void;
  /** A new chat got its id (first response headers): show it in the sidebar and the URL. */
  onConversationStarted(id: string, firstMessage: string): void;
  /** A turn ended: titles and order may have changed. */
  onTurnSettled(id: string): void;
  /** A conversation was read from the server (title, counts). */
  onConversationSeen(conversation: ConversationSummary): void;
  /** The open conversation does not exist (deleted, expired). */
  onConversationGone(id: string): void;
}

export function useChat(options: ChatOptions) {
  const opts = useRef(options);
  opts.current = options;

  const [conversationId, setConversationIdState] = useState<string | null>(null);
  const [messages, setMessagesState] = useState<UiMessage[]>([]);
  const [streaming, setStreaming] = useState(false);
  const [loading, setLoading] = useState(false);
  const [persisted, setPersistedState] = useState(false);
  const [error, setError] = useState<ChatError | null>(null);
  const [banner, setBanner] = useState<BannerState | null>(null);
  const [editing, setEditing] = useState<EditingState | null>(null);
  const [liveStatus, setLiveStatus] = useState("");

  const messagesRef = useRef<UiMessage[]>([]);
  const conversationRef = useRef<string | null>(null);
  const persistedRef = useRef(false);
  /** The id a new chat got from its first response, until the server is known to hold it. */
  const newChatId = useRef<string | null>(null);
  const loadingRef = useRef(false);
  /** Length of the server's stored list (system messages included), when known. */
  const storedCount = useRef<number | null>(0);
  const controllerRef = useRef<AbortController | null>(null);
  /** Bumped whenever the view switches conversation: late async results for another view are dropped. */
  const viewSeq = useRef(0);
  const reconciling = useRef<Promise<void> | null>(null);
  const resendRef = useRef<(origin: Origin) => Promise<void>>(async () => undefined);

  const setMessages = useCallback((next: UiMessage[]) => {
    messagesRef.current = next;
    setMessagesState(next);
  }, []);
  const setConversationId = useCallback((id: string | null) => {
    conversationRef.current = id;
    setConversationIdState(id);
  }, []);
  const setPersisted = useCallback((value: boolean) => {
    persistedRef.current = value;
    setPersistedState(value);
  }, []);
  const patchMessage = useCallback(
    (key: string, patch: Partial<UiMessage>) => {
      const current = messagesRef.current;
      const index = current.findIndex((m) => m.key === key);
      if (index === -1) return;
      const next = current.slice();
      next[index] = { ...current[index]!, ...patch };
      setMessages(next);
    },
    [setMessages],
  );

  useEffect(() => () => controllerRef.current?.abort(), []);

  /** Read the stored conversation and line the view up with it (stored indices for edit and regenerate). */
  const syncWithServer = useCallback(
    async (id: string): Promise<boolean> => {
      const seq = viewSeq.current;
      try {
        const conversation = await api.getConversation(id);
        if (seq !== viewSeq.current || controllerRef.current) return false;
        setMessages(reconcile(messagesRef.current, conversation.messages));
        storedCount.current = conversation.messages.length;
        setPersisted(true);
        opts.current.onConversationSeen(conversation);
        return true;
      } catch {
        return false; // not there (a new chat whose first turn was not saved) or unreachable: the view stays
      }
    },
    [setMessages, setPersisted],
  );

  const scheduleSync = useCallback(
    (id: string, delayMs: number, again: boolean) => {
      const seq = viewSeq.current;
      const run = new Promise<void>((resolve) => {
        setTimeout(() => {
          if (seq !== viewSeq.current) return resolve();
          void syncWithServer(id).then(() => {
            // A stopped answer is saved by the server after it notices the disconnect: look once more if the view
            // still holds messages the server did not have yet.
            if (again && seq === viewSeq.current && messagesRef.current.some((m) => m.storedIndex === undefined)) {
              setTimeout(() => {
                if (seq === viewSeq.current) void syncWithServer(id).finally(resolve);
                else resolve();
              }, 1500);
            } else resolve();
          });
        }, delayMs);
      });
      reconciling.current = run;
      void run.finally(() => {
        if (reconciling.current === run) reconciling.current = null;
      });
    },
    [syncWithServer],
  );

  const runTurn = useCallback(
    async (spec: TurnSpec): Promise<void> => {
      if (controllerRef.current) return;
      const seq = viewSeq.current;
      resetFirstTokenMarks();
      setError(null);
      setBanner(null);
      setEditing(null);
      const userKey = newKey("u");
      const answerKey = newKey("a");
      const predicted = spec.mode === "new" ? 0 : (spec.baseCount ?? undefined);
      setMessages([
        ...spec.keep,
        { key: userKey, role: "user", content: spec.text, storedIndex: predicted },
        { key: answerKey, role: "assistant", content: "", status: "streaming" },
      ]);
      const controller = new AbortController();
      controllerRef.current = controller;
      setStreaming(true);
      setLiveStatus("Generating an answer…");

      const body: ChatRequestBody = {
        model: spec.model,
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: "user", content: spec.text }],
      };
      if (spec.mode === "new") body.store = true;
      else {
        body.conversation_id = spec.conversationId!;
        if (spec.mode === "replace") body.replace_from = spec.replaceFrom!;
      }

      const release = () => {
        if (controllerRef.current === controller) controllerRef.current = null;
        setStreaming(controllerRef.current !== null);
      };

      let stream: ChatStream;
      try {
        stream = await openChatStream(body, controller.signal);
      } catch (err) {
        release();
        if (err instanceof ApiError && err.status === 401) {
          // The sign-in screen takes over (and this view may already be gone): keep the text in the draft.
          if (spec.origin === "composer" || spec.origin === "edit") opts.current.restoreDraft(spec.text);
          return;
        }
        if (seq !== viewSeq.current) return;
        if (controller.signal.aborted) {
          patchMessage(answerKey, { status: "stopped", finishReason: "stopped" });
          setLiveStatus("Stopped.");
          return;
        }
        // Nothing was answered: back to how it was, and the text back where it was typed.
        setMessages(spec.snapshot);
        if (spec.origin === "composer") opts.current.restoreDraft(spec.text);
        if (spec.origin === "edit" && spec.editKey) setEditing({ key: spec.editKey, draft: spec.text });
        const view = describeError(err);
        setLiveStatus(`Error: ${view.title}.`);
        if (err instanceof ApiError && err.status === 404 && spec.mode !== "new" && spec.conversationId) {
          setError({ key: newKey("e"), view: { ...view, title: "This conversation no longer exists" }, retry: null });
          return;
        }
        setError({
          key: newKey("e"),
          view,
          retry: view.canRetry
            ? () => {
                if (spec.origin === "composer") opts.current.clearDraftIf(spec.text);
                void runTurn({ ...spec, snapshot: messagesRef.current, keep: spec.keep });
              }
            : null,
        });
        return;
      }

      const meta = stream.meta;
      let convId = spec.conversationId;
      if (spec.mode === "new" && meta.conversationId && seq === viewSeq.current) {
        convId = meta.conversationId;
        newChatId.current = convId;
        setConversationId(convId);
        opts.current.onConversationStarted(convId, spec.text);
      }
      if (meta.brownout || meta.fallbackModel) {
        setBanner({
          brownout: meta.brownout,
          fallback: meta.fallbackModel ? { used: meta.fallbackModel, requested: spec.model } : null,
        });
      }

      let content = "";
      let finish: string | null = null;
      let streamError: ApiError | null = null;
      let ended: "done" | "disconnected" | null = null;
      let stored: boolean | null = meta.stored;
      let frame = 0;
      let first = true;
      const flush = () => {
        frame = 0;
        patchMessage(answerKey, { content });
      };
      try {
        for await (const event of stream.events) {
          switch (event.type) {
            case "delta":
              content += event.content;
              if (first) {
                first = false;
                markFirstTokenReceived();
                flush(); // the first token is shown at once; later ones once per frame
              } else if (!frame) {
                frame = requestAnimationFrame(flush);
              }
              break;
            case "finish":
              finish = event.reason;
              break;
            case "conversation":
              stored = event.conversation.stored !== false;
              if (!convId && event.conversation.id && seq === viewSeq.current) {
                convId = event.conversation.id;
                newChatId.current = convId;
                setConversationId(convId);
                opts.current.onConversationStarted(convId, spec.text);
              }
              break;
            case "error":
              streamError = event.error;
              break;
            case "done":
              ended = "done";
              break;
            case "disconnected":
              ended = "disconnected";
              break;
            default:
              break;
          }
        }
      } catch {
        if (!controller.signal.aborted) ended = "disconnected";
      }
      if (frame) cancelAnimationFrame(frame);
      release();
      if (seq !== viewSeq.current) return;

      const aborted = controller.signal.aborted;
      let status: AnswerStatus;
      let view: ErrorView | null = null;
      if (aborted) status = "stopped";
      else if (streamError) {
        status = "error";
        view = describeError(streamError);
      } else if (ended !== "done") {
        status = "error";
        view = describeError(new ApiError("Connection lost", { kind: "disconnected" }));
      } else status = statusFromFinish(finish);

      const savedTurn = !aborted && stored === true;
      const notSaved = !aborted && stored === false;
      patchMessage(answerKey, {
        content,
        status,
        finishReason: aborted ? "stopped" : finish,
        notSaved,
        errorText: view ? `${view.title}: ${view.detail}` : undefined,
        storedIndex: savedTurn && predicted !== undefined ? predicted + 1 : undefined,
      });
      if (!savedTurn) patchMessage(userKey, { storedIndex: undefined });
      if (savedTurn) {
        setPersisted(true);
        storedCount.current = predicted !== undefined ? predicted + 2 : null;
      } else if (aborted) {
        storedCount.current = null; // the server saves a stopped answer if any text was sent: the sync will tell
      }

      const live: Record<AnswerStatus, string> = {
        streaming: "Generating an answer…",
        done: "Answer complete.",
        stopped: "Stopped.",
        filtered: "The answer was stopped by the safety filter.",
        error: view ? `Error: ${view.title}.` : "Error.",
      };
      setLiveStatus(live[status]);
      if (view) {
        setError({ key: newKey("e"), view, retry: view.canRetry ? () => void resendRef.current("retry") : null });
      }
      if (convId) {
        opts.current.onTurnSettled(convId);
        scheduleSync(convId, aborted ? 400 : 0, aborted);
      }
    },
    [patchMessage, scheduleSync, setConversationId, setMessages, setPersisted],
  );

  /**
   * Ask again for the last turn (Regenerate, or Retry after an answer failed mid-stream): replace it when the server
   * holds it, else send it again as a new turn.
   */
  const resendLastTurn = useCallback(
    async (origin: Origin): Promise<void> => {
      if (controllerRef.current) return;
      if (reconciling.current) await reconciling.current;
      let msgs = messagesRef.current;
      let index = lastUserIndex(msgs);
      if (index < 0) return;
      let user = msgs[index]!;
      const model = opts.current.model;
      const convId = conversationRef.current;
      if (convId && user.storedIndex === undefined) {
        const seq = viewSeq.current;
        try {
          const conversation = await api.getConversation(convId);
          if (seq !== viewSeq.current) return;
          msgs = reconcile(msgs, conversation.messages);
          setMessages(msgs);
          storedCount.current = conversation.messages.length;
          setPersisted(true);
          index = lastUserIndex(msgs);
          if (index < 0) return;
          user = msgs[index]!;
        } catch (err) {
          if (seq !== viewSeq.current) return;
          if (err instanceof ApiError && err.status === 404 && convId === newChatId.current && !persistedRef.current) {
            // The first turn of a new chat was never saved: start it again.
            setConversationId(null);
            opts.current.onConversationGone(convId);
            await runTurn({
              mode: "new",
              text: user.content,
              model,
              conversationId: null,
              baseCount: 0,
              keep: [],
              snapshot: msgs,
              origin,
            });
            return;
          }
          const view = describeError(err);
          setError({ key: newKey("e"), view, retry: view.canRetry ? () => void resendLastTurn(origin) : null });
          return;
        }
      }
      const keep = msgs.slice(0, index);
      if (!convId) {
        await runTurn({ mode: "new", text: user.content, model, conversationId: null, baseCount: 0, keep, snapshot: msgs, origin });
      } else if (user.storedIndex !== undefined) {
        await runTurn({
          mode: "replace",
          text: user.content,
          model,
          conversationId: convId,
          replaceFrom: user.storedIndex,
          baseCount: user.storedIndex,
          keep,
          snapshot: msgs,
          origin,
        });
      } else {
        await runTurn({
          mode: "continue",
          text: user.content,
          model,
          conversationId: convId,
          baseCount: storedCount.current,
          keep,
          snapshot: msgs,
          origin,
        });
      }
    },
    [runTurn, setConversationId, setMessages, setPersisted],
  );
  resendRef.current = resendLastTurn;

  /** Send the composer's text; false when it cannot be sent now. */
  const send = useCallback(
    (text: string): boolean => {
      if (controllerRef.current || loadingRef.current || !text.trim() || !opts.current.model) return false;
      const go = () => {
        if (controllerRef.current) {
          opts.current.restoreDraft(text);
          return;
        }
        const msgs = messagesRef.current;
        const convId = conversationRef.current;
        // A new chat whose first turn was never saved has nothing on the server to continue.
        const unsavedNew = Boolean(convId && convId === newChatId.current && !persistedRef.current);
        const continuing = Boolean(convId && !unsavedNew);
        if (convId && unsavedNew) {
          // A new chat whose first turn was never saved: this message starts it afresh.
          setConversationId(null);
          opts.current.onConversationGone(convId);
        }
        void runTurn({
          mode: continuing ? "continue" : "new",
          text,
          model: opts.current.model,
          conversationId: continuing ? convId : null,
          baseCount: continuing ? storedCount.current : 0,
          keep: msgs,
          snapshot: msgs,
          origin: "composer",
        });
      };
      // After a stopped answer the server's copy is still being read back: wait for it (it decides continue/new).
      if (reconciling.current) void reconciling.current.then(go);
      else go();
      return true;
    },
    [runTurn, setConversationId],
  );

  const regenerate = useCallback(() => void resendLastTurn("regenerate"), [resendLastTurn]);

  const saveEdit = useCallback(
    async (key: string, text: string): Promise<void> => {
      if (controllerRef.current || !text.trim()) return;
      if (reconciling.current) await reconciling.current;
      const msgs = messagesRef.current;
      const index = msgs.findIndex((m) => m.key === key);
      const message = msgs[index];
      const convId = conversationRef.current;
      if (!message || message.storedIndex === undefined || !convId) return;
      await runTurn({
        mode: "replace",
        text,
        model: opts.current.model,
        conversationId: convId,
        replaceFrom: message.storedIndex,
        baseCount: message.storedIndex,
        keep: msgs.slice(0, index),
        snapshot: msgs,
        origin: "edit",
        editKey: key,
      });
    },
    [runTurn],
  );

  const stop = useCallback(() => {
    controllerRef.current?.abort();
  }, []);

  const resetView = useCallback(() => {
    controllerRef.current?.abort();
    viewSeq.current += 1;
    reconciling.current = null;
    newChatId.current = null;
    setError(null);
    setBanner(null);
    setEditing(null);
    setLiveStatus("");
  }, []);

  const newChat = useCallback(() => {
    resetView();
    setConversationId(null);
    setMessages([]);
    setPersisted(false);
    storedCount.current = 0;
    loadingRef.current = false;
    setLoading(false);
  }, [resetView, setConversationId, setMessages, setPersisted]);

  const openConversation = useCallback(
    async (id: string): Promise<void> => {
      resetView();
      const seq = viewSeq.current;
      setConversationId(id);
      setMessages([]);
      setPersisted(false);
      storedCount.current = null;
      loadingRef.current = true;
      setLoading(true);
      try {
        const conversation = await api.getConversation(id);
        if (seq !== viewSeq.current) return;
        setMessages(fromStored(conversation.messages));
        storedCount.current = conversation.messages.length;
        setPersisted(true);
        opts.current.onConversationSeen(conversation);
      } catch (err) {
        if (seq !== viewSeq.current) return;
        const view = describeError(err);
        if (err instanceof ApiError && (err.status === 404 || err.status === 400)) {
          setConversationId(null);
          opts.current.onConversationGone(id);
          setError({ key: newKey("e"), view: { ...view, title: "Conversation not found" }, retry: null });
        } else if (!(err instanceof ApiError && err.status === 401)) {
          setError({ key: newKey("e"), view, retry: () => void openConversation(id) });
        }
      } finally {
        if (seq === viewSeq.current) {
          loadingRef.current = false;
          setLoading(false);
        }
      }
    },
    [resetView, setConversationId, setMessages, setPersisted],
  );

  const dismissError = useCallback(() => setError(null), []);
  const dismissBanner = useCallback(() => setBanner(null), []);

  return {
    conversationId,
    messages,
    streaming,
    loading,
    persisted,
    error,
    banner,
    editing,
    liveStatus,
    send,
    stop,
    regenerate,
    saveEdit,
    setEditing,
    newChat,
    openConversation,
    dismissError,
    dismissBanner,
  };
}

export type ChatController = ReturnType<typeof useChat>;
