/** The signed-in chat: sidebar, header, conversation, composer, attached files; wires the list, the chat, its files
 * and the URL together. */
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { api } from "../api";
import { storeFromCitations } from "../citations";
import type { ConversationSearchHit } from "../conversationSearch";
import { useAttachments } from "../hooks/useAttachments";
import { useChat } from "../hooks/useChat";
import { useConversations } from "../hooks/useConversations";
import { useFileDrop } from "../hooks/useFileDrop";
import { imageProblem, isImage, MAX_IMAGES, readImage, type PendingImage } from "../images";
import { pickModel, saveCodeInterpreter, savedCodeInterpreter, saveModel } from "../prefs";
import { conversationFromHash, setConversationHash } from "../route";
import type { Citation, ConversationSummary, SessionObject } from "../types";
import { chatModels, visionModels } from "../types";
import { AttachmentChips } from "./AttachmentChips";
import { Banner } from "./Banner";
import { Composer } from "./Composer";
import { ConfirmDelete } from "./ConfirmDelete";
import { ErrorNotice } from "./ErrorNotice";
import { FilesPanel } from "./FilesPanel";
import { Header } from "./Header";
import { ImageChips } from "./ImageChips";
import { InstructionsDialog } from "./InstructionsDialog";
import { ShareDialog } from "./ShareDialog";
import { MessageList } from "./MessageList";
import { PassageDialog } from "./PassageDialog";
import { Sidebar } from "./Sidebar";
import { UsagePanel } from "./UsagePanel";

type DraftUpdate = string | ((previous: string) => string);

interface Props {
  session: SessionObject;
  draft: string;
  setDraft(update: DraftUpdate): void;
  onSignOut(): void;
}

const MOBILE = "(max-width: 768px)";

function placeholderTitle(text: string): string {
  const line = text.trim().split("\n")[0] ?? "";
  return line.length > 60 ? `${line.slice(0, 57)}…` : line || "New chat";
}

