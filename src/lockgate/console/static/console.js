// Live refresh: every few seconds fetch this page again and swap in its <main>, unless a form
// field has focus or the tab is hidden. Without JavaScript the pages read the same, unrefreshed.
(function () {
  "use strict";
  var main = document.querySelector("main");
  if (!main) { return; }
  var seconds = parseFloat(main.getAttribute("data-refresh") || "0");
  if (!(seconds > 0)) { return; }

  function editing() {
    var el = document.activeElement;
    if (!el || el === document.body) { return false; }
    var tag = el.tagName;
    return tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA" || el.isContentEditable;
  }

  function refresh() {
    if (document.hidden || editing()) { return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok || response.redirected) { return null; }
        return response.text();
      })
      .then(function (html) {
        if (html === null || editing()) { return; }
        var page = new DOMParser().parseFromString(html, "text/html");
        var fresh = page.querySelector("main");
        if (fresh) { main.innerHTML = fresh.innerHTML; }
      })
      .catch(function () { /* the server is away for now: try again next tick */ });
  }

  window.setInterval(refresh, seconds * 1000);
})();
