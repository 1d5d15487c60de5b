"""Switching the page's language in place, without a reload: the browser side (a head script) and what the server
sends back.

Static text (``gr.I18n`` keys) is translated in the browser by gradio's svelte-i18n store. Gradio offers no public
way to set that store (its own Settings panel calls ``changeLocale``, an export of its ``core-*.js`` bundle), and it
picks its locale among its own languages (Georgian is not one) before the page's head scripts run. The head script
therefore reaches ``changeLocale`` itself: an ES module is one instance per URL, so importing the already loaded
bundle again returns the same store. ``tests/test_i18n.py`` checks that the installed bundle still exports it.

Two things the store does not redo by itself: the tab labels (gradio translates each tab's label once, when it
builds the page, except for the tab on screen), and the text the server wrote in the old language (status line,
estimate, plots). On a switch the server sends each tab its label again (an update of a tab makes gradio translate
its label anew, with the locale now set) and writes its own text again; see ``rloo_demo.ui.app``.
"""

from __future__ import annotations

import gradio as gr

from rloo_demo import i18n
from rloo_demo.ui.common import L

# Choice: the header selector's (kept in localStorage), else the browser's first language we have, else English.
# ``rlooLocale()`` resolves to it once gradio's store holds it (read on page load, to tell the server which language
# to write its text in); ``rlooSetLocale(code)`` keeps a choice and switches the page to it.
HEAD = f"""<script>
(() => {{
  const LOCALES = {list(i18n.LOCALES)!r};
  const KEY = "{i18n.STORAGE_KEY}";
  const pick = () => {{
    let stored = null;
    try {{ stored = localStorage.getItem(KEY); }} catch (e) {{}}
    if (LOCALES.includes(stored)) return stored;
    const wanted = navigator.languages && navigator.languages.length ? navigator.languages : [navigator.language];
    for (const lang of wanted) {{
      const code = String(lang || "").toLowerCase().split("-")[0];
      if (LOCALES.includes(code)) return code;
    }}
    return "en";
  }};
  const core = () => {{
    const url = performance.getEntriesByType("resource").map((e) => e.name)
      .find((u) => /\\/assets\\/core-[^/]*\\.js$/.test(u));
    return url ? import(url) : Promise.reject(new Error("gradio's core bundle is not loaded"));
  }};
  const apply = (code) => core().then((m) => m.changeLocale && m.changeLocale(code));
  const show = (code) => {{
    document.documentElement.lang = code;
    return apply(code).catch(() => {{}});
  }};
  const first = show(pick());
  window.rlooLocale = () => first.then(pick);
  window.rlooSetLocale = (code) => {{
    if (!LOCALES.includes(code)) return Promise.resolve();
    try {{ localStorage.setItem(KEY, code); }} catch (e) {{}}
    return show(code);
  }};
}})();
</script>"""

# On load the page sends its language with the client id (an event's ``js`` replaces the values sent), once gradio
# holds it: the tab labels the server sends back are translated with the locale set then.
LOAD_JS = "async (cid, lang) => [cid, window.rlooLocale ? await window.rlooLocale() : 'en']"
# The selector's event: switch the browser's texts first (awaited), then the server writes its own in the choice.
# The other inputs go to the server as they are.
CHOOSE_JS = "async (lang, ...rest) => { await window.rlooSetLocale?.(lang); return [lang, ...rest]; }"


def tab_labels(tabs: dict[str, gr.Tab]) -> dict:
    """Every tab's label sent again (``{label's text key: tab}``): gradio translates an updated tab's label with
    the locale the page has now."""
    return {tab: gr.Tab(label=L(key)) for key, tab in tabs.items()}
