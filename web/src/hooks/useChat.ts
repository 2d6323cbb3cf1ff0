/**
 * The open conversation and its turns: send, stream (batched per animation frame), stop, regenerate, edit and
 * resend, retry; the versions an edit or a regenerate leaves (switched locally, then saved as the conversation's
 * shown branch); errors a person can act on; banners from the response headers. Nothing typed is ever lost: a
 * request that fails before its answer starts puts the text back where it was typed.
 */
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { api, ApiError } from "../api";
import {
  fromStored,
  lastStoredId,
  lastUserIndex,
  markTurnUnsaved,
  newKey,
  nextPosition,
  reconcile,
  replaceIndex,
  showsTurn,
  switchVersion,
  withoutReplaceMarks,
  type StoreMark,
  type UiMessage,
} from "../chatModel";
import { describeError, type ErrorView } from "../errors";
import { buildTree, idOf, type MessageTree } from "../messageTree";
import { messageContent } from "../images";
import { markFirstTokenReceived, resetFirstTokenMarks } from "../perf";
import { openChatStream, type ChatStream } from "../stream";
import { unfinished, upsertRun } from "../toolRuns";
import { turnOutcome } from "../turnOutcome";
import type { ChatRequestBody, Conversation, ConversationSummary, ServerToolRun } from "../types";

/** After a Stop (or a lost connection) the server saves the answer once it notices: look this often, this long. */
export const SAVE_POLL_MS = 500;
export const SAVE_WAIT_MS = 10_000;
/** After a Stop before the answer started: when to look whether the request reached the server anyway. */
export const EARLY_STOP_SYNC_MS = 1000;

/** A turn that ended without the server saying whether it saved it (Stop, lost connection). */
interface PendingSave {
  conversationId: string;
  /** What the server held before the turn. */
  before: StoreMark;
  /** The stored count (`message_count`) with the turn saved, when predictable (not for a replace). */
  expectCount: number | null;
  userKey: string;
  answerKey: string;
  /** The turn was a replace (edit, regenerate) of the stored user message with this id. */
  replaceFrom?: number;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}

function markOf(conversation: Conversation): StoreMark {
  return {
    version: typeof conversation.version === "number" ? conversation.version : null,
    count:
      typeof conversation.message_count === "number"
        ? conversation.message_count
        : conversation.messages.length + (conversation.branches?.length ?? 0),
  };
}

export interface ChatError {
  key: string;
  view: ErrorView;
  retry: (() => void) | null;
}

export interface BannerState {
  brownout: boolean;
  fallback: { used: string; requested: string } | null;
}

/** A message to bring into view and mark for a moment (one found by the search); `seq` tells each request apart. */
export interface FoundMessage {
  id: number;
  seq: number;
}

export interface EditingState {
  key: string;
  draft: string;
}

type Origin = "composer" | "regenerate" | "edit" | "retry";

interface TurnSpec {
  mode: "new" | "continue" | "replace";
  text: string;
  /** The images sent with the text (data URIs); none: the user message's own, when it is resent. */
  images?: string[];
  model: string;
  conversationId: string | null;
  /** For "replace": the id of the stored user message this turn makes a new version of (or, same text, answers anew). */
  replaceFrom?: number;
  /** For "continue": the id of the stored message it follows (the last one shown); none: the active leaf. */
  parentId?: number;
  /** The turn's user message's predicted position in the shown branch, when known. */
  position: number | null;
  /** A regenerate of a stored user message: that message, kept as it is (only the answer is new). */
  user?: UiMessage;
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
  /** The vector stores a turn should search (the conversation's attached files); none: no retrieval. */
  vectorStoreIds?(): string[];
  /** The gateway's own tools a turn may use (`python`: the code interpreter, when switched on); none: no tools. */
  serverTools?(): string[];
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
  const [editing, setEditingState] = useState<EditingState | null>(null);
  const [liveStatus, setLiveStatus] = useState("");
  // Stored messages the last answer's prompt left out (the conversation outgrew the model's context).
  const [outOfContext, setOutOfContext] = useState(0);
  const [found, setFound] = useState<FoundMessage | null>(null);
  const foundSeq = useRef(0);

