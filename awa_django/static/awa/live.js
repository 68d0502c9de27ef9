// Live refresh for awa's admin pages. Each element with data-awa-live asks its data-url for JSON
// every data-refresh seconds, and not while the tab is hidden (a hidden tab asks nothing; it
// refreshes once as soon as it is shown again). The answer's "html" replaces the element's
// content; or, for a list the admin drew (a selection, a form in it must survive), its "rows"
// ({key: {column: html}}) replace the cells td.field-<column> of the row whose
// .field-<data-key-column> cell reads key. The element's data-refreshed says when it last did.
(function () {
  "use strict";
  var roots = document.querySelectorAll("[data-awa-live]");
  if (!roots.length) { return; }
  var note = document.getElementById("awa-refresh-note");
  function say(text) { if (note) { note.textContent = text; } }
  function fillRows(root, rows) {
    var column = root.dataset.keyColumn;
    root.querySelectorAll("tbody tr").forEach(function (tr) {
      var keyCell = tr.querySelector(".field-" + column);
      var cells = keyCell ? rows[keyCell.textContent.trim()] : undefined;
      if (!cells) { return; }
      Object.keys(cells).forEach(function (name) {
        var td = tr.querySelector("td.field-" + name);
        if (td) { td.innerHTML = cells[name]; }
      });
    });
  }
  function watch(root) {
    var every = parseInt(root.dataset.refresh, 10) * 1000;
    function refresh() {
      if (document.hidden) { return; }
      fetch(root.dataset.url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.json();
        })
        .then(function (data) {
          if (data.rows !== undefined) { fillRows(root, data.rows); } else { root.innerHTML = data.html; }
          root.dataset.refreshed = data.generated_at;
          say("refreshes every " + every / 1000 + "s");
        })
        .catch(function (error) { say("refresh failed (" + error.message + "); retrying"); });
    }
    window.setInterval(refresh, every);
    document.addEventListener("visibilitychange", refresh);
  }
  roots.forEach(watch);
})();
