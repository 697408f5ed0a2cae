// Refreshes the dashboard's sections in place and sends the retry and allow / deny buttons' POSTs; no build step.
"use strict";
const sections = document.getElementById("sections");
const updated = document.getElementById("updated");
const notice = document.getElementById("notice");
const refreshMs = Number(document.body.dataset.refreshMs) || 2000;
const glanceBox = document.getElementById("glance-box");
const GLANCE_MS = 30000;  // the plots change once a minute and weigh more than the tables
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

async function refreshGlance() {
  try {
    const response = await fetch("api/glance", {credentials: "same-origin", cache: "no-store"});
    if (response.ok) glanceBox.innerHTML = await response.text();  // rendered and escaped by the server
  } catch (error) {
    // the sections' refresh says the gateway is unreachable
  }
}

// The value under the pointer, in the plot's caption: the nearest bar's (a minute's bar is thinner than a
// pixel), or each line's value at the nearest minute.
glanceBox.addEventListener("mousemove", (event) => {
  const figure = event.target.closest("figure.plot");
  const svg = figure && figure.querySelector("svg");
  if (!svg) return;
  let reading = figure.querySelector(".reading");
  if (!reading) {
    reading = document.createElement("span");
    reading.className = "reading";
    figure.querySelector("figcaption").append(reading);
  }
  const box = svg.getBoundingClientRect();
  const x = (event.clientX - box.left) / box.width * svg.viewBox.baseVal.width;
  let bar = null;
  let gap = 4;  // viewBox units: about a pixel either side
  for (const rect of svg.querySelectorAll("rect[data-value]")) {
    const middle = Number(rect.getAttribute("x")) + Number(rect.getAttribute("width")) / 2;
    if (Math.abs(middle - x) < gap) [bar, gap] = [rect, Math.abs(middle - x)];
  }
  const parts = [];
  if (bar) {
    const series = bar.parentElement.getAttribute("class") || bar.dataset.provider;
    parts.push(`${bar.dataset.minute || bar.dataset.day} ${series} ${bar.dataset.shown || bar.dataset.value}`);
  }
  for (const line of svg.querySelectorAll("polyline[data-values]")) {
    const xs = line.getAttribute("points").split(" ").map((point) => Number(point.split(",")[0]));
    let nearest = 0;
    xs.forEach((value, index) => { if (Math.abs(value - x) < Math.abs(xs[nearest] - x)) nearest = index; });
    const minute = line.dataset.minutes.split(" ")[nearest];
    parts.push(`${minute} ${line.getAttribute("class")} ${line.dataset.values.split(" ")[nearest]}`);
  }
  reading.textContent = parts.length ? ` ${parts.join(", ")}` : "";
});

sections.addEventListener("click", (event) => {
  const button = event.target.closest("button.retry");
  if (button) retry(button);
  const verdict = event.target.closest("button.approval");
  if (verdict) answer(verdict);
});
setInterval(refresh, refreshMs);
setInterval(refreshGlance, GLANCE_MS);
