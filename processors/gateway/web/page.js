// The ragbus page: asks the gateway's REST routes of this origin, nothing else (the CSP says so too).
// Text from the gateway is only ever set as textContent, never parsed as HTML.

const $ = (id) => document.getElementById(id);
const KEY = "ragbus.key";
// A citation: [<chunk id>], the id being a document id (any characters but brackets and line breaks: spaces,
// "<", "&" too) and "#<n>". Only an id the answer's sources hold becomes a chip; the rest stays text.
const CITATION = /\[([^\[\]\n]+?#\d+)\]/g;
const ROLES = ["read", "ingest", "admin"];  // each including the one before (GET /v1/key)
const FIRST_MONTH = { year: 1945, month: 0 };

const state = {
  collection: "",
  turns: [],          // {question, answer, chunks: Map, node} of this conversation
  busy: false,
  documentsAfter: "",
  graphTimer: 0,
  key: null,          // {role, collections} of the key in use, as GET /v1/key says; null: not known
};

class ApiError extends Error {
  constructor(status, type, message, param) {
    super(message);
    this.status = status;
    this.type = type;
    this.param = param;
  }
}

// -- talking to the gateway -------------------------------------------------------------------------

function headers(extra = {}) {
  const key = sessionStorage.getItem(KEY);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function failure(response) {
  let type = response.statusText || "Error";
  let message = `the gateway answered ${response.status}`;
  let param = null;
  try {
    const body = await response.json();
    if (body && body.error) ({ type, message, param } = body.error);
  } catch { /* not JSON: keep the status line */ }
  if (response.status === 401) askForKey(message);
  return new ApiError(response.status, type, message, param);
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers) });
  if (!response.ok) throw await failure(response);
  return response;
}

async function json(path, options) {
  return (await api(path, options)).json();
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  return q.toString();
}

// Server-Sent Events of a POST (EventSource only GETs): blocks of "event:" and "data:" lines.
async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      let event = "message";
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

// -- status and key ---------------------------------------------------------------------------------

function say(message, bad = false) {
  const status = $("status");
  status.textContent = message;
  status.classList.toggle("bad", bad);
  status.hidden = !message;
}

function problem(error) {
  if (error instanceof ApiError) return `${error.type}: ${error.message}`;
  return `The gateway cannot be reached (${error.message}).`;
}

function askForKey(why) {
  const dialog = $("key-dialog");
  if (why) say(`${why}. Enter an API key to go on.`, true);
  if (!dialog.open) {
    $("key-input").value = "";
    dialog.showModal();
  }
}

function wireKey() {
  $("key-button").addEventListener("click", () => askForKey(""));
  $("key-form").addEventListener("submit", () => {
    sessionStorage.setItem(KEY, $("key-input").value.trim());
    say("");
    start();
  });
  $("key-forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    $("key-dialog").close();
    start();
  });
}

// -- collections ------------------------------------------------------------------------------------

async function loadCollections(keep = state.collection) {
  const select = $("collection");
  const { collections } = await json("/v1/collections");
  const names = collections.length ? collections : ["default"];
  select.replaceChildren(...names.map((name) => new Option(name, name)));
  state.collection = names.includes(keep) ? keep : names.includes("default") ? "default" : names[0];
  select.value = state.collection;
  $("collection-note").textContent = collections.length ? "" : "(nothing ingested yet)";
}

// -- what the key may do ----------------------------------------------------------------------------

async function loadKey() {
  try {
    state.key = await json("/v1/key");
  } catch (error) {
    state.key = null;  // not known: everything is offered, and the gateway refuses what the key may not do
    if (error instanceof ApiError && error.status === 401) throw error;
  }
}

function mayWrite(collection) {
  if (!state.key) return true;
  const { role, collections } = state.key;
  return ROLES.indexOf(role) >= ROLES.indexOf("ingest") && (collections.includes("*") || collections.includes(collection));
}

// Upload and Delete only for a key that may add and delete documents in the chosen collection.
function showWriting() {
  const may = mayWrite(state.collection);
  $("upload-form").hidden = !may;
  $("documents-panel").classList.toggle("read-only", !may);
  const note = $("write-note");
  note.hidden = may;
  note.textContent = may ? "" : `This key may read collection ${state.collection}, not add or delete documents `
    + `(its role is ${state.key.role}).`;
}

