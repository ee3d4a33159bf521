// The progress of a forget or an erasure: polls the status (and the audit) until the pruner reports
// it complete and, for an erasure, no trace remains. No memory text is sent or received here.
"use strict";
(function () {
  const box = document.getElementById("progress");
  if (!box) return;
  const url = box.dataset.statusUrl;
  const audit = box.dataset.audit === "true";
  const state = document.getElementById("event-state");
  const errorLine = document.getElementById("event-error");
  const POLL_MS = 1000;

  function renderAudit(traces, remaining) {
    const body = document.querySelector("#audit-table tbody");
    body.replaceChildren();
    Object.entries(traces).forEach(([store, count]) => {
      const row = document.createElement("tr");
      const name = document.createElement("td");
      const value = document.createElement("td");
      name.textContent = store;
      value.textContent = String(count);
      if (count > 0) value.className = "error";
      row.append(name, value);
      body.append(row);
    });
    document.getElementById("audit-remaining").textContent = String(remaining);
  }

  function done(body) {
    return body.state === "erasure_completed" && (!audit || body.remaining === 0);
  }

  async function poll() {
    let body = null;
    try {
      const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      body = await response.json();
      errorLine.textContent = body.error || "";
    } catch (error) {
      errorLine.textContent = "cannot reach the server; retrying";
    }
    if (body) {
      state.textContent = body.state.replaceAll("_", " ");
      if (audit && body.traces) renderAudit(body.traces, body.remaining);
      if (!audit && body.removed) {
        document.getElementById("event-removed").textContent =
          Object.entries(body.removed).map(([k, v]) => k + ": " + v).join(", ") || "nothing";
      }
      if (body.state === "dead_lettered") {
        errorLine.textContent = "the pruner could not carry this out: see `tiermem dlq`";
        return;
      }
      if (done(body)) {
        box.dataset.complete = "true";
        document.getElementById("progress-h").textContent = audit ? "Erased" : "Forgotten";
        return;
      }
    }
    window.setTimeout(poll, POLL_MS);
  }
  poll();
})();
