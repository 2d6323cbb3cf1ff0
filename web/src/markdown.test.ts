import { describe, expect, it } from "vitest";
import { LruCache, renderBlocks, renderMarkdown } from "./markdown";

function dom(html: string): HTMLElement {
  const div = document.createElement("div");
  div.innerHTML = html;
  return div;
}

describe("renderMarkdown: untrusted model output renders inert", () => {
  it("never produces a script element", () => {
    const root = dom(renderMarkdown("Hi <script>alert(1)</script> there\n\n<script>alert(2)</script>"));
    expect(root.querySelector("script")).toBeNull();
    expect(root.textContent).toContain("Hi");
  });

  it("never produces an element with an event handler", () => {
    const root = dom(renderMarkdown('<img src=x onerror="alert(1)">\n\ntext <b onmouseover=alert(1)>x</b>'));
    expect(root.querySelector("img")).toBeNull();
    for (const el of Array.from(root.querySelectorAll("*"))) {
      for (const attr of Array.from(el.attributes)) expect(attr.name.startsWith("on")).toBe(false);
    }
  });

  it("removes javascript: (and data:, vbscript:) links", () => {
    for (const href of ["javascript:alert(1)", "JaVaScRiPt:alert(1)", "java\tscript:alert(1)", "data:text/html,<b>", "vbscript:x"]) {
      const root = dom(renderMarkdown(`[click](${href})`));
      expect(root.textContent).toContain("click");
      for (const a of Array.from(root.querySelectorAll("a"))) {
        const value = a.getAttribute("href") ?? "";
        expect(value).not.toMatch(/script|data:/i);
      }
    }
    const auto = dom(renderMarkdown("<javascript:alert(1)>"));
    expect(auto.querySelector("a[href^='javascript']")).toBeNull();
  });

  it("keeps http(s)/mailto links, opening safely in a new tab", () => {
    const root = dom(renderMarkdown("[docs](https://example.com/x?a=1) and [mail](mailto:a@b.c) and https://auto.link"));
    const links = Array.from(root.querySelectorAll("a"));
    expect(links.map((a) => a.getAttribute("href"))).toEqual(["https://example.com/x?a=1", "mailto:a@b.c", "https://auto.link"]);
    for (const a of links) {
      expect(a.getAttribute("rel")).toBe("noopener noreferrer");
      expect(a.getAttribute("target")).toBe("_blank");
    }
  });

  it("forbids style attributes, iframes, forms and inline styles", () => {
    const root = dom(
      renderMarkdown('<p style="color:red">x</p><iframe src="https://e.com"></iframe><form><input></form><style>*{}</style>'),
    );
    expect(root.querySelector("[style], iframe, form, input, style")).toBeNull();
  });

  it("shows raw HTML as text", () => {
    const root = dom(renderMarkdown("Use <div class=x> here"));
    expect(root.textContent).toContain("<div class=x>");
    expect(root.querySelector("div.x")).toBeNull();
  });

  it("renders markdown images as links, never <img>", () => {
    const root = dom(renderMarkdown("![a cat](https://example.com/cat.png) ![x](javascript:alert(1))"));
    expect(root.querySelector("img")).toBeNull();
    expect(root.querySelector("a")?.getAttribute("href")).toBe("https://example.com/cat.png");
  });

  it("does not let model HTML forge test hooks or buttons", () => {
    const root = dom(renderMarkdown('<button data-testid="regenerate">x</button>'));
    expect(root.querySelector("[data-testid='regenerate']")).toBeNull();
    expect(root.querySelector("button")).toBeNull();
  });
});

describe("renderMarkdown: code", () => {
  it("highlights a fenced code block and adds a Copy button", () => {
    const root = dom(renderMarkdown("```python\ndef f(x):\n    return x + 1\n```"));
    const code = root.querySelector("pre > code.hljs");
    expect(code).not.toBeNull();
    expect(code!.classList.contains("language-python")).toBe(true);
    expect(code!.querySelector(".hljs-keyword")?.textContent).toBe("def");
    expect(code!.textContent).toBe("def f(x):\n    return x + 1");
    expect(root.querySelector('button[data-testid="copy-code"]')).not.toBeNull();
  });

  it.each(["javascript", "typescript", "bash", "json", "sql", "html", "xml", "css", "go", "rust", "sh"])(
    "knows %s",
    (lang) => {
      const root = dom(renderMarkdown(`\`\`\`${lang}\nx = 1\n\`\`\``));
      expect(root.querySelector("pre > code.hljs")).not.toBeNull();
    },
  );

  it("escapes HTML inside code", () => {
    const root = dom(renderMarkdown("```html\n<script>alert(1)</script>\n```\n\n`<img src=x onerror=alert(1)>`"));
    expect(root.querySelector("script, img")).toBeNull();
    expect(root.querySelector("pre code")!.textContent).toBe("<script>alert(1)</script>");
  });

  it("renders an unclosed fence (mid-stream) as a code block running to the end", () => {
    const root = dom(renderMarkdown("Here:\n\n```js\nconst a = 1;\nconst b"));
    const code = root.querySelector("pre > code.hljs");
    expect(code).not.toBeNull();
    expect(code!.textContent).toBe("const a = 1;\nconst b");
    expect(root.querySelector("p")?.textContent).toBe("Here:");
  });

  it("handles an unknown language and a bare fence", () => {
    const root = dom(renderMarkdown("```brainfuck\n+++.\n```\n\n```\nplain\n```"));
    expect(root.querySelectorAll("pre > code.hljs")).toHaveLength(2);
  });
});

describe("renderBlocks", () => {
  it("matches the one-shot render, block by block", () => {
    const text = "# Title\n\nSome *text* and [a link][1].\n\n- a\n- b\n\n```go\nfunc main() {}\n```\n\n[1]: https://example.com";
    const joined = renderBlocks(text, new LruCache()).join("");
    expect(dom(joined).textContent).toBe(dom(renderMarkdown(text)).textContent);
    expect(dom(joined).querySelector("a")?.getAttribute("href")).toBe("https://example.com");
  });

  it("re-renders only the last block while streaming", () => {
    const cache = new LruCache();
    let rendered = 0;
    const counting = {
      get: (k: string) => cache.get(k),
      set: (k: string, v: string) => {
        rendered += 1;
        cache.set(k, v);
      },
    };
    const text = "Para one.\n\nPara two.\n\nPara thr";
    renderBlocks(text, counting);
    const after = rendered;
    renderBlocks(`${text}ee is longer`, counting);
    expect(rendered).toBe(after); // the first two blocks came from the cache
  });

  it("is safe for every prefix of a tricky answer (as it streams)", () => {
    const text = 'Try `x`.\n\n```js\nalert("<b>")\n```\n\n<img src=x onerror=alert(1)> [a](javascript:alert(1)) **done**';
    for (let i = 0; i <= text.length; i++) {
      const root = dom(renderBlocks(text.slice(0, i)).join(""));
      expect(root.querySelector("script, img, [onerror], a[href^='javascript']")).toBeNull();
    }
  });
});