// -- asking -----------------------------------------------------------------------------------------

function graphTime() {
  const slider = $("graph-time");
  return slider.value === slider.max ? null : monthOf(Number(slider.value));
}

function answerTimes() {
  if (!$("graph-for-answers").checked) return { at_time: null, as_of: null };
  return { at_time: graphTime(), as_of: $("graph-as-of").value || null };
}

function showAnswerTimes() {
  const { at_time, as_of } = answerTimes();
  const parts = [];
  if (at_time) parts.push(`facts valid at ${at_time}`);
  if (as_of) parts.push(`as recorded on ${as_of}`);
  $("ask-time").textContent = parts.length ? `Answers use the graph's ${parts.join(", ")}` : "";
}

function newTurn(question) {
  $("empty-conversation")?.remove();
  const node = document.createElement("article");
  node.className = "turn";
  const q = document.createElement("p");
  q.className = "question";
  q.textContent = question;
  const answer = document.createElement("div");
  answer.className = "answer streaming";
  answer.setAttribute("aria-busy", "true");
  node.append(q, answer);
  $("conversation").append(node);
  node.scrollIntoView({ block: "end" });
  const turn = { question, answer: "", chunks: new Map(), facts: [], node, answerNode: answer, opened: new Map() };
  state.turns.push(turn);
  return turn;
}

// The answer's lines, each citation a button numbered in the order the answer first cites it.
function renderAnswer(turn) {
  const node = turn.answerNode;
  const numbers = new Map();
  const paragraphs = [];
  for (const line of turn.answer.split("\n")) {
    if (!line.trim()) continue;
    const p = document.createElement("p");
    let last = 0;
    for (const match of line.matchAll(CITATION)) {
      const id = match[1];
      const chunk = turn.chunks.get(id);
      p.append(line.slice(last, match.index));
      last = match.index + match[0].length;
      if (!chunk) {
        p.append(match[0]);
        continue;
      }
      if (!numbers.has(id)) numbers.set(id, numbers.size + 1);
      const n = numbers.get(id);
      const button = document.createElement("button");
      button.type = "button";
      button.className = "cite";
      button.textContent = String(n);
      button.title = id;
      button.setAttribute("aria-label", `source ${n}: ${chunk.title || chunk.document_id || id}`);
      button.dataset.chunk = id;
      p.append(button);
    }
    p.append(line.slice(last));
    paragraphs.push(p);
  }
  node.replaceChildren(...paragraphs);
  return numbers;
}

function finishTurn(turn, response) {
  turn.answer = response.answer || turn.answer;
  const numbers = renderAnswer(turn);
  turn.answerNode.classList.remove("streaming");
  turn.answerNode.removeAttribute("aria-busy");
  if (!turn.answer.trim()) turn.answerNode.replaceChildren(paragraph("No answer: nothing retrieved answers this.", "muted"));
  if (numbers.size) {
    const list = document.createElement("ol");
    list.className = "sources";
    list.setAttribute("aria-label", "Sources");
    for (const [id, n] of numbers) {
      const chunk = turn.chunks.get(id);
      const li = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "quiet";
      button.dataset.chunk = id;
      button.textContent = `${n}. ${chunk.title || chunk.document_id || id}`;
      button.title = id;
      li.append(button);
      list.append(li);
    }
    turn.node.append(list);
  }
  turn.facts = response.facts || [];
  if (turn.facts.length) {
    const facts = document.createElement("ul");
    facts.className = "turn-facts";
    facts.setAttribute("aria-label", "Facts from the graph");
    for (const fact of response.facts) facts.append(item(`${fact.text}  (${validity(fact)})`));
    turn.node.append(facts);
  }
  const notes = [];
  if (response.standalone) notes.push(`asked as “${response.standalone}”`);
  if (response.at_time) notes.push(`graph at ${response.at_time}`);
  if (response.degraded && response.degraded.length) notes.push(`left out: ${response.degraded.join(", ")}`);
  if (response.timings_ms && response.timings_ms.total) notes.push(`${Math.round(response.timings_ms.total)} ms`);
  if (notes.length) turn.node.append(paragraph(notes.join(" · "), "muted meta-line"));
}

