// Refreshes the dashboard's sections in place and sends the retry button's POST; no build step.
"use strict";
const sections = document.getElementById("sections");
const updated = document.getElementById("updated");
const notice = document.getElementById("notice");
const refreshMs = Number(document.body.dataset.refreshMs) || 2000;

async function refresh() {
  try {
    const response = await fetch("api/sections", {credentials: "same-origin", cache: "no-store"});
    if (!response.ok) {
      notice.textContent = `refresh failed: HTTP ${response.status}`;
      return;
    }
    sections.innerHTML = await response.text();  // rendered and escaped by the server
    updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
    notice.textContent = "";
  } catch (error) {
    notice.textContent = `gateway unreachable: ${error}`;
  }
}

async function retry(button) {
  button.disabled = true;
  const response = await fetch("api/dead-letters/retry", {
    method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({names: [button.dataset.name]}),
  });
  const answer = await response.json().catch(() => ({}));
  notice.textContent = response.ok ? `retried ${answer.retried.join(", ")}` : `retry failed: ${answer.error}`;
  await refresh();
}

sections.addEventListener("click", (event) => {
  const button = event.target.closest("button.retry");
  if (button) retry(button);
});
setInterval(refresh, refreshMs);