export function ChatApp({ session, draft, setDraft, onSignOut }: Props) {
  const [models, setModels] = useState<string[]>([]);
  const [seeing, setSeeing] = useState<string[]>([]); // the models that take images
  const [images, setImages] = useState<PendingImage[]>([]);
  const [imageNote, setImageNote] = useState<string | null>(null);
  const [model, setModel] = useState("");
  const [sidebarOpen, setSidebarOpen] = useState(false);
  const [usageOpen, setUsageOpen] = useState(false);
  const [deleting, setDeleting] = useState<ConversationSummary | null>(null);
  const [filesOpen, setFilesOpen] = useState(false);
  const [instructionsOpen, setInstructionsOpen] = useState(false);
  const [shareOpen, setShareOpen] = useState(false);
  const [passage, setPassage] = useState<Citation | null>(null);
  const conversations = useConversations();
  const codeOffered = (session.server_tools ?? []).includes("python");
  const [codeOn, setCodeOn] = useState(savedCodeInterpreter);
  const activeRef = useRef<string | null>(null);

  const closeSidebarOnMobile = () => {
    if (window.matchMedia?.(MOBILE).matches) setSidebarOpen(false);
  };

  const chat = useChat({
    model,
    restoreDraft: (text) =>
      setDraft((current) => {
        if (!current.trim()) return text;
        return current.includes(text) ? current : `${text}\n\n${current}`;
      }),
    clearDraftIf: (text) => setDraft((current) => (current.trim() === text.trim() ? "" : current)),
    onConversationStarted: (id, first) => {
      activeRef.current = id;
      attachments.adopt(id);
      conversations.addLocal(id, placeholderTitle(first));
      setConversationHash(id, true);
    },
    onTurnSettled: () => void conversations.refresh(),
    onConversationSeen: (conversation) => conversations.upsert(conversation),
    onConversationGone: (id) => {
      attachments.conversationGone(id);
      conversations.remove(id);
      if (conversationFromHash() === id) setConversationHash(null, true);
    },
    vectorStoreIds: () => attachments.vectorStoreIds(),
    serverTools: () => (codeOffered && codeOn ? ["python"] : []),
  });
  activeRef.current = chat.conversationId;
  const attachments = useAttachments(chat.conversationId, storeFromCitations(chat.messages));
  /** Files dropped, pasted or picked: images go with the next message (to a model that sees), documents to the
   * chat's files. */
  const addFiles = (files: File[]) => {
    const pictures = files.filter(isImage);
    const documents = files.filter((file) => !isImage(file));
    if (documents.length > 0) attachments.add(documents);
    if (pictures.length === 0) return;
    if (!seeing.includes(model)) {
      const others = seeing.length > 0 ? ` Choose one that does: ${seeing.join(", ")}.` : " No model here does.";
      setImageNote(`${model || "This model"} does not take images.${others}`);
      return;
    }
    const problems = pictures.map(imageProblem).filter((p): p is string => p !== null);
    const room = MAX_IMAGES - images.length;
    const fitting = pictures.filter((file) => imageProblem(file) === null).slice(0, Math.max(0, room));
    const over = pictures.length - problems.length - fitting.length;
    const notes = [...problems, ...(over > 0 ? [`At most ${MAX_IMAGES} images go with one message.`] : [])];
    setImageNote(notes.length > 0 ? notes.join(" ") : null);
    void Promise.all(fitting.map(readImage)).then(
      (read) => setImages((current) => [...current, ...read].slice(0, MAX_IMAGES)),
      () => setImageNote("An image could not be read."),
    );
  };
  const drop = useFileDrop(addFiles, Boolean(model) && !chat.loading);

  // Models (tier-dependent), the first page of conversations, and the conversation named in the URL.
  useEffect(() => {
    api
      .models()
      .then((list) => {
        const ids = chatModels(list.data);
        setModels(ids);
        setSeeing(visionModels(list.data));
        setModel(pickModel(ids));
      })
      .catch(() => setModels([]));
    void conversations.loadMore();
    const id = conversationFromHash();
    if (id) void chat.openConversation(id);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  // Back/forward and hand-edited URLs.
  useEffect(() => {
    const follow = () => {
      const id = conversationFromHash();
      if (id === activeRef.current) return;
      if (id) void chat.openConversation(id);
      else chat.newChat();
    };
    window.addEventListener("hashchange", follow);
    window.addEventListener("popstate", follow);
    return () => {
      window.removeEventListener("hashchange", follow);
      window.removeEventListener("popstate", follow);
    };
  }, [chat.openConversation, chat.newChat]);

  // Esc stops a streaming answer.
  useEffect(() => {
    if (!chat.streaming) return;
    const onKey = (event: KeyboardEvent) => {
      if (event.key === "Escape" && !event.defaultPrevented) {
        event.preventDefault();
        chat.stop();
      }
    };
    document.addEventListener("keydown", onKey);
    return () => document.removeEventListener("keydown", onKey);
  }, [chat.streaming, chat.stop]);

  // Escape closes the mobile menu.
  useEffect(() => {
    if (!sidebarOpen) return;
    const onKey = (event: KeyboardEvent) => {
      if (event.key === "Escape" && !event.defaultPrevented && !chat.streaming) setSidebarOpen(false);
    };
    document.addEventListener("keydown", onKey);
    return () => document.removeEventListener("keydown", onKey);
  }, [sidebarOpen, chat.streaming]);

  const selectConversation = useCallback(
    (id: string) => {
      closeSidebarOnMobile();
      if (id === activeRef.current && !chat.loading) return;
      setConversationHash(id);
      void chat.openConversation(id);
    },
    [chat.openConversation, chat.loading],
  );

  // A message the search found: its conversation, at that message (on its branch); the open one just scrolls to it
  // when it is shown.
  const openHit = useCallback(
    (hit: ConversationSearchHit) => {
      closeSidebarOnMobile();
      const id = hit.conversation_id;
      if (id === activeRef.current && !chat.loading && chat.showMessage(hit.message_id)) return;
      setConversationHash(id);
      void chat.openConversation(id, hit.message_id);
    },
    [chat.openConversation, chat.showMessage, chat.loading],
  );

  const newChat = useCallback(() => {
    closeSidebarOnMobile();
    setConversationHash(null);
    chat.newChat();
  }, [chat.newChat]);

  const rename = useCallback(
    async (id: string, title: string) => {
      const updated = await api.renameConversation(id, title);
      conversations.upsert({ ...updated, title: updated.title ?? title });
    },
    [conversations.upsert],
  );

  const confirmDelete = useCallback(async () => {
    const target = deleting;
    if (!target) return;
    await api.deleteConversation(target.id);
    attachments.conversationDeleted(target.id);
    conversations.remove(target.id);
    setDeleting(null);
    if (target.id === activeRef.current) {
      setConversationHash(null, true);
      chat.newChat();
    }
  }, [deleting, conversations.remove, chat.newChat, attachments.conversationDeleted]);

  const send = () => {
    if (chat.send(draft, images.map((image) => image.url))) {
      setDraft("");
      setImages([]);
      setImageNote(null);
    }
  };

  const active = conversations.state.items.find((c) => c.id === chat.conversationId);
  useEffect(() => {
    const title = active?.title?.trim();
    document.title = title ? `${title} · fleetchat` : "fleetchat";
  }, [active?.title]);

  return (
    <div class={`app${sidebarOpen ? " sidebar-open" : ""}`}>
      <Sidebar
        open={sidebarOpen}
        list={conversations.state}
        activeId={chat.conversationId}
        tenantName={session.tenant.name}
        onNewChat={newChat}
        onSelect={selectConversation}
        onOpenHit={openHit}
        onRename={rename}
        onDelete={setDeleting}
        onLoadMore={() => void conversations.loadMore()}
        onLoadAll={() => void conversations.loadAll()}
      />
      {sidebarOpen && <div class="scrim" aria-hidden="true" onClick={() => setSidebarOpen(false)} />}
      <main class={`main${drop.dragging ? " dragging" : ""}`} {...drop.handlers}>
        <Header
          models={models}
          model={model}
          onModel={(m) => {
            setModel(m);
            saveModel(m);
          }}
          tier={session.tenant.tier}
          exportId={chat.conversationId && chat.persisted ? chat.conversationId : null}
          sidebarOpen={sidebarOpen}
          onMenu={() => setSidebarOpen((open) => !open)}
          onUsage={() => setUsageOpen(true)}
          onFiles={() => setFilesOpen(true)}
          onInstructions={() => setInstructionsOpen(true)}
          onShare={() => setShareOpen(true)}
          onSignOut={onSignOut}
          modelDisabled={models.length === 0}
        />
        <MessageList chat={chat} onOpenCitation={setPassage} />
        <div class="composer-area">
          {chat.banner && <Banner banner={chat.banner} onDismiss={chat.dismissBanner} />}
          {chat.error && <ErrorNotice error={chat.error} onDismiss={chat.dismissError} />}
          <AttachmentChips attachments={attachments.attachments} onRemove={attachments.remove} />
          <ImageChips
            images={images}
            note={imageNote}
            onRemove={(key) => setImages((current) => current.filter((image) => image.key !== key))}
            onDismissNote={() => setImageNote(null)}
          />
          <Composer
            value={draft}
            onChange={setDraft}
            onSend={send}
            onStop={chat.stop}
            streaming={chat.streaming}
            disabled={!model || chat.loading}
            focusKey={chat.conversationId}
            onAttach={addFiles}
            code={
              codeOffered
                ? {
                    on: codeOn,
                    toggle: () =>
                      setCodeOn((on) => {
                        saveCodeInterpreter(!on);
                        return !on;
                      }),
                  }
                : undefined
            }
          />
          <p class="composer-foot">Answers can be wrong. Check important facts.</p>
        </div>
        <div class="sr-only" role="status" aria-live="polite" aria-atomic="true" data-testid="live-status">
          {chat.liveStatus}
        </div>
        {drop.dragging && (
          <div class="drop-overlay" data-testid="drop-zone" aria-hidden="true">
            Drop files to attach them to this chat
          </div>
        )}
      </main>
      {usageOpen && <UsagePanel onClose={() => setUsageOpen(false)} />}
      {instructionsOpen && (
        <InstructionsDialog
          conversationId={chat.conversationId && chat.persisted ? chat.conversationId : null}
          onClose={() => setInstructionsOpen(false)}
        />
      )}
      {shareOpen && chat.conversationId && chat.persisted && (
        <ShareDialog conversationId={chat.conversationId} onClose={() => setShareOpen(false)} />
      )}
      {filesOpen && (
        <FilesPanel onClose={() => setFilesOpen(false)} onDeleted={attachments.fileDeleted} attached={attachments.attachments} />
      )}
      {passage && <PassageDialog citation={passage} onClose={() => setPassage(null)} />}
      {deleting && <ConfirmDelete conversation={deleting} onConfirm={confirmDelete} onCancel={() => setDeleting(null)} />}
    </div>
  );
}
