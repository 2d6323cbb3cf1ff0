/**
 * A stored conversation's message tree: each message answers or follows its parent, and an edit or a regenerate adds
 * a sibling (a version) instead of replacing anything. The server sends the shown branch (`messages`, the active
 * path) and every other message (`branches`); from these the chat works out locally which path a version switch
 * shows, so that it shows it at once.
 */
import type { StoredMessage } from "./types";

export interface MessageTree {
  /** Every stored message by id. */
  nodes: Map<number, StoredMessage>;
  /** Each message's parent id (null: a first message). */
  parents: Map<number, number | null>;
  /** The ids of each message's children, ascending; the key null holds the first messages. */
  children: Map<number | null, number[]>;
}

/** A message's id: the server's, else (an older gateway, one chain) its position in the active path. */
export function idOf(message: StoredMessage, position: number): number {
  return typeof message.id === "number" ? message.id : position;
}

/**
 * The tree over the active path and the branches. A message without a `parent_id` follows the one before it in the
 * active path (an older gateway's chain); a branch message without one is left out (nothing says where it goes).
 */
export function buildTree(messages: StoredMessage[], branches: StoredMessage[] = []): MessageTree {
  const nodes = new Map<number, StoredMessage>();
  const parents = new Map<number, number | null>();
  let previous: number | null = null;
  messages.forEach((message, position) => {
    const id = idOf(message, position);
    nodes.set(id, message);
    parents.set(id, message.parent_id !== undefined ? message.parent_id : previous);
    previous = id;
  });
  for (const message of branches) {
    if (typeof message.id !== "number" || message.parent_id === undefined || nodes.has(message.id)) continue;
    nodes.set(message.id, message);
    parents.set(message.id, message.parent_id);
  }
  const children = new Map<number | null, number[]>();
  for (const [id, parent] of parents) {
    const list = children.get(parent);
    if (list) list.push(id);
    else children.set(parent, [id]);
  }
  for (const list of children.values()) list.sort((a, b) => a - b);
  return { nodes, parents, children };
}

/** The ids of the message's versions (its parent's children, ascending, itself included); [] when unknown. */
export function siblingsOf(tree: MessageTree, id: number): number[] {
  if (!tree.parents.has(id)) return [];
  return tree.children.get(tree.parents.get(id)!) ?? [];
}

/** The highest-id leaf at or below `id` (where that branch was last written); `id` itself when it has no children. */
export function newestLeafUnder(tree: MessageTree, id: number): number {
  let newest = -1;
  const stack = [id];
  while (stack.length > 0) {
    const current = stack.pop()!;
    const below = tree.children.get(current);
    if (below && below.length > 0) stack.push(...below);
    else newest = Math.max(newest, current);
  }
  return newest;
}

/** The messages from the first one down to `leaf`, in order; [] when `leaf` is not in the tree. */
export function pathTo(tree: MessageTree, leaf: number): { id: number; message: StoredMessage }[] {
  const path: { id: number; message: StoredMessage }[] = [];
  const seen = new Set<number>();
  let current: number | null = leaf;
  while (current !== null && tree.nodes.has(current) && !seen.has(current)) {
    seen.add(current);
    path.push({ id: current, message: tree.nodes.get(current)! });
    current = tree.parents.get(current) ?? null;
  }
  return current === null ? path.reverse() : [];
}

/**
 * The path a version switch shows: `id`'s sibling `delta` places along (clamped to none past the ends), then down
 * to that sibling's newest leaf. Null when there is no such sibling.
 */
export function switchedPath(
  tree: MessageTree,
  id: number,
  delta: number,
): { target: number; leaf: number; index: number; count: number; path: { id: number; message: StoredMessage }[] } | null {
  const siblings = siblingsOf(tree, id);
  const index = siblings.indexOf(id) + delta;
  if (siblings.indexOf(id) < 0 || delta === 0 || index < 0 || index >= siblings.length) return null;
  const target = siblings[index]!;
  const leaf = newestLeafUnder(tree, target);
  const path = pathTo(tree, leaf);
  return path.length > 0 ? { target, leaf, index, count: siblings.length, path } : null;
}
