// The Switchyard web chat. Plain JS, no build step. Every text from the user or the agent reaches the page
// through textContent only: markdown is turned into elements here, never into HTML.
"use strict";

const HEADER = { "X-Switchyard-Chat": "1" };
const $ = (id) => document.getElementById(id);
const state = { user: null, conversation: null, ws: null, last: 0, shown: new Map(), retry: 500,
                lastUser: 0, lastFinal: 0, recorder: null, maxUpload: 0 };

function newId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function post(path, body) {
  const init = { method: "POST", headers: { ...HEADER }, credentials: "same-origin" };
  if (body instanceof FormData) init.body = body;
  else { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
  for (let attempt = 0; ; attempt++) {  // the same id each time: a message sent again is taken once
    try {
      const response = await fetch(path, init);
      const answer = await response.json().catch(() => ({}));
      if (!response.ok) throw Object.assign(new Error(answer.error || response.statusText), { final: true });
      return answer;
    } catch (error) {
      if (error.final || attempt >= 5) { status(error.message); throw error; }
      await new Promise((done) => setTimeout(done, 500 * 2 ** attempt));
    }
  }
}

function status(text) { $("status").textContent = text || ""; }

// --- markdown, as elements --------------------------------------------------------------------------------

function inline(parent, text) {
  const pattern = /(`[^`\n]+`|\*\*[^*\n]+\*\*|\*[^*\n]+\*)/g;
  let at = 0;
  for (const match of text.matchAll(pattern)) {
    if (match.index > at) parent.appendChild(document.createTextNode(text.slice(at, match.index)));
    const token = match[0];
    const tag = token.startsWith("`") ? "code" : token.startsWith("**") ? "strong" : "em";
    const cut = tag === "strong" ? 2 : 1;
    const element = document.createElement(tag);
    element.textContent = token.slice(cut, token.length - cut);
    parent.appendChild(element);
    at = match.index + token.length;
  }
  if (at < text.length) parent.appendChild(document.createTextNode(text.slice(at)));
}

function render(body, text) {
  body.replaceChildren();
  const pieces = text.split(/^```[^\n]*\n?/m);
  pieces.forEach((piece, index) => {
    if (index % 2 === 1) {
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      code.textContent = piece.replace(/\n$/, "");
      pre.appendChild(code);
      body.appendChild(pre);
      return;
    }
    for (const paragraph of piece.split(/\n{2,}/)) {
      if (!paragraph.trim()) continue;
      const p = document.createElement("p");
      inline(p, paragraph);
      body.appendChild(p);
    }
  });
}

// --- the conversation ---------------------------------------------------------------------------------------

function bubble(entry) {
  const item = document.createElement("li");
  item.className = "msg " + (entry.from === "user" ? "user" : "agent") + (entry.note && !entry.draft ? " note" : "");
  item.dataset.seq = entry.seq;
  const who = document.createElement("div");
  who.className = "who";
  who.textContent = entry.from === "user" ? entry.sender : (entry.sender || "switchyard");
  const body = document.createElement("div");
  body.className = "body";
  item.append(who, body);
  return item;
}

function show(item, entry) {
  const body = item.querySelector(".body");
  render(body, entry.text || "");
  item.classList.toggle("streaming", Boolean(entry.draft));
  if (entry.file) {
    const link = document.createElement("a");
    link.className = "file";
    link.href = `/files/${encodeURIComponent(state.conversation)}/${item.dataset.seq}`;
    link.download = entry.file.name;
    link.textContent = (entry.file.voice ? "voice note: " : "file: ") + entry.file.name + ` (${entry.file.size} bytes)`;
    body.appendChild(link);
  }
  if (entry.buttons && !item.querySelector(".answered")) {
    const row = document.createElement("div");
    row.className = "buttons";
    for (const [id, label] of entry.buttons) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = label;
      button.addEventListener("click", () => tap(item.dataset.seq, id, row));
      row.appendChild(button);
    }
    item.appendChild(row);
  }
}

function apply(entry) {
  if (entry.kind === "synced") { status(""); state.retry = 500; return; }
  if (entry.kind === "refused") { state.refused = true; status(entry.text); return; }
  if (entry.kind === "signed_out") { signedOut(entry.text); return; }
  if (entry.kind === "typing") { typing(true); return; }
  if (entry.seq <= state.last) return;  // seen already (a replay overlapping what came live)
  state.last = entry.seq;
  const list = $("messages");
  if (entry.kind === "message") {
    const item = bubble(entry);
    state.shown.set(entry.seq, item);
    show(item, entry);
    list.appendChild(item);
    if (entry.from === "user") {
      state.lastUser = entry.seq;
      const link = [...$("conversations").children].find((a) => a.dataset.id === state.conversation);
      if (link && link.textContent === "new conversation" && entry.text) link.textContent = entry.text.slice(0, 60);
    }
    else if (!entry.note && !entry.draft) { state.lastFinal = entry.seq; typing(false); }
  } else if (entry.kind === "pruned") {
    const item = document.createElement("li");
    item.className = "msg note pruned";
    item.textContent = "earlier messages of this conversation are no longer kept";
    list.appendChild(item);
  } else if (entry.kind === "edit") {
    const item = state.shown.get(entry.target);
    if (!item) return;
    render(item.querySelector(".body"), entry.text);
    item.classList.toggle("streaming", Boolean(entry.draft));
    if (entry.final) { item.classList.remove("note"); state.lastFinal = entry.seq; typing(false); }
  } else if (entry.kind === "answered") {
    const item = state.shown.get(entry.target);
    if (!item) return;
    item.querySelector(".buttons")?.remove();
    const note = document.createElement("div");
    note.className = "answered";
    note.textContent = "answered: " + entry.label;
    item.appendChild(note);
  }
  $("stop").hidden = !(state.lastUser > state.lastFinal);
  list.scrollTop = list.scrollHeight;
}

// The gateway says "typing" every 4 s while a turn runs (gateway/app.py TYPING_REFRESH_S): shown until the
// answer comes, or until no word came for TYPING_SHOWN_MS (the turn ended some other way).
const TYPING_SHOWN_MS = 6000;
function typing(on) {
  clearTimeout(state.typingTimer);
  $("typing").hidden = !on;
  if (on) state.typingTimer = setTimeout(() => { $("typing").hidden = true; }, TYPING_SHOWN_MS);
}

function connect() {
  const conversation = state.conversation;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}/ws?c=${encodeURIComponent(conversation)}&after=${state.last}`);
  state.ws = ws;
  ws.onmessage = (event) => apply(JSON.parse(event.data));
  ws.onclose = () => {
    if (state.ws !== ws || state.refused) return;  // another conversation was opened, or this tab refused
    status("reconnecting…");
    setTimeout(() => { if (state.ws === ws) connect(); }, state.retry);
    state.retry = Math.min(state.retry * 2, 5000);
  };
}

