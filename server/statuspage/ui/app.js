// condisagg status page: polls /ui/api/state and /ui/api/config and renders them. Every value
// from the server goes into the page as text (textContent), never as markup.
"use strict";

const STATE_EVERY_MS = 2000;
const CONFIG_EVERY_MS = 15000;
const TOKEN_KEY = "condisagg-admin-token";
const SVG = "http://www.w3.org/2000/svg";

let lastConfig = 0;
let timer = null;

// el builds an element: el("td", {class: "num"}, "text", child, ...).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

// api fetches a JSON endpoint with the bearer token; null after a 401 (the form is shown).
async function api(path) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  const resp = await fetch(path, {headers, cache: "no-store"});
  if (resp.status === 401) {
    showAuth(token() ? "The token was refused." : "");
    return null;
  }
  if (!resp.ok) throw new Error(path + ": HTTP " + resp.status + " " + (await resp.text()).trim());
  return resp.json();
}

function showAuth(message) {
  document.getElementById("main").hidden = true;
  document.getElementById("auth").hidden = false;
  document.getElementById("auth-error").textContent = message;
  document.getElementById("status").textContent = "token required";
  document.getElementById("forget").hidden = true;
  stop();
}

function num(v, digits) {
  if (v === null || v === undefined) return "–";
  if (digits !== undefined) return Number(v).toFixed(digits);
  return Number(v).toLocaleString("en-US");
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "never";
  if (seconds < 1) return "now";
  if (seconds < 120) return Math.round(seconds) + " s ago";
  if (seconds < 7200) return Math.round(seconds / 60) + " min ago";
  return Math.round(seconds / 3600) + " h ago";
}

function since(now, t) { return age((Date.parse(now) - Date.parse(t)) / 1000); }

function badge(kind, text) { return el("span", {class: "badge " + kind}, text || kind); }

function renderFleet(st) {
  const box = document.getElementById("fleet");
  const parts = [];
  for (const m of st.models) {
    parts.push(el("div", {class: "model"}, "model " + (m.name || "(every name)") + " · block size " + m.block_size +
      (m.lora_adapters && m.lora_adapters.length ? " · LoRA " + m.lora_adapters.join(", ") : "")));
    const tbody = el("tbody");
    for (const w of m.workers) tbody.append(workerRow(st.now, w));
    parts.push(el("table", {class: "fleet", "data-model": m.name},
      el("thead", null, el("tr", null, ...["worker", "role", "endpoint", "health", "booked req", "booked prefill tok",
        "booked decode blk", "KV cap blk", "scraped run/wait", "scraped KV use", "indexed blk gpu/cpu/disk",
        "KV events"].map((h) => el("th", null, h)))),
      tbody));
  }
  box.replaceChildren(...parts);
}

function workerRow(now, w) {
  const health = w.healthy ? el("span", null, "healthy") :
    el("span", {class: "unhealthy"}, "unhealthy");
  const healthCell = el("td", {class: "health"}, health, " (" + w.health_reason + ", " + since(now, w.health_since) + ")");
  let scraped = "never", usage = "–";
  if (w.scraped) {
    scraped = num(w.scraped.running) + " / " + num(w.scraped.waiting) + " (" + since(now, w.scraped.at) + ")";
    if (w.scraped.kv_usage !== null) usage = (100 * w.scraped.kv_usage).toFixed(1) + " %";
  }
  const indexed = w.indexed ? num(w.indexed.gpu) + " / " + num(w.indexed.cpu) + " / " + num(w.indexed.disk) : "–";
  let events = "no stream";
  if (w.events) {
    const e = w.events;
    events = (e.connected ? "connected" : "down") + " · seq " + (e.last_seq === null ? "–" : e.last_seq) +
      " · gaps " + e.gaps + " · replays " + e.replays + (e.replays_lost ? " (" + e.replays_lost + " lost)" : "") +
      " · last event " + age(e.last_event_age_seconds);
  }
  const cap = w.kv_capacity_blocks < 0 ? "unknown" : num(w.kv_capacity_blocks);
  return el("tr", {"data-worker": w.id, "data-healthy": String(w.healthy)},
    el("td", null, w.id + (w.dp_size > 1 ? " (rank " + w.dp_rank + "/" + w.dp_size + ")" : "")),
    el("td", null, w.role), el("td", null, w.endpoint), healthCell,
    el("td", {class: "num"}, num(w.booked.requests)), el("td", {class: "num"}, num(w.booked.prefill_tokens)),
    el("td", {class: "num"}, num(w.booked.decode_blocks)), el("td", {class: "num"}, cap),
    el("td", {class: "scraped"}, scraped), el("td", {class: "num"}, usage), el("td", {class: "indexed num"}, indexed),
    el("td", {class: "events"}, events));
}

