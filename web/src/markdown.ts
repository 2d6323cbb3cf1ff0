/**
 * Markdown → safe HTML: marked (GFM) with highlight.js for code blocks, then DOMPurify.
 *
 * Model output is untrusted. Raw HTML in the markdown is never interpreted: it is shown as text (as ChatGPT does),
 * and everything marked produces still goes through DOMPurify (no script/style/iframe/forms, no event handlers, no
 * style attributes, links only http/https/mailto with rel="noopener noreferrer" target="_blank"). Images become
 * links (a strict CSP blocks remote images anyway, and an image URL is a data-exfiltration channel).
 *
 * renderBlocks() renders top-level blocks separately with a cache, so while an answer streams only its last block
 * is re-rendered (and re-highlighted, re-sanitized) on each frame.
 */
import DOMPurify from "dompurify";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import css from "highlight.js/lib/languages/css";
import go from "highlight.js/lib/languages/go";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import python from "highlight.js/lib/languages/python";
import rust from "highlight.js/lib/languages/rust";
import sql from "highlight.js/lib/languages/sql";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import { Marked, type Token, type Tokens, type TokensList } from "marked";

hljs.registerLanguage("python", python);
hljs.registerLanguage("javascript", javascript);
hljs.registerLanguage("typescript", typescript);
hljs.registerLanguage("bash", bash);
hljs.registerLanguage("json", json);
hljs.registerLanguage("sql", sql);
hljs.registerLanguage("xml", xml);
hljs.registerLanguage("css", css);
hljs.registerLanguage("go", go);
hljs.registerLanguage("rust", rust);
hljs.registerAliases(["sh", "shell", "zsh", "console"], { languageName: "bash" });
hljs.registerAliases(["html", "svg", "xhtml"], { languageName: "xml" });
hljs.registerAliases(["golang"], { languageName: "go" });
hljs.registerAliases(["rs"], { languageName: "rust" });
hljs.registerAliases(["postgres", "postgresql", "mysql", "sqlite"], { languageName: "sql" });

/** Auto-detect only for blocks up to this size (detection runs every registered grammar). */
const AUTODETECT_MAX_CHARS = 4000;

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

const SAFE_URL = /^(?:https?:|mailto:)/i;

function safeUrl(href: string | null | undefined): string | null {
  if (!href) return null;
  // Browsers ignore control characters and whitespace inside schemes ("java\tscript:"): strip them before checking.
  const compact = href.replace(/[\u0000-\u0020\u007f-\u009f]/g, "");
  return SAFE_URL.test(compact) ? href.trim() : null;
}

/** The language name to show for a fence's info string, and the grammar to use (if registered). */
function languageOf(lang: string | undefined): { label: string; grammar: string | null } {
  const name = (lang || "").trim().split(/\s+/)[0]?.toLowerCase() ?? "";
  if (!name) return { label: "", grammar: null };
  return { label: name, grammar: hljs.getLanguage(name) ? name : null };
}

export function highlightCode(code: string, lang?: string): { html: string; language: string } {
  const { label, grammar } = languageOf(lang);
  try {
    if (grammar) return { html: hljs.highlight(code, { language: grammar, ignoreIllegals: true }).value, language: label };
    if (!label && code.length <= AUTODETECT_MAX_CHARS && code.trim()) {
      const auto = hljs.highlightAuto(code);
      if (auto.language && auto.relevance >= 5) return { html: auto.value, language: auto.language };
    }
  } catch {
    /* fall through to plain text */
  }
  return { html: escapeHtml(code), language: label };
}