function open(conversation) {
  if (state.ws) { const old = state.ws; state.ws = null; old.close(); }
  state.conversation = conversation;
  state.last = 0; state.lastUser = 0; state.lastFinal = 0; state.refused = false;
  typing(false);
  state.shown.clear();
  $("messages").replaceChildren();
  for (const link of $("conversations").children) link.classList.toggle("current", link.dataset.id === conversation);
  history.replaceState(null, "", `#${encodeURIComponent(conversation)}`);
  status("connecting…");
  connect();
}

function listConversations(conversations) {
  const nav = $("conversations");
  nav.replaceChildren();
  for (const { id, title } of conversations) {
    const link = document.createElement("a");
    link.dataset.id = id;
    link.textContent = title;
    link.title = id;
    link.addEventListener("click", () => open(id));
    nav.appendChild(link);
  }
}

function signedOut(text) {
  state.refused = true;  // no reconnecting: the session is gone
  document.body.classList.add("signed-out");
  for (const control of document.querySelectorAll("#composer textarea, #composer button, #new, #logout")) control.disabled = true;
  status(text);
}

// --- what the user does ---------------------------------------------------------------------------------------

async function send(text) {
  if (!text.trim()) return;
  await post("/api/send", { conversation: state.conversation, text, id: newId() });
}

async function tap(ref, button, row) {
  row.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  try { await post("/api/tap", { conversation: state.conversation, ref, button }); }
  catch { row.querySelectorAll("button").forEach((b) => { b.disabled = false; }); }
}

async function upload(blob, name, seconds, caption) {
  if (state.maxUpload && blob.size > state.maxUpload) { status(`a file may have at most ${state.maxUpload} bytes`); return; }
  const form = new FormData();
  form.append("id", newId());
  if (seconds !== undefined) form.append("seconds", String(seconds));
  if (caption) form.append("text", caption);
  form.append("file", blob, name);
  await post(`/api/upload?c=${encodeURIComponent(state.conversation)}`, form);
}

async function record() {
  const button = $("record");
  if (state.recorder) { state.recorder.stop(); return; }
  let stream;
  try { stream = await navigator.mediaDevices.getUserMedia({ audio: true }); }
  catch (error) { status("no microphone: " + error.message); return; }
  const chunks = [];
  const recorder = new MediaRecorder(stream);
  const started = performance.now();
  recorder.ondataavailable = (event) => chunks.push(event.data);
  recorder.onstop = async () => {
    stream.getTracks().forEach((track) => track.stop());
    state.recorder = null;
    button.classList.remove("recording");
    button.textContent = "Voice";
    const type = recorder.mimeType || "audio/webm";
    const seconds = Math.round((performance.now() - started) / 100) / 10;
    await upload(new Blob(chunks, { type }), "voice." + (type.includes("ogg") ? "ogg" : "webm"), seconds);
  };
  state.recorder = recorder;
  recorder.start();
  button.classList.add("recording");
  button.textContent = "Stop recording";
}

async function start() {
  const response = await fetch("/api/me", { credentials: "same-origin" });
  if (!response.ok) { status("not signed in: open the chat link `switchyard run` printed"); return; }
  const me = await response.json();
  state.user = me.user;
  state.maxUpload = me.maxUploadBytes;
  $("who").textContent = me.user;
  if (me.dashboard) { $("dashboard").href = me.dashboard; $("dashboard").hidden = false; }
  listConversations(me.conversations);
  const wanted = decodeURIComponent(location.hash.slice(1));
  const ids = me.conversations.map((c) => c.id);
  open(ids.includes(wanted) ? wanted : ids[ids.length - 1]);

  $("composer").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("text").value;
    $("text").value = "";
    try { await send(text); } catch { $("text").value = text; }
  });
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); $("composer").requestSubmit(); }
  });
  $("stop").addEventListener("click", () => send("/stop"));
  $("file").addEventListener("change", async () => {
    const file = $("file").files[0];
    $("file").value = "";
    const caption = $("text").value;
    $("text").value = "";
    if (file) await upload(file, file.name, undefined, caption);
  });
  $("record").addEventListener("click", record);
  $("logout").addEventListener("click", async () => {
    await post("/api/logout", {});
    signedOut("signed out: open a new chat link to sign in again (`switchyard web link`)");
  });
  $("new").addEventListener("click", async () => {
    const { id } = await post("/api/conversations", {});
    const again = await (await fetch("/api/me", { credentials: "same-origin" })).json();
    listConversations(again.conversations);
    open(id);
  });
}

start();
