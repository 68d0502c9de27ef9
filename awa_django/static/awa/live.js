// Live refresh for awa's admin pages: #awa-live's data-url answers JSON whose "html" replaces the
// element's content every data-refresh seconds, and not while the tab is hidden (a hidden tab asks
// nothing; it refreshes once as soon as it is shown again).
(function () {
  "use strict";
  var root = document.getElementById("awa-live");
  if (!root) { return; }
  var note = document.getElementById("awa-refresh-note");
  var every = parseInt(root.dataset.refresh, 10) * 1000;
  function say(text) { if (note) { note.textContent = text; } }
  function refresh() {
    if (document.hidden) { return; }
    fetch(root.dataset.url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (data) {
        root.innerHTML = data.html;
        root.dataset.refreshed = data.generated_at;
        say("refreshes every " + every / 1000 + "s");
      })
      .catch(function (error) { say("refresh failed (" + error.message + "); retrying"); });
  }
  window.setInterval(refresh, every);
  document.addEventListener("visibilitychange", refresh);
})();