const marked = new Marked({
  gfm: true,
  breaks: false,
  async: false,
  renderer: {
    code({ text, lang }: Tokens.Code): string {
      const { html, language } = highlightCode(text.replace(/\n$/, ""), lang);
      const cls = `hljs${language ? ` language-${escapeHtml(language.replace(/[^\w+#.-]/g, ""))}` : ""}`;
      return (
        `<div class="code-block">` +
        `<div class="code-header"><span class="code-lang">${escapeHtml(language || "text")}</span>` +
        `<button type="button" class="copy-code" data-testid="copy-code" aria-label="Copy code">Copy</button></div>` +
        `<pre><code class="${cls}">${html}</code></pre></div>\n`
      );
    },
    html({ text }: Tokens.HTML | Tokens.Tag): string {
      return escapeHtml(text);
    },
    link(token: Tokens.Link): string {
      const inner = this.parser.parseInline(token.tokens);
      const href = safeUrl(token.href);
      if (!href) return `<span class="unsafe-link">${inner}</span>`;
      const title = token.title ? ` title="${escapeHtml(token.title)}"` : "";
      return `<a href="${escapeHtml(href)}"${title} target="_blank" rel="noopener noreferrer">${inner}</a>`;
    },
    image(token: Tokens.Image): string {
      const alt = escapeHtml(token.text || "image");
      const href = safeUrl(token.href);
      if (!href) return `<span class="image-alt">${alt}</span>`;
      return `<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer" class="image-link">${alt}</a>`;
    },
  },
});

const PURIFY_CONFIG = {
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i,
  FORBID_TAGS: [
    "style",
    "script",
    "iframe",
    "frame",
    "frameset",
    "object",
    "embed",
    "form",
    "input",
    "textarea",
    "select",
    "option",
    "link",
    "meta",
    "base",
    "img",
    "svg",
    "math",
    "video",
    "audio",
    "source",
    "template",
  ],
  FORBID_ATTR: ["style", "srcset", "formaction", "action", "background", "ping"],
  ADD_ATTR: ["target"],
  RETURN_TRUSTED_TYPE: false,
} as const;

let hooked = false;
function purifier(): typeof DOMPurify {
  if (!hooked) {
    hooked = true;
    DOMPurify.addHook("afterSanitizeAttributes", (node: Element) => {
      if (node.tagName === "A") {
        const href = node.getAttribute("href");
        if (!href || !safeUrl(href)) {
          node.removeAttribute("href");
          node.removeAttribute("target");
          node.removeAttribute("rel");
        } else {
          node.setAttribute("target", "_blank");
          node.setAttribute("rel", "noopener noreferrer");
        }
      }
      // No data-* attributes, except the test id of our own copy buttons.
      const ownCopyButton = node.tagName === "BUTTON" && node.classList.contains("copy-code");
      for (const name of node.getAttributeNames()) {
        if (name.startsWith("data-") && !(ownCopyButton && name === "data-testid")) node.removeAttribute(name);
      }
      if (node.tagName === "BUTTON") node.setAttribute("type", "button");
    });
  }
  return DOMPurify;
}

export function sanitize(html: string): string {
  return purifier().sanitize(html, PURIFY_CONFIG as unknown as Parameters<typeof DOMPurify.sanitize>[1]) as unknown as string;
}

/** Markdown → safe HTML (one string). */
export function renderMarkdown(text: string): string {
  return sanitize(marked.parser(marked.lexer(text)) as string);
}

export interface BlockCache {
  get(key: string): string | undefined;
  set(key: string, value: string): void;
}

/** A small LRU cache of rendered blocks. */
export class LruCache implements BlockCache {
  private readonly map = new Map<string, string>();
  constructor(private readonly max = 500) {}
  get(key: string): string | undefined {
    const value = this.map.get(key);
    if (value !== undefined) {
      this.map.delete(key);
      this.map.set(key, value);
    }
    return value;
  }
  set(key: string, value: string): void {
    this.map.set(key, value);
    if (this.map.size > this.max) {
      const oldest = this.map.keys().next().value;
      if (oldest !== undefined) this.map.delete(oldest);
    }
  }
}

const sharedCache = new LruCache();

/**
 * Markdown → safe HTML per top-level block. Unchanged blocks come from the cache, so re-rendering a growing
 * (streaming) answer costs only its last block. An unclosed code fence is just a code block running to the end.
 */
export function renderBlocks(text: string, cache: BlockCache = sharedCache): string[] {
  const tokens: TokensList = marked.lexer(text);
  const links = tokens.links;
  const linkKey = Object.keys(links).length ? JSON.stringify(links) : "";
  const blocks = tokens.filter((token) => token.type !== "space" && token.type !== "def");
  const out: string[] = [];
  blocks.forEach((token, i) => {
    const key = linkKey ? `${linkKey}\u0000${token.raw}` : token.raw;
    let html = cache.get(key);
    if (html === undefined) {
      const list = [token] as Token[] as TokensList;
      list.links = links;
      html = sanitize(marked.parser(list) as string);
      // The last block of a streaming answer changes on every frame: caching each version would only evict the
      // blocks that stay.
      if (i < blocks.length - 1) cache.set(key, html);
    }
    out.push(html);
  });
  return out;
}
