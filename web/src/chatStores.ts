/**
 * Which vector store holds a conversation's attached files: remembered in this browser (localStorage, beside the
 * other UI preferences; ids only, never content). Another browser finds the store again from the conversation's
 * stored citations (src/citations.ts, storeFromCitations).
 */

const KEY = "fleetchat.chatStores";
const MAX_ENTRIES = 500; // the oldest go first; a forgotten store is found again from citations

type StoreMap = Record<string, string>;

function read(): StoreMap {
  try {
    const parsed = JSON.parse(localStorage.getItem(KEY) || "{}") as unknown;
    return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as StoreMap) : {};
  } catch {
    return {};
  }
}

function write(map: StoreMap): void {
  try {
    const entries = Object.entries(map);
    localStorage.setItem(KEY, JSON.stringify(Object.fromEntries(entries.slice(-MAX_ENTRIES))));
  } catch {
    /* storage full or disabled: the store is found again from citations */
  }
}

export function storeFor(conversationId: string): string | null {
  const value = read()[conversationId];
  return typeof value === "string" && value.startsWith("vs_") ? value : null;
}

export function rememberStore(conversationId: string, storeId: string): void {
  const map = read();
  delete map[conversationId]; // re-inserted last: the newest entry
  map[conversationId] = storeId;
  write(map);
}

export function forgetStore(conversationId: string): void {
  const map = read();
  if (conversationId in map) {
    delete map[conversationId];
    write(map);
  }
}