function failTurn(turn, error) {
  turn.answerNode.classList.remove("streaming");
  turn.answerNode.removeAttribute("aria-busy");
  turn.answerNode.replaceChildren(paragraph(problem(error), "problem"));
}

async function ask(question) {
  const turn = newTurn(question);
  const history = state.turns.slice(0, -1).flatMap((t) => [
    { role: "user", content: t.question }, { role: "assistant", content: t.answer }]);
  const body = {
    question, stream: true, collection: state.collection, mode: $("mode").value || null,
    history, ...answerTimes(),
  };
  try {
    const response = await api("/v1/ask", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    for await (const { event, data } of events(response)) {
      if (event === "sources") {
        for (const chunk of data.chunks || []) turn.chunks.set(chunk.chunk_id, chunk);
      } else if (event === "answer") {
        turn.answer += data.text;
        renderAnswer(turn);
      } else if (event === "final") {
        finishTurn(turn, data.response || {});
      } else if (event === "error") {
        throw new ApiError(502, data.error.type, data.error.message, data.error.param);
      }
    }
    if (turn.answerNode.classList.contains("streaming")) finishTurn(turn, { answer: turn.answer });
  } catch (error) {
    failTurn(turn, error);
  }
  if (turn.facts.length && !$("graph-question").value.trim()) {  // the question names entities of the graph
    $("graph-question").value = question;
    refreshGraph();
  }
}

function wireAsk() {
  const form = $("ask-form");
  const question = $("question");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = question.value.trim();
    if (!text || state.busy) return;
    state.busy = true;
    $("ask-button").disabled = true;
    question.value = "";
    try {
      await ask(text);
    } finally {
      state.busy = false;
      $("ask-button").disabled = false;
      question.focus();
    }
  });
  question.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  $("new-conversation").addEventListener("click", () => {
    state.turns = [];
    $("conversation").replaceChildren(paragraph("A new conversation: earlier questions no longer count.", "hint"));
    question.focus();
  });
  $("conversation").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-chunk]");
    if (!button) return;
    const turn = state.turns.find((t) => t.node.contains(button));
    if (turn) openSource(turn.chunks.get(button.dataset.chunk), button, turn);
  });
}

// -- the source drawer ------------------------------------------------------------------------------

let opener = null;

async function openSource(chunk, from, turn) {
  if (!chunk) return;
  opener = from;
  const drawer = $("drawer");
  $("drawer-title").textContent = chunk.title || chunk.document_id || chunk.chunk_id;
  const where = [chunk.chunk_id];
  if (chunk.collection) where.push(`collection ${chunk.collection}`);
  $("drawer-where").textContent = where.join(" · ");
  const quoted = turn ? citedSentences(turn.answer, chunk.chunk_id) : [];
  $("drawer-text").replaceChildren(...blocks(chunk.text || "(this store keeps no text for the chunk)", quoted));
  const meta = $("drawer-document");
  meta.replaceChildren(...pairs([["Id", chunk.document_id], ["Title", chunk.title]]));
  $("drawer-backdrop").hidden = false;
  drawer.hidden = false;
  $("drawer-close").focus();
  if (!chunk.document_id) return;
  try {
    const found = await json(`/v1/documents?${query({ collection: chunk.collection || state.collection, document_id: chunk.document_id })}`);
    const doc = found.documents[0];
    if (!doc || drawer.hidden) return;
    const position = Number.isInteger(chunk.position) ? `chunk ${chunk.position + 1} of ${doc.chunks}` : `${doc.chunks} chunks`;
    meta.replaceChildren(...pairs([
      ["Id", doc.document_id], ["Title", doc.title], ["Source", doc.source], ["Chunks", position],
      ["Added", doc.ingested_at ? day(doc.ingested_at) : ""], ["Version", doc.generation],
    ]));
  } catch (error) {
    meta.append(...pairs([["Document", problem(error)]]));
  }
}

// The answer's sentences that cite ``id``, without their citations: the drawer marks them in the chunk.
function citedSentences(answer, id) {
  return answer.split("\n").filter((line) => line.includes(`[${id}]`))
    .map((line) => line.replace(CITATION, "").replace(/\s+/g, " ").trim()).filter(Boolean);
}

