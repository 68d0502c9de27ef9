// The bulk action's runner: posts one chunk at a time (the server answers JSON with the cursor) until
// the filter is exhausted or Stop is pressed; nothing runs between chunks once stopped. Between chunks
// it waits the pause the server names (as long as the chunk took), leaving the database room.
(function () {
  "use strict";
  var form = document.getElementById("awa-bulk-form");
  var confirm = document.getElementById("awa-bulk-confirm");
  var stop = document.getElementById("awa-bulk-stop");
  var progress = document.getElementById("awa-bulk-progress");
  var stopped = false;
  var total = {done: 0, skipped: 0, chunks: 0};
  function show(state, text) { progress.dataset.state = state; progress.textContent = text; }
  function summary() { return total.done + " done, " + total.skipped + " skipped in " + total.chunks + " chunk(s)"; }
  function chunk(after) {
    if (stopped) { show("stopped", "Stopped: " + summary() + "."); return; }
    var data = new FormData(form);
    data.set("after", after);
    fetch(window.location.href, {method: "POST", body: data, credentials: "same-origin"})
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (answer) {
        total.done += answer.done; total.skipped += answer.skipped; total.chunks += answer.chunk ? 1 : 0;
        progress.dataset.done = total.done; progress.dataset.skipped = total.skipped;
        if (answer.finished) { stop.disabled = true; show("finished", "Finished: " + summary() + "."); return; }
        show("running", "Running: " + summary() + "…");
        window.setTimeout(function () { chunk(answer.after); }, answer.pause_ms || 0);
      })
      .catch(function (error) { stop.disabled = true; show("failed", "Failed (" + error.message + ") after " + summary() + "."); });
  }
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    confirm.disabled = true; stop.disabled = false;
    show("running", "Running…");
    chunk(0);
  });
  stop.addEventListener("click", function () { stopped = true; stop.disabled = true; });
})();
