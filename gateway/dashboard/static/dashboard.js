// Refreshes the dashboard's sections in place and sends the retry and allow / deny buttons' POSTs; no build step.
"use strict";
const sections = document.getElementById("sections");
const updated = document.getElementById("updated");
const notice = document.getElementById("notice");
const refreshMs = Number(document.body.dataset.refreshMs) || 2000;
// While a button is held, a refresh leaves the sections alone: replacing the button between the press
// and the release would lose the click.
let pressed = false;
sections.addEventListener("pointerdown", () => { pressed = true; });
for (const type of ["pointerup", "pointercancel"]) document.addEventListener(type, () => { pressed = false; });

async function refresh() {
  try {
    const response = await fetch("api/sections", {credentials: "same-origin", cache: "no-store"});
    if (!response.ok) {
      tell(`refresh failed: HTTP ${response.status}`, "error");
      return;
    }
    const html = await response.text();  // rendered and escaped by the server
    if (!pressed) replace(html);
    updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
    if (notice.dataset.kind === "error") tell("", "");
  } catch (error) {
    tell(`gateway unreachable: ${error}`, "error");
  }
}

// A run's steps or an event's JSON opened by a click stays open across refreshes (matched by data-key).
function replace(html) {
  const open = new Set([...sections.querySelectorAll("details[open]")].map((d) => d.dataset.key));
  sections.innerHTML = html;
  for (const details of sections.querySelectorAll("details[data-key]")) {
    if (open.has(details.dataset.key)) details.open = true;
  }
}

function tell(text, kind) {
  notice.textContent = text;
  notice.dataset.kind = kind;
}

async function retry(button) {
  button.disabled = true;
  const response = await fetch("api/dead-letters/retry", {
    method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({names: [button.dataset.name]}),
  });
  const answer = await response.json().catch(() => ({}));
  tell(response.ok ? `retried ${answer.retried.join(", ")}` : `retry failed: ${answer.error}`,
       response.ok ? "info" : "error");
  await refresh();
}

async function answer(button) {
  button.disabled = true;
  const response = await fetch("api/approvals/answer", {
    method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({id: button.dataset.id, verdict: button.dataset.verdict}),
  });
  const result = await response.json().catch(() => ({}));
  if (response.ok) tell(`${result.allowed ? "allowed" : "denied"} ${result.id}`, "info");
  else tell(`answer failed: ${result.error || `${result.id} is ${result.state} already (${result.by})`}`, "error");
  await refresh();
}

sections.addEventListener("click", (event) => {
  const button = event.target.closest("button.retry");
  if (button) retry(button);
  const verdict = event.target.closest("button.approval");
  if (verdict) answer(verdict);
});
setInterval(refresh, refreshMs);