function closeSource() {
  if ($("drawer").hidden) return;
  $("drawer").hidden = true;
  $("drawer-backdrop").hidden = true;
  opener?.focus();
}

function wireDrawer() {
  $("drawer-close").addEventListener("click", closeSource);
  $("drawer-backdrop").addEventListener("click", closeSource);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape") closeSource();
    if (event.key === "Tab" && !$("drawer").hidden) {  // keep the focus in the open drawer
      event.preventDefault();
      $("drawer-close").focus();
    }
  });
}

// -- the graph at a time ----------------------------------------------------------------------------

function monthOf(index) {
  const month = FIRST_MONTH.month + index;
  const year = FIRST_MONTH.year + Math.floor(month / 12);
  return `${year}-${String((month % 12) + 1).padStart(2, "0")}-01`;
}

function indexOf(date) {
  const [year, month] = date.split("-").map(Number);
  return (year - FIRST_MONTH.year) * 12 + (month - 1) - FIRST_MONTH.month;
}

function validity(fact) {
  const from = fact.valid_from ? day(fact.valid_from) : null;
  const until = fact.valid_until ? day(fact.valid_until) : null;
  if (from && until) return `${from} to ${until}`;
  if (from) return `since ${from}`;
  if (until) return `until ${until}`;
  return "always";
}

function showGraphTime() {
  const time = graphTime();
  $("graph-time-label").textContent = time ? time.slice(0, 7) : "now";
  $("graph-date").value = time || "";
  showAnswerTimes();
}

async function refreshGraph() {
  const question = $("graph-question").value.trim();
  const list = $("facts");
  const note = $("graph-note");
  if (!question) {
    list.replaceChildren();
    note.textContent = "Name an entity (or paste a question) to see its facts.";
    return;
  }
  const params = { question, collection: state.collection, at_time: graphTime(), as_of: $("graph-as-of").value, limit: 12 };
  try {
    const found = await json(`/v1/kg/query?${query(params)}`);
    if (question !== $("graph-question").value.trim()) return;  // a later query is on its way
    const rows = found.facts.map((fact) => factItem(fact, false));
    rows.push(...(found.rejected || []).map((fact) => factItem(fact, true)));
    list.replaceChildren(...rows);
    const when = found.at_time ? `valid at ${day(found.at_time)}` : "valid now";
    const known = found.as_of ? `, as recorded on ${day(found.as_of)}` : "";
    note.textContent = found.entities.length
      ? `${found.facts.length} fact${found.facts.length === 1 ? "" : "s"} about ${found.entities.join(", ")}, ${when}${known}`
      : "The graph knows no entity by these words.";
  } catch (error) {
    list.replaceChildren();
    note.textContent = problem(error);
  }
}

function factItem(fact, rejected) {
  const li = document.createElement("li");
  if (rejected) li.className = "rejected";
  const text = document.createElement("span");
  text.className = "fact";
  text.textContent = fact.text || `${fact.head} ${fact.relation} ${fact.tail}`;
  const when = document.createElement("span");
  when.className = "when";
  when.textContent = rejected ? `breaks the ontology: ${fact.reason || ""}` : validity(fact);
  li.append(text, when);
  return li;
}

function soon() {
  clearTimeout(state.graphTimer);
  state.graphTimer = setTimeout(refreshGraph, 150);
}

function wireGraph() {
  const slider = $("graph-time");
  const now = new Date();
  slider.max = String(indexOf(`${now.getFullYear()}-${String(now.getMonth() + 1).padStart(2, "0")}`) + 1);
  slider.value = slider.max;
  slider.setAttribute("aria-valuetext", "now");
  slider.addEventListener("input", () => {
    showGraphTime();
    slider.setAttribute("aria-valuetext", graphTime() || "now");
    soon();
  });
  $("graph-date").addEventListener("change", () => {
    const value = $("graph-date").value;
    slider.value = value ? String(Math.min(Number(slider.max) - 1, Math.max(0, indexOf(value)))) : slider.max;
    showGraphTime();
    soon();
  });
  $("graph-now").addEventListener("click", () => {
    slider.value = slider.max;
    showGraphTime();
    soon();
  });
  $("graph-as-of").addEventListener("change", () => {
    showAnswerTimes();
    soon();
  });
  $("graph-for-answers").addEventListener("change", showAnswerTimes);
  $("graph-question").addEventListener("input", soon);
  $("graph-form").addEventListener("submit", (event) => {
    event.preventDefault();
    refreshGraph();
  });
  showGraphTime();
}