function renderMix(mix) {
  const colors = mix.placements;
  document.getElementById("mix-legend").replaceChildren(...colors.map((p) => {
    const total = mix.buckets.reduce((s, b) => s + (b.counts[p] || 0), 0);
    return el("span", {"data-placement": p}, el("i", {class: p}), p + " " + total);
  }));
  const n = mix.buckets.length;
  const minutes = Math.round(n * mix.bucket_seconds / 60);
  document.getElementById("mix-window").textContent = "last " + minutes + " min, " + mix.bucket_seconds + " s buckets";
  const W = 1000, H = 160, pad = 18;
  const sums = mix.buckets.map((b) => colors.reduce((s, p) => s + (b.counts[p] || 0), 0));
  const max = Math.max(1, ...sums);
  const chart = svg("svg", {viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img",
    "aria-label": "decisions per bucket by placement"});
  const bw = W / n;
  mix.buckets.forEach((b, i) => {
    let y = H - pad;
    for (const p of colors) {
      const c = b.counts[p] || 0;
      if (!c) continue;
      const h = (H - 2 * pad) * c / max;
      y -= h;
      const r = svg("rect", {x: (i * bw + 1).toFixed(1), y: y.toFixed(1), width: Math.max(bw - 2, 1).toFixed(1),
        height: h.toFixed(1), class: p});
      const t = svg("title", {});
      t.textContent = new Date(b.start).toLocaleTimeString() + " " + p + ": " + c;
      r.append(t);
      chart.append(r);
    }
  });
  const top = svg("text", {x: 4, y: 12});
  top.textContent = sums.some((n) => n > 0) ? "up to " + max + " per bucket" : "no decisions in this window";
  chart.append(top);
  const from = svg("text", {x: 4, y: H - 4});
  from.textContent = "−" + minutes + " min";
  const to = svg("text", {x: W - 4, y: H - 4, "text-anchor": "end"});
  to.textContent = "now";
  chart.append(from, to);
  document.getElementById("mix").replaceChildren(chart);
}

function renderDecisions(st) {
  const d = st.decisions;
  document.getElementById("decisions-total").textContent =
    d.total + " since start, showing " + d.latest.length + " (the last " + d.kept + " are kept)";
  const rows = d.latest.map((x) => {
    const inputs = x.inputs ? el("details", null, el("summary", null, "inputs"),
      el("pre", null, JSON.stringify(x.inputs, null, 1))) : "—";
    const previewed = x.previewed;
    return el("tr", {"data-seq": x.seq, "data-request-id": x.request_id, "data-placement": x.placement},
      el("td", null, new Date(x.at).toLocaleTimeString()), el("td", {class: "request"}, x.request_id || "–"),
      el("td", null, (x.model || "–") + (x.lora ? " + " + x.lora : "")), el("td", null, badge(x.placement)),
      el("td", {class: "reason"}, x.reason), el("td", null, x.decode || "–"), el("td", null, x.prefill || "–"),
      el("td", {class: "num"}, num(x.isl)), el("td", {class: "num"}, previewed ? num(x.cached) : "–"),
      el("td", {class: "num"}, previewed ? num(x.eff) : "–"), el("td", {class: "num"}, previewed ? num(x.ratio, 2) : "–"),
      el("td", {class: "num"}, num(x.latency_us, 0)), el("td", null, inputs));
  });
  document.querySelector("#decisions tbody").replaceChildren(...rows);
}

