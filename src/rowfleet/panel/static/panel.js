// rowfleet panel: live refresh, nothing else. Every page works without this script.
// An interval picker with Pause; the page's <main> is fetched again and swapped in. It does
// not refresh while a form field has focus or holds typed text, while a dialog or <details>
// the user opened is open, or while the tab is hidden. The choice is kept per browser.
"use strict";
(function () {
  const box = document.getElementById("refresh");
  const picker = document.getElementById("refresh-every");
  const pause = document.getElementById("refresh-pause");
  const stateText = document.getElementById("refresh-state");
  if (!box || !picker || !pause) return;
  box.hidden = false;
  const KEY = "rowfleet.refresh";
  let every = Number(localStorage.getItem(KEY) || "5");
  if (![0, 2, 5, 10, 30].includes(every)) every = 5;
  picker.value = String(every);
  let paused = false;
  let timer = null;
  let typed = false;

  document.addEventListener("input", () => { typed = true; });

  function busy() {
    const active = document.activeElement;
    if (active && active.closest && active.closest("form") && active.tagName !== "BUTTON") return true;
    if (typed) return true;
    if (document.querySelector("dialog[open], details[open]")) return true;
    return document.hidden;
  }

  function show(text) { if (stateText) stateText.textContent = text; }

  async function refresh() {
    if (busy()) { show("held"); return; }
    try {
      const response = await fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } });
      if (!response.ok) { show("refresh failed: " + response.status); return; }
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("main");
      const main = document.getElementById("main");
      if (fresh && main && !busy()) { main.replaceWith(fresh); show(""); }
    } catch (error) {
      show("refresh failed");
    }
  }

  function schedule() {
    if (timer) clearInterval(timer);
    timer = null;
    pause.textContent = paused ? "Resume" : "Pause";
    pause.setAttribute("aria-pressed", paused ? "true" : "false");
    if (!paused && every > 0) timer = setInterval(refresh, every * 1000);
  }

  picker.addEventListener("change", () => {
    every = Number(picker.value);
    localStorage.setItem(KEY, String(every));
    schedule();
  });
  pause.addEventListener("click", () => { paused = !paused; schedule(); });
  document.addEventListener("visibilitychange", () => { if (!document.hidden && !paused) refresh(); });
  schedule();
})();