// -- documents --------------------------------------------------------------------------------------

async function loadDocuments(more = false) {
  const body = $("documents");
  const note = $("documents-note");
  if (!more) state.documentsAfter = "";
  try {
    const found = await json(`/v1/documents?${query({ collection: state.collection, after: state.documentsAfter, limit: 50 })}`);
    const rows = found.documents.map(documentRow);
    if (more) body.append(...rows);
    else body.replaceChildren(...rows);
    state.documentsAfter = found.more && found.documents.length ? found.documents.at(-1).document_id : "";
    $("documents-more").hidden = !found.more;
    note.textContent = body.children.length ? "" : `Collection ${state.collection} holds no documents.`;
  } catch (error) {
    if (!more) body.replaceChildren();
    note.textContent = problem(error);
  }
}

function documentRow(doc) {
  const tr = document.createElement("tr");
  const name = document.createElement("td");
  const title = document.createElement("span");
  title.className = "doc-title";
  title.textContent = doc.title || doc.document_id;
  const id = document.createElement("span");
  id.className = "doc-id";
  id.textContent = doc.title ? doc.document_id : doc.source;
  name.append(title, id);
  const chunks = document.createElement("td");
  chunks.className = "num";
  chunks.textContent = String(doc.chunks);
  const added = document.createElement("td");
  added.textContent = doc.ingested_at ? day(doc.ingested_at) : "";
  tr.append(name, chunks, added);
  if (!mayWrite(state.collection)) return tr;
  const actions = document.createElement("td");
  const remove = document.createElement("button");
  remove.type = "button";
  remove.textContent = "Delete";
  remove.setAttribute("aria-label", `Delete ${doc.title || doc.document_id}`);
  remove.addEventListener("click", () => removeDocument(doc, remove));
  actions.append(remove);
  tr.append(actions);
  return tr;
}

async function removeDocument(doc, button) {
  if (!confirm(`Delete "${doc.title || doc.document_id}" from collection ${state.collection}? Its chunks and facts go from every store.`)) return;
  button.disabled = true;
  try {
    await json(`/v1/documents/${encodeURIComponent(doc.document_id)}?${query({ collection: state.collection })}`, { method: "DELETE" });
    say(`Deleted "${doc.title || doc.document_id}".`);
    await loadDocuments();
  } catch (error) {
    button.disabled = false;
    say(problem(error), true);
  }
}

// The upload's answer, asked for as lines (Accept: application/x-ndjson): a line per page as the gateway
// reads it (a scan's pages take a second or so each, by OCR), then {"stored": ...} or {"error": ..., "status"}.
function upload(file) {
  const progress = $("upload-progress");
  const note = $("upload-note");
  const data = new FormData();
  data.append("file", file);
  data.append("collection", state.collection);
  progress.hidden = false;
  progress.max = 100;
  progress.value = 0;
  note.textContent = `Sending ${file.name}…`;
  return new Promise((resolve) => {
    const request = new XMLHttpRequest();
    let read = 0;  // how much of the answer's text has been taken as lines
    let last = null;  // the last line: the outcome
    const lines = () => {
      const text = request.responseText;
      const end = text.lastIndexOf("\n") + 1;
      const taken = text.slice(read, end).split("\n").filter((line) => line.trim());
      read = Math.max(read, end);
      for (const line of taken) {
        let event = null;
        try { event = JSON.parse(line); } catch { continue; }
        if (event.page) {
          progress.max = event.pages;
          progress.value = event.page;
          note.textContent = `Reading ${file.name}: page ${event.page} of ${event.pages}${event.ocr ? " (OCR)" : ""}`;
        } else {
          last = event;
        }
      }
    };
    request.open("POST", "/v1/documents");
    for (const [k, v] of Object.entries(headers())) request.setRequestHeader(k, v);
    request.setRequestHeader("Accept", "application/x-ndjson");
    request.upload.addEventListener("progress", (event) => {
      if (!event.lengthComputable) return;
      progress.value = Math.round((100 * event.loaded) / event.total);
      note.textContent = `Sending ${file.name}: ${progress.value}%`;
    });
    request.upload.addEventListener("load", () => {
      progress.removeAttribute("value");  // indeterminate until a page is told: the gateway reads, embeds, stores
      note.textContent = `Reading, embedding and storing ${file.name}…`;
    });
    request.addEventListener("progress", () => {
      if (request.status === 200) lines();
    });
    request.addEventListener("load", () => {
      progress.hidden = true;
      let body = null;
      if (request.status === 200) {
        lines();
        body = last && last.stored ? last.stored : last;
      } else {
        try { body = JSON.parse(request.responseText); } catch { /* not JSON */ }
      }
      if ((request.status === 200 || request.status === 201) && body && !body.error) {
        note.textContent = `Stored ${file.name}: ${body.chunks} chunk${body.chunks === 1 ? "" : "s"} in ${body.collection}.`;
        resolve(true);
        return;
      }
      const error = body && body.error ? body.error : { type: String(request.status), message: request.statusText };
      if (request.status === 401) askForKey(error.message);
      note.textContent = `Not stored: ${error.type}: ${error.message}`;
      resolve(false);
    });
    request.addEventListener("error", () => {
      progress.hidden = true;
      note.textContent = "Not stored: the gateway cannot be reached.";
      resolve(false);
    });
    request.send(data);
  });
}