function renderTransfers(st) {
  const rows = (st.transfers || []).map((x) =>
    el("tr", {"data-request-id": x.request_id, "data-outcome": x.outcome},
      el("td", null, new Date(x.at).toLocaleTimeString()), el("td", {class: "request"}, x.request_id || "–"),
      el("td", null, x.prefill), el("td", null, x.decode), el("td", null, badge(x.outcome)),
      el("td", {class: "num"}, num(x.prompt_tokens)),
      el("td", {class: "num"}, x.cached_tokens === null ? "–" : num(x.cached_tokens))));
  document.querySelector("#transfers tbody").replaceChildren(...rows);
}

function renderShadow(sh) {
  const p = document.getElementById("shadow");
  if (!sh) { p.textContent = "none (router.shadow_disagg_config)"; return; }
  const pct = (n) => sh.decisions ? (100 * n / sh.decisions).toFixed(1) + "%" : "–";
  const pairs = Object.entries(sh.pairs).map(([k, v]) => k + " " + v).join(", ");
  const reasons = Object.entries(sh.candidate_reasons || {}).map(([k, v]) => k + " " + v).join(", ");
  p.textContent = sh.candidate + " · " + sh.decisions + " decisions · same route " + pct(sh.same_route) +
    " · same workers " + pct(sh.same_workers) + (pairs ? " · routes " + pairs : "") + (reasons ? " · reasons " + reasons : "");
}

function renderConfig(c) {
  const a = c.admin;
  document.getElementById("config-admin").textContent = (c.config_file ? "file " + c.config_file + " merged with the flags" :
    "flags only") + " · admin: " + (a.token ? "bearer token" : "no token") + (a.tls ? ", TLS" : "") +
    (a.client_ca ? ", client certificates" : "") + " · secrets are redacted";
  document.getElementById("config").textContent = JSON.stringify(c.file, null, 2);
}

// costModelText names the slo policy's cost model and its model file ("" for other policies).
function costModelText(cm) {
  if (!cm) return "";
  return " · cost model " + cm.name + (cm.file ? " (file " + cm.file + ")" : " (named)");
}

async function poll() {
  try {
    const st = await api("api/state");
    if (!st) return;
    document.getElementById("auth").hidden = true;
    document.getElementById("main").hidden = false;
    document.getElementById("forget").hidden = !token();
    document.getElementById("error").hidden = true;
    const status = document.getElementById("status");
    status.textContent = (st.ready ? "ready" : "NOT READY") + " · policy " + st.policy + costModelText(st.cost_model) +
      " · updated " + new Date(st.now).toLocaleTimeString();
    status.className = "status " + (st.ready ? "ready" : "unready");
    renderFleet(st);
    renderMix(st.mix);
    renderDecisions(st);
    renderTransfers(st);
    renderShadow(st.shadow);
    if (Date.now() - lastConfig > CONFIG_EVERY_MS) {
      const c = await api("api/config");
      if (!c) return;
      renderConfig(c);
      lastConfig = Date.now();
    }
  } catch (err) {
    const e = document.getElementById("error");
    e.textContent = "Update failed: " + err.message;
    e.hidden = false;
  }
  schedule();
}

function schedule() { stop(); timer = setTimeout(poll, STATE_EVERY_MS); }
function stop() { if (timer !== null) { clearTimeout(timer); timer = null; } }

document.getElementById("auth").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
  document.getElementById("token").value = "";
  lastConfig = 0;
  poll();
});

document.getElementById("forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showAuth("");
});

poll();