  const messagesRef = useRef<UiMessage[]>([]);
  const conversationRef = useRef<string | null>(null);
  const persistedRef = useRef(false);
  /** The id a new chat got from its first response, until the server is known to hold it. */
  const newChatId = useRef<string | null>(null);
  const loadingRef = useRef(false);
  /** The server's stored list (how many it holds, branches included, and the conversation's version), when known. */
  const known = useRef<StoreMark>({ version: 0, count: 0 });
  /** The message tree as the server last said (the shown branch and the others): version switches are worked out on it. */
  const tree = useRef<MessageTree>(buildTree([]));
  const editingRef = useRef<EditingState | null>(null);
  /** Bumped by each version switch: a read of the server begun before it no longer says what is shown. */
  const switchSeq = useRef(0);
  /** A read of the server was set aside for a switch: the switch reads it again once it is saved. */
  const staleRead = useRef(false);
  /** The last version switch being saved: the next one is saved after it (the server keeps the order). */
  const switching = useRef<Promise<void> | null>(null);
  const controllerRef = useRef<AbortController | null>(null);
  /** The running answer's request id: Stop cancels it on the server (closing the connection alone is a drop). */
  const requestIdRef = useRef<string | null>(null);
  /** Bumped whenever the view switches conversation: late async results for another view are dropped. */
  const viewSeq = useRef(0);
  /** Reading the server's copy back after a turn: the next send, regenerate or edit waits for it. */
  const reconciling = useRef<Promise<void> | null>(null);
  /** Cancels the wait for a stopped turn to be saved (the view switched). */
  const saveWait = useRef<AbortController | null>(null);
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
  const setEditing = useCallback((value: EditingState | null) => {
    editingRef.current = value;
    setEditingState(value);
  }, []);
  /** What the server holds now: its counts and its message tree. */
  const learn = useCallback((conversation: Conversation | StoreMark) => {
    if ("messages" in conversation) {
      known.current = markOf(conversation);
      tree.current = buildTree(conversation.messages, conversation.branches ?? []);
    } else {
      known.current = conversation;
    }
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

  /**
   * Read the stored conversation and line the view up with it (ids and versions for edit, regenerate and the version
   * switches). A read that a version switch overtook (made, or still being saved, meanwhile) may show the branch from
   * before it: set aside, and read again once the switch is saved (`afterSwitch`: that read).
   */
  const syncWithServer = useCallback(
    async (id: string, afterSwitch = false): Promise<boolean> => {
      const seq = viewSeq.current;
      const switchAt = switchSeq.current;
      try {
        const conversation = await api.getConversation(id);
        if (seq !== viewSeq.current || controllerRef.current) return false;
        if (!afterSwitch && (switchAt !== switchSeq.current || switching.current !== null)) {
          staleRead.current = true;
          return false;
        }
        setMessages(reconcile(messagesRef.current, conversation.messages, conversation.branches));
        learn(conversation);
        setPersisted(true);
        opts.current.onConversationSeen(conversation);
        return true;
      } catch {
        return false; // not there (a new chat whose first turn was not saved) or unreachable: the view stays
      }
    },
    [learn, setMessages, setPersisted],
  );

  /** The next send, regenerate or edit waits for `run` (and for whatever it already waited for). */
  const track = useCallback((run: Promise<void>) => {
    const previous = reconciling.current;
    const all = previous ? Promise.all([previous, run]).then(() => undefined) : run;
    reconciling.current = all;
    void all.finally(() => {
      if (reconciling.current === all) reconciling.current = null;
    });
  }, []);

  const scheduleSync = useCallback(
    (id: string, delayMs: number) => {
      const seq = viewSeq.current;
      track(
        new Promise<void>((resolve) => {
          setTimeout(() => {
            if (seq !== viewSeq.current) return resolve();
            void syncWithServer(id).finally(resolve);
          }, delayMs);
        }),
      );
    },
    [syncWithServer, track],
  );

  /**
   * A turn ended without the server saying whether it saved it (Stop, lost connection): the server saves it once it
   * notices, if anything was streamed. Read the conversation every SAVE_POLL_MS until it shows the turn (its version
   * moved on), then line the view up with it; if it never does within SAVE_WAIT_MS, the turn is not stored (a
   * replace keeps its `replace_from` index for a retry). Sends, regenerates and edits wait for this.
   */
  const awaitSave = useCallback(
    (pending: PendingSave) => {
      const seq = viewSeq.current;
      saveWait.current?.abort();
      const cancel = new AbortController();
      saveWait.current = cancel;
      const current = () => seq === viewSeq.current && !cancel.signal.aborted;
      const run = (async () => {
        const deadline = Date.now() + SAVE_WAIT_MS;
        let last: Conversation | null = null;
        while (Date.now() < deadline) {
          await sleep(SAVE_POLL_MS, cancel.signal);
          if (!current()) return;
          let conversation: Conversation;
          try {
            conversation = await api.getConversation(pending.conversationId);
          } catch {
            continue; // not there yet (a new chat is created when its first turn is saved) or unreachable
          }
          if (!current() || controllerRef.current) return;
          last = conversation;
          if (showsTurn(pending.before, conversation, pending.expectCount)) {
            setMessages(reconcile(messagesRef.current, conversation.messages, conversation.branches));
            learn(conversation);
            setPersisted(true);
            opts.current.onConversationSeen(conversation);
            return;
          }
        }
        if (!current() || controllerRef.current) return;
        // Never saved (nothing was streamed before the Stop): the turn is shown but not stored.
        setMessages(markTurnUnsaved(messagesRef.current, pending.userKey, pending.answerKey, pending.replaceFrom));
        if (last) {
          learn(last);
          setPersisted(true);
          opts.current.onConversationSeen(last);
        } else {
          learn(pending.before);
        }
      })();
      void run.finally(() => {
        if (saveWait.current === cancel) saveWait.current = null;
      });
      track(run);
    },
    [learn, setMessages, setPersisted, track],
  );

  /** Nothing was answered: put the text back where it was typed. */
  const restoreInput = useCallback((spec: TurnSpec) => {
    if (spec.origin === "composer") opts.current.restoreDraft(spec.text);
    if (spec.origin === "edit" && spec.editKey) setEditing({ key: spec.editKey, draft: spec.text });
  }, [setEditing]);

  const runTurn = useCallback(
    async (spec: TurnSpec): Promise<void> => {
      if (controllerRef.current) return;
      const seq = viewSeq.current;
      resetFirstTokenMarks();
      setError(null);
      setBanner(null);
      setEditing(null);
      const predicted = spec.mode === "new" ? 0 : (spec.position ?? undefined);
      const images = spec.images ?? spec.user?.images ?? [];
      const user: UiMessage = spec.user ?? {
        key: newKey("u"),
        role: "user",
        content: spec.text,
        storedIndex: predicted,
        ...(images.length > 0 ? { images } : {}),
      };
      const userKey = user.key;
      const answerKey = newKey("a");
      const before: StoreMark = spec.mode === "new" ? { version: 0, count: 0 } : { ...known.current };
      setMessages([...spec.keep, user, { key: answerKey, role: "assistant", content: "", status: "streaming" }]);
      const controller = new AbortController();
      controllerRef.current = controller;
      setStreaming(true);
      setLiveStatus("Generating an answer…");

      const body: ChatRequestBody = {
        model: spec.model,
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: "user", content: messageContent(spec.text, images) }],
      };
      if (spec.mode === "new") body.store = true;
      else {
        body.conversation_id = spec.conversationId!;
        if (spec.mode === "replace") body.replace_from = spec.replaceFrom!;
        else if (spec.parentId !== undefined) body.parent_message_id = spec.parentId;
      }
      const stores = opts.current.vectorStoreIds?.() ?? [];
      if (stores.length > 0) body.vector_store_ids = stores;
      const tools = opts.current.serverTools?.() ?? [];
      if (tools.length > 0) body.server_tools = tools;

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
        if (seq !== viewSeq.current) {
          // Another conversation was opened before the answer started: keep what was typed.
          if (spec.origin === "composer" || spec.origin === "edit") opts.current.restoreDraft(spec.text);
          return;
        }
        // Nothing was answered (stopped, or failed, before the answer started): back to how it was, and the text back
        // where it was typed.
        setMessages(spec.snapshot);
        restoreInput(spec);
        if (controller.signal.aborted) {
          setLiveStatus("Stopped.");
          // The request may have reached the server all the same: look at what it holds before the next turn.
          if (spec.mode !== "new" && spec.conversationId) scheduleSync(spec.conversationId, EARLY_STOP_SYNC_MS);
          return;
        }
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
      requestIdRef.current = meta.requestId;
      let convId = spec.conversationId;
      // A new chat learns its id from the headers (or, failing that, from the closing chunk); a view that moved on
      // does not adopt it.
      const adopt = (id: string) => {
        if (seq !== viewSeq.current) return;
        convId = id;
        newChatId.current = id;
        setConversationId(id);
        opts.current.onConversationStarted(id, spec.text);
      };
      if (spec.mode === "new" && meta.conversationId) adopt(meta.conversationId);
      if (meta.care) patchMessage(answerKey, { care: true });
      if (meta.brownout || meta.fallbackModel) {
        setBanner({
          brownout: meta.brownout,
          fallback: meta.fallbackModel ? { used: meta.fallbackModel, requested: spec.model } : null,
        });
      }

      let content = "";
      let reasoning = "";
      let runs: ServerToolRun[] = [];
      let finish: string | null = null;
      let streamError: ApiError | null = null;
      let ended: "done" | "disconnected" | null = null;
      let stored: boolean | null = meta.stored;
      let savedVersion: number | null = null;
      let savedIds: number[] = [];
      let leftOut: number | null = null;
      let frame = 0;
      let first = true;
      let reconnecting = false;
      const flush = () => {
        frame = 0;
        patchMessage(answerKey, reasoning ? { content, reasoning } : { content });
      };
      try {
        for await (const event of stream.events) {
          switch (event.type) {
            case "delta":
              content += event.content;
              if (reconnecting) {
                reconnecting = false;
                setLiveStatus("Generating an answer…");
              }
              if (first) {
                first = false;
                markFirstTokenReceived();
                flush(); // the first token is shown at once; later ones once per frame
              } else if (!frame) {
                frame = requestAnimationFrame(flush);
              }
              break;
            case "reasoning":
              reasoning += event.content;
              if (!frame) frame = requestAnimationFrame(flush);
              break;
            case "tool_run":
              runs = upsertRun(runs, event.run);
              patchMessage(answerKey, { toolRuns: runs });
              setLiveStatus(event.run.status === "running" ? "Running code…" : "Generating an answer…");
              break;
            case "finish":
              finish = event.reason;
              break;
            case "retrieval": {
              const cited = event.report.citations ?? [];
              patchMessage(answerKey, {
                citations: cited.length > 0 ? cited : undefined,
                retrieval: { status: event.report.status, reason: event.report.reason ?? null },
              });
              break;
            }
            case "conversation":
              leftOut = event.conversation.out_of_context ?? 0;
              stored = event.conversation.stored !== false;
              savedVersion = typeof event.conversation.version === "number" ? event.conversation.version : null;
              savedIds = event.conversation.message_ids ?? [];
              if (!convId && event.conversation.id) adopt(event.conversation.id);
              break;
            case "error":
              streamError = event.error;
              break;
            case "done":
              ended = "done";
              break;
            case "reconnecting":
              reconnecting = true;
              setLiveStatus("Connection lost. Reconnecting…");
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
      // A run the stream never saw end (the answer failed, was stopped or lost mid-run) is not left "running".
      if (runs.some((run) => run.status === "running")) patchMessage(answerKey, { toolRuns: unfinished(runs) });
      if (requestIdRef.current === meta.requestId) requestIdRef.current = null;
      release();
      if (seq !== viewSeq.current) return;
      if (leftOut !== null) setOutOfContext(leftOut);

      const aborted = controller.signal.aborted;
      const { status, view, savedTurn, notSaved, unknown, liveStatus } = turnOutcome({
        aborted,
        streamError,
        ended,
        finish,
        stored,
      });
      // The stored ids of the turn's new messages: the user message (not for a regenerate, which keeps it), the answer.
      const answerId = savedTurn && savedIds.length > 0 ? savedIds[savedIds.length - 1] : undefined;
      const userId = savedTurn && !spec.user && savedIds.length > 1 ? savedIds[0] : undefined;
      patchMessage(answerKey, {
        content,
        status,
        finishReason: aborted ? "stopped" : finish,
        notSaved,
        errorText: view ? `${view.title}: ${view.detail}` : undefined,
        storedIndex: savedTurn && predicted !== undefined ? predicted + 1 : undefined,
        nodeId: answerId,
      });
      if (!savedTurn && !spec.user) patchMessage(userKey, { storedIndex: undefined });
      if (userId !== undefined) patchMessage(userKey, { nodeId: userId });
      if (savedTurn) {
        setPersisted(true);
        const added = savedIds.length > 0 ? savedIds.length : spec.user ? 1 : 2;
        learn({ version: savedVersion, count: before.count !== null ? before.count + added : null });
      }
      setLiveStatus(liveStatus);
      if (view) {
        setError({ key: newKey("e"), view, retry: view.canRetry ? () => void resendRef.current("retry") : null });
      }
      if (convId) {
        opts.current.onTurnSettled(convId);
        if (unknown) {
          awaitSave({
            conversationId: convId,
            before,
            expectCount: spec.mode !== "replace" && before.count !== null ? before.count + 2 : null,
            userKey,
            answerKey,
            replaceFrom: spec.mode === "replace" ? spec.replaceFrom : undefined,
          });
        } else {
          scheduleSync(convId, 0);
        }
      }
    },
    [awaitSave, learn, patchMessage, restoreInput, scheduleSync, setConversationId, setEditing, setMessages, setPersisted],
  );

  /**
   * Ask again for the last turn (Regenerate, or Retry after an answer failed mid-stream): replace it when the server
   * holds it, else send it again as a new turn.
   */
  const resendLastTurn = useCallback(
    async (origin: Origin): Promise<void> => {
      if (controllerRef.current) return;
      const viewAtStart = viewSeq.current;
      if (reconciling.current) await reconciling.current;
      // Another conversation opened (or is loading) meanwhile: this one's turn is not asked again there.
      if (viewAtStart !== viewSeq.current || loadingRef.current || controllerRef.current) return;
      let msgs = messagesRef.current;
      let index = lastUserIndex(msgs);
      if (index < 0) return;
      let user = msgs[index]!;
      const model = opts.current.model;
      const convId = conversationRef.current;
      if (convId && replaceIndex(user) === undefined) {
        const seq = viewSeq.current;
        try {
          const conversation = await api.getConversation(convId);
          if (seq !== viewSeq.current) return;
          msgs = reconcile(msgs, conversation.messages, conversation.branches);
          setMessages(msgs);
          learn(conversation);
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
              images: user.images,
              model,
              conversationId: null,
              position: 0,
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
        await runTurn({ mode: "new", text: user.content,
              images: user.images, model, conversationId: null, position: 0, keep, snapshot: msgs, origin });
      } else if (replaceIndex(user) !== undefined) {
        // A stored user message is kept and gets a new answer (a version beside the old one); an unsaved edit is sent
        // again as a new version of the message it was to replace.
        await runTurn({
          mode: "replace",
          text: user.content,
              images: user.images,
          model,
          conversationId: convId,
          replaceFrom: replaceIndex(user)!,
          position: user.storedIndex ?? nextPosition(keep) ?? null,
          user: user.nodeId !== undefined ? user : undefined,
          keep,
          snapshot: msgs,
          origin,
        });
      } else {
        await runTurn({
          mode: "continue",
          text: user.content,
              images: user.images,
          model,
          conversationId: convId,
          parentId: lastStoredId(keep),
          position: nextPosition(keep) ?? null,
          keep,
          snapshot: msgs,
          origin,
        });
      }
    },
    [learn, runTurn, setConversationId, setMessages, setPersisted],
  );
  resendRef.current = resendLastTurn;

  /** Send the composer's text (and images); false when it cannot be sent now. */
  const send = useCallback(
    (text: string, images: string[] = []): boolean => {
      if (controllerRef.current || loadingRef.current || !text.trim() || !opts.current.model) return false;
      const seq = viewSeq.current;
      const go = () => {
        if (seq !== viewSeq.current || loadingRef.current || controllerRef.current) {
          // Another conversation was opened meanwhile (or a turn is running): not sent; the text goes back.
          opts.current.restoreDraft(text);
          return;
        }
        // A message after an unsaved edit continues what the server holds (the unsaved turn stays shown, unstored).
        const msgs = withoutReplaceMarks(messagesRef.current);
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
          images,
          model: opts.current.model,
          conversationId: continuing ? convId : null,
          parentId: continuing ? lastStoredId(msgs) : undefined,
          position: continuing ? (nextPosition(msgs) ?? null) : 0,
          keep: msgs,
          snapshot: msgs,
          origin: "composer",
        });
      };
      // After a stopped answer the server's copy is still being read back: wait for it (it decides continue/new).
      if (reconciling.current) void reconciling.current.then(go, go);
      else go();
      return true;
    },
    [runTurn, setConversationId],
  );

  const regenerate = useCallback(() => void resendLastTurn("regenerate"), [resendLastTurn]);

  const saveEdit = useCallback(
    async (key: string, text: string): Promise<void> => {
      if (controllerRef.current || !text.trim()) return;
      const seq = viewSeq.current;
      const original = messagesRef.current.find((m) => m.key === key)?.content;
      if (reconciling.current) await reconciling.current;
      if (seq !== viewSeq.current) {
        // Another conversation was opened meanwhile: the edit box is gone, keep the edited text in the composer.
        if (text.trim() !== original?.trim()) opts.current.restoreDraft(text);
        return;
      }
      if (loadingRef.current || controllerRef.current) return;
      const msgs = messagesRef.current;
      const index = msgs.findIndex((m) => m.key === key);
      const message = msgs[index];
      const convId = conversationRef.current;
      const from = message ? replaceIndex(message) : undefined;
      if (!message || from === undefined || !convId) return;
      await runTurn({
        mode: "replace",
        text,
        images: message.images,
        model: opts.current.model,
        conversationId: convId,
        replaceFrom: from,
        position: message.storedIndex ?? nextPosition(msgs.slice(0, index)) ?? null,
        keep: msgs.slice(0, index),
        snapshot: msgs,
        origin: "edit",
        editKey: key,
      });
    },
    [runTurn],
  );

  /**
   * Show another version of a message (`delta` -1: the previous, +1: the next) and the branch below it down to where
   * it was last written, worked out from the tree the server last sent: shown at once and announced, then saved as
   * the conversation's shown branch (the next send, regenerate or edit waits for that). If the save fails, or the
   * server says the branch goes on further than the view knew, the view is read again from the server. Not while an
   * answer streams, an edit is open or the conversation loads; false when nothing was switched.
   */
  const selectVersion = useCallback(
    (key: string, delta: number): boolean => {
      if (controllerRef.current || loadingRef.current || editingRef.current) return false;
      const convId = conversationRef.current;
      if (!convId || !persistedRef.current) return false;
      const switched = switchVersion(messagesRef.current, tree.current, key, delta);
      if (!switched) return false;
      setMessages(switched.messages);
      setLiveStatus(`Version ${switched.position} of ${switched.count}`);
      const seq = viewSeq.current;
      const mine = ++switchSeq.current;
      const previous = switching.current;
      const run = (async () => {
        if (previous) await previous;
        if (seq !== viewSeq.current || mine !== switchSeq.current) return; // a later switch saves what is shown
        let saved: number | null = null;
        try {
          saved = (await api.setCurrentNode(convId, switched.leaf)).current_node ?? null;
        } catch {
          saved = null;
        }
        if (seq !== viewSeq.current || mine !== switchSeq.current) return;
        if (saved === switched.leaf && !staleRead.current) return;
        staleRead.current = false;
        await syncWithServer(convId, true);
        if (saved === null && seq === viewSeq.current && mine === switchSeq.current) {
          setLiveStatus("The version could not be switched.");
        }
      })();
      switching.current = run;
      void run.finally(() => {
        if (switching.current === run) switching.current = null;
      });
      track(run);
      return true;
    },
    [setMessages, syncWithServer, track],
  );

  const stop = useCallback(() => {
    // The server keeps generating a dropped answer for a while (so a network blip can resume it): Stop says stop.
    const requestId = requestIdRef.current;
    if (requestId && controllerRef.current) void api.cancelCompletion(requestId).catch(() => undefined);
    controllerRef.current?.abort();
  }, []);

  const resetView = useCallback(() => {
    controllerRef.current?.abort();
    viewSeq.current += 1;
    saveWait.current?.abort();
    saveWait.current = null;
    reconciling.current = null;
    switching.current = null;
    staleRead.current = false;
    newChatId.current = null;
    setError(null);
    setBanner(null);
    setEditing(null);
    setLiveStatus("");
    setFound(null);
  }, [setEditing]);

  const newChat = useCallback(() => {
    resetView();
    setOutOfContext(0);
    setConversationId(null);
    setMessages([]);
    setPersisted(false);
    learn({ version: 0, count: 0 });
    tree.current = buildTree([]);
    loadingRef.current = false;
    setLoading(false);
  }, [learn, resetView, setConversationId, setMessages, setPersisted]);

  /** Bring the shown message with this stored id into view and mark it; false when it is not shown. */
  const showMessage = useCallback((messageId: number): boolean => {
    if (!messagesRef.current.some((m) => m.nodeId === messageId)) return false;
    foundSeq.current += 1;
    setFound({ id: messageId, seq: foundSeq.current });
    setLiveStatus("Showing the message found.");
    return true;
  }, []);

  /**
   * Open a stored conversation. With `messageId` (a message the search found, on any branch): show the branch through
   * it (saved as the conversation's shown branch, as a version switch is, when it is not the one shown), then bring
   * it into view and mark it.
   */
  const openConversation = useCallback(
    async (id: string, messageId?: number): Promise<void> => {
      resetView();
      setOutOfContext(0); // until the conversation is read: it says how many its last answer left out
      const seq = viewSeq.current;
      setConversationId(id);
      setMessages([]);
      setPersisted(false);
      learn({ version: null, count: null });
      tree.current = buildTree([]);
      loadingRef.current = true;
      setLoading(true);
      try {
        let conversation = await api.getConversation(id);
        if (seq !== viewSeq.current) return;
        const onPath = (c: Conversation) => c.messages.some((m, position) => idOf(m, position) === messageId);
        if (messageId !== undefined && !onPath(conversation) && conversation.branches?.some((m) => m.id === messageId)) {
          // On another branch: the server shows the branch through it, down to where that branch was last written.
          try {
            await api.setCurrentNode(id, messageId);
            const switched = await api.getConversation(id);
            if (seq !== viewSeq.current) return;
            conversation = switched;
          } catch {
            if (seq !== viewSeq.current) return; // the branch shown stays; the message is not in view
          }
        }
        setMessages(fromStored(conversation.messages));
        setOutOfContext(conversation.out_of_context ?? 0);
        learn(conversation);
        setPersisted(true);
        opts.current.onConversationSeen(conversation);
        if (messageId !== undefined && !showMessage(messageId)) setLiveStatus("The message found is no longer shown.");
      } catch (err) {
        if (seq !== viewSeq.current) return;
        const view = describeError(err);
        if (err instanceof ApiError && (err.status === 404 || err.status === 400)) {
          setConversationId(null);
          opts.current.onConversationGone(id);
          setError({ key: newKey("e"), view: { ...view, title: "Conversation not found" }, retry: null });
        } else if (!(err instanceof ApiError && err.status === 401)) {
          setError({ key: newKey("e"), view, retry: () => void openConversation(id, messageId) });
        }
      } finally {
        if (seq === viewSeq.current) {
          loadingRef.current = false;
          setLoading(false);
        }
      }
    },
    [learn, resetView, setConversationId, setMessages, setPersisted, showMessage],
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
    outOfContext,
    found,
    send,
    stop,
    regenerate,
    saveEdit,
    selectVersion,
    setEditing,
    newChat,
    openConversation,
    showMessage,
    dismissError,
    dismissBanner,
  };
}

export type ChatController = ReturnType<typeof useChat>;