function wireDocuments() {
  $("upload-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = $("upload-file");
    const file = input.files[0];
    if (!file) return;
    $("upload-button").disabled = true;
    try {
      if (await upload(file)) {
        input.value = "";
        await loadCollections();
        await loadDocuments();
      }
    } finally {
      $("upload-button").disabled = false;
    }
  });
  $("documents-more").addEventListener("click", () => loadDocuments(true));
}

// -- small helpers ----------------------------------------------------------------------------------

function day(iso) {
  return String(iso).slice(0, 10);
}

function paragraph(text, className) {
  const p = document.createElement("p");
  p.className = className;
  p.textContent = text;
  return p;
}

function item(text) {
  const li = document.createElement("li");
  li.textContent = text;
  return li;
}

// A chunk's text as paragraphs: the lines of a paragraph joined (documents wrap them), indented blocks
// (code, grammar) kept as they are; each of the ``quoted`` sentences found in a paragraph is marked.
function blocks(text, quoted = []) {
  return text.split(/\n\s*\n/).filter((b) => b.trim()).map((block) => {
    const lines = block.split("\n");
    if (lines.every((line) => /^\s{2,}/.test(line) || !line.trim())) {
      const pre = document.createElement("pre");
      pre.textContent = block.replace(/^\n+|\s+$/g, "");
      return pre;
    }
    const p = document.createElement("p");
    p.append(...marked(lines.map((line) => line.trim()).join(" "), quoted));
    return p;
  });
}

function marked(text, quoted) {
  const spans = [];
  for (const sentence of quoted) {
    const at = text.indexOf(sentence);
    if (at >= 0) spans.push([at, at + sentence.length]);
  }
  spans.sort((a, b) => a[0] - b[0]);
  const nodes = [];
  let last = 0;
  for (const [start, end] of spans) {
    if (start < last) continue;
    nodes.push(text.slice(last, start));
    const mark = document.createElement("mark");
    mark.textContent = text.slice(start, end);
    nodes.push(mark);
    last = end;
  }
  nodes.push(text.slice(last));
  return nodes;
}

function pairs(entries) {
  return entries.filter(([, v]) => v).flatMap(([k, v]) => {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    return [dt, dd];
  });
}

// -- start ------------------------------------------------------------------------------------------

async function start() {
  try {
    await Promise.all([loadCollections(), loadKey()]);
    say("");
  } catch (error) {
    say(problem(error), true);
    return;
  }
  showWriting();
  await Promise.all([loadDocuments(), refreshGraph()]);
}

$("collection").addEventListener("change", () => {
  state.collection = $("collection").value;
  showWriting();
  loadDocuments();
  refreshGraph();
});
wireKey();
wireAsk();
wireDrawer();
wireGraph();
wireDocuments();
start();
document.documentElement.dataset.ready = "true";
