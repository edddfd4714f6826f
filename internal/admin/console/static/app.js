// hookbridge operator console: plain JavaScript, no framework, no build.
//
// Every value from the API is rendered with textContent or as an attribute
// through el(); nothing received is ever parsed as HTML.
//
// The admin token is kept in sessionStorage (this tab only) and sent as a
// Bearer header by fetch. No cookie carries it, so a cross-site form post
// reaches the API without credentials.
"use strict";

(() => {
  const TOKEN_KEY = "hookbridge.admin_token";
  const REFRESH_MS = 3000;
  const JOB_POLL_MS = 1000;
  const PAGES = ["login", "overview", "dead-letters", "conflicts", "outbox", "replay", "events", "endpoints"];

  const $ = (id) => document.getElementById(id);

  // ---- DOM helpers -------------------------------------------------------

  // el builds an element. attrs: "class", "text", "on<event>" handlers,
  // anything else as an attribute (true = present, null/false = absent).
  function el(tag, attrs, ...children) {
    const n = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v == null || v === false) continue;
        if (k === "class") n.className = v;
        else if (k === "text") n.textContent = String(v);
        else if (k.startsWith("on") && typeof v === "function") n.addEventListener(k.slice(2), v);
        else n.setAttribute(k, v === true ? "" : String(v));
      }
    }
    append(n, children);
    return n;
  }

  function append(n, children) {
    for (const c of children.flat(Infinity)) {
      if (c == null || c === false) continue;
      n.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  function replace(node, ...children) {
    node.replaceChildren();
    append(node, children);
  }

  // shape describes a node's structure and attributes, not its text.
  function shape(n) {
    if (n.nodeType !== Node.ELEMENT_NODE) return "#";
    let s = n.nodeName;
    for (const a of n.attributes) s += " " + a.name + "=" + a.value;
    s += "(";
    for (const c of n.childNodes) s += shape(c) + ",";
    return s + ")";
  }

  function textNodes(n, out) {
    for (const c of n.childNodes) {
      if (c.nodeType === Node.ELEMENT_NODE) textNodes(c, out);
      else out.push(c);
    }
    return out;
  }

  // refresh shows children in target like replace, but when target
  // already holds the same structure only the changed texts are written:
  // a live page keeps its nodes, so a button or link being clicked is not
  // swapped out under the pointer. Anything that decides what a button
  // does is in its attributes (aria-label, data-*), so equal shape means
  // equal behaviour.
  function refresh(target, ...children) {
    const next = document.createElement("div");
    append(next, children);
    const same = target.childNodes.length === next.childNodes.length &&
      [...target.childNodes].every((c, i) => shape(c) === shape(next.childNodes[i]));
    if (!same) {
      target.replaceChildren(...next.childNodes);
      return;
    }
    const olds = textNodes(target, []);
    const news = textNodes(next, []);
    olds.forEach((o, i) => { if (o.data !== news[i].data) o.data = news[i].data; });
  }

  // table renders rows as an accessible table. columns: {label, cell(row),
  // num}. Each cell carries its column label, which the phone layout shows
  // in front of the value.
  function table(caption, columns, rows, empty, attrs) {
    if (!rows || rows.length === 0) return el("p", { class: "empty", text: empty || "Nothing here." });
    const head = el("tr", null, columns.map((c) => el("th", { scope: "col", class: c.num ? "num" : null, text: c.label })));
    const body = rows.map((r) =>
      el("tr", attrs ? attrs(r) : null, columns.map((c) => {
        const v = c.cell(r);
        // One wrapper per cell keeps a cell one grid item in the phone layout.
        return el("td", { "data-label": c.label, class: c.num ? "num" : null }, el("span", null, v == null || v === "" ? "—" : v));
      })),
    );
    return el("div", { class: "scroll" },
      el("table", null, caption ? el("caption", { text: caption }) : null, el("thead", null, head), el("tbody", null, body)));
  }

  function fields(pairs) {
    return el("dl", { class: "fields" }, pairs.filter((p) => p).map(([k, v]) => [
      el("dt", { text: k }), el("dd", null, v == null || v === "" ? "—" : v),
    ]));
  }

  let flashTimer = null;
  let flashAt = 0;
  function flash(msg, kind) {
    const f = $("flash");
    replace(f, el("p", { class: kind || "ok", text: msg }));
    flashAt = Date.now();
    clearTimeout(flashTimer);
    flashTimer = setTimeout(() => f.replaceChildren(), kind === "error" ? 15000 : 6000);
  }

  // clearStaleFlash drops a message on a page change unless it was just
  // shown (an action that navigates after it reports).
  function clearStaleFlash() {
    if (Date.now() - flashAt > 1500) $("flash").replaceChildren();
  }

  function showError(target, err) {
    replace(target, el("p", { class: "error", role: "alert", text: errText(err) }));
  }

  function errText(err) {
    return err && err.message ? err.message : String(err);
  }

  // ---- formatting --------------------------------------------------------

  const nf = new Intl.NumberFormat("en");
  function num(n) {
    return n == null ? "—" : nf.format(n);
  }

  function bytes(n) {
    if (n == null) return "—";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    let v = Number(n);
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(v) : v.toFixed(1)) + " " + u[i];
  }

  function duration(sec) {
    if (sec == null) return "—";
    sec = Math.max(0, Math.round(Number(sec)));
    if (sec < 60) return sec + " s";
    if (sec < 3600) return Math.floor(sec / 60) + " min " + (sec % 60) + " s";
    if (sec < 86400) return Math.floor(sec / 3600) + " h " + Math.floor((sec % 3600) / 60) + " min";
    return Math.floor(sec / 86400) + " d " + Math.floor((sec % 86400) / 3600) + " h";
  }

  function time(iso) {
    if (!iso) return null;
    const d = new Date(iso);
    if (isNaN(d)) return String(iso);
    const ago = (Date.now() - d.getTime()) / 1000;
    const rel = ago >= 0 ? duration(ago) + " ago" : "in " + duration(-ago);
    return el("time", { datetime: iso, title: iso }, String(iso).replace("T", " ").replace(/\.\d+Z$/, "Z"), el("span", { class: "rel", text: " (" + rel + ")" }));
  }

  function rate(v) {
    if (v == null || !isFinite(v)) return "—";
    return (Math.abs(v) >= 10 ? v.toFixed(0) : v.toFixed(1)) + "/s";
  }

  function badge(text, kind) {
    return el("span", { class: "badge " + (kind || ""), text });
  }

  function link(href, text) {
    return el("a", { href, text });
  }

  // body returns the display text of a body from obj[key] (UTF-8 string)
  // or obj[key+"_base64"]; JSON is pretty-printed.
  function body(obj, key) {
    if (typeof obj[key] === "string") {
      const s = obj[key];
      try { return { text: JSON.stringify(JSON.parse(s), null, 2), note: "JSON, pretty-printed" }; } catch (_) { return { text: s, note: "text" }; }
    }
    const b64 = obj[key + "_base64"];
    if (typeof b64 === "string") {
      let n = 0;
      try { n = atob(b64).length; } catch (_) { /* shown as is */ }
      return { text: b64.replace(/(.{76})/g, "$1\n"), note: "binary, " + num(n) + " bytes, shown as base64" };
    }
    return { text: "", note: "no body" };
  }

  function bodyBlock(title, b, id) {
    return el("figure", { class: "body" },
      el("figcaption", null, el("strong", { text: title }), " ", el("span", { class: "hint", text: "(" + b.note + ")" })),
      el("pre", { id, tabindex: "0" }, b.text));
  }

  // ---- API ---------------------------------------------------------------

  class APIError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  async function api(method, path, payload) {
    const headers = { Accept: "application/json" };
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    const init = { method, headers, cache: "no-store", credentials: "omit" };
    if (payload !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    let resp;
    try {
      resp = await fetch("/api/v1/" + path, init);
    } catch (e) {
      throw new APIError(0, "Cannot reach hookbridge (" + errText(e) + ")");
    }
    const text = await resp.text();
    let data = null;
    if (text) { try { data = JSON.parse(text); } catch (_) { data = null; } }
    if (!resp.ok) {
      const msg = (data && typeof data.error === "string" && data.error) || resp.status + " " + resp.statusText;
      if (resp.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        loginNotice = "The admin token was refused (" + msg + "). Log in again.";
        if (current !== "login") location.hash = "#/login";
      }
      throw new APIError(resp.status, msg);
    }
    return data || {};
  }

  const get = (path) => api("GET", path);
  const post = (path, payload) => api("POST", path, payload || {});

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v != null && v !== "") q.set(k, v);
    const s = q.toString();
    return s ? "?" + s : "";
  }

  // ---- routing -----------------------------------------------------------

  let current = "";
  let loginNotice = "";
  let timers = [];
  // generation invalidates answers that arrive after the page changed.
  let generation = 0;

  function stopTimers() {
    for (const t of timers) clearInterval(t);
    timers = [];
  }

  function parseHash() {
    const h = location.hash.replace(/^#\/?/, "");
    const [path, qs] = h.split("?", 2);
    const parts = path.split("/").filter((p) => p !== "").map(decodeURIComponent);
    return { page: parts[0] || "overview", args: parts.slice(1), params: new URLSearchParams(qs || "") };
  }

  function route() {
    const r = parseHash();
    let page = PAGES.includes(r.page) ? r.page : "overview";
    if (!token() && page !== "login") page = "login";
    if (token() && page === "login") page = "overview";
    stopTimers();
    clearStaleFlash();
    generation++;
    current = page;
    for (const p of PAGES) $("page-" + p).hidden = p !== page;
    const authed = page !== "login";
    $("nav").hidden = !authed;
    $("logout").hidden = !authed;
    for (const a of document.querySelectorAll("#nav a")) {
      if (a.dataset.page === page) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    document.title = (page === "login" ? "Log in" : $("page-" + page).querySelector("h1").textContent) + " · hookbridge";
    const render = renderers[page];
    Promise.resolve(render(r.args, r.params, generation)).catch((e) => flash(errText(e), "error"));
    const h1 = $("page-" + page).querySelector("h1");
    if (h1 && document.activeElement !== $("login-token")) h1.focus({ preventScroll: false });
  }

  const stale = (gen) => gen !== generation;

  // navigate shows hash; the same hash again (a filter submitted twice)
  // fires no hashchange, so it renders directly.
  function navigate(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  }

  function every(ms, fn) {
    timers.push(setInterval(fn, ms));
  }

  // ---- login -------------------------------------------------------------

  function renderLogin() {
    $("login-error").textContent = loginNotice;
    loginNotice = "";
    $("login-token").value = "";
    $("login-token").focus();
  }

  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const t = $("login-token").value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    $("login-submit").disabled = true;
    try {
      await get("status");
      navigate("#/overview");
    } catch (e) {
      sessionStorage.removeItem(TOKEN_KEY);
      $("login-error").textContent = e.status === 401 ? "That token was refused." : errText(e);
    } finally {
      $("login-submit").disabled = false;
    }
  });

  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    navigate("#/login");
  });

  // ---- overview ----------------------------------------------------------

  // previous holds the last sample of each counter, for rates between
  // refreshes.
  let previous = null;

  function sampleRates(status) {
    const now = performance.now();
    const cur = { t: now, consumers: {}, streams: {} };
    for (const c of status.consumers || []) cur.consumers[c.name] = c;
    for (const s of status.streams || []) cur.streams[s.name] = s;
    const prev = previous;
    previous = cur;
    const rates = { consumers: {}, streams: {} };
    if (!prev) return rates;
    const dt = (now - prev.t) / 1000;
    if (dt <= 0) return rates;
    for (const [name, c] of Object.entries(cur.consumers)) {
      const p = prev.consumers[name];
      if (!p) continue;
      rates.consumers[name] = {
        delivered: (c.delivered_seq - p.delivered_seq) / dt,
        // A keyed consumer's floor is its busiest durable's, which drops
        // back when an idle partition gets work: no negative rate.
        acked: Math.max(0, c.ack_floor_seq - p.ack_floor_seq) / dt,
        pending: (c.pending - p.pending) / dt,
      };
    }
    for (const [name, s] of Object.entries(cur.streams)) {
      const p = prev.streams[name];
      if (p) rates.streams[name] = { stored: (s.last_seq - p.last_seq) / dt };
    }
    return rates;
  }

  function card(label, value, opts) {
    opts = opts || {};
    const v = el("span", { class: "value", id: opts.id, text: value });
    return el("div", { class: "card" + (opts.alert ? " alert" : "") },
      el("span", { class: "label", text: label }),
      opts.href ? el("a", { href: opts.href, class: "value-link" }, v) : v,
      opts.sub ? el("span", { class: "sub", text: opts.sub }) : null);
  }

  async function renderOverview(args, params, gen) {
    previous = null;
    const tick = async () => {
      if (!$("ov-live").checked && previous) return;
      let st;
      try {
        st = await get("status");
      } catch (e) {
        if (!stale(gen)) refresh($("ov-updated"), el("span", { class: "error", text: " update failed: " + errText(e) }));
        return;
      }
      if (stale(gen)) return;
      drawOverview(st, sampleRates(st));
    };
    await tick();
    if (!stale(gen)) every(REFRESH_MS, tick);
  }

  function drawOverview(st, rates) {
    fillConsumerNames(st);
    const ob = st.outbox || {};
    refresh($("ov-cards"),
      card("Ready", st.ready ? "yes" : "no", { id: "ov-ready", alert: !st.ready }),
      card("Dead letters", num(st.dead_letters_unresolved), {
        id: "ov-dead-letters", href: "#/dead-letters", alert: st.dead_letters_unresolved > 0, sub: "unresolved",
      }),
      card("Conflicts", num(st.conflicts_unresolved), {
        id: "ov-conflicts", href: "#/conflicts", alert: st.conflicts_unresolved > 0, sub: num(st.conflicts) + " in all",
      }),
      card("Outbox pending", num(ob.pending), { id: "ov-outbox-pending", sub: "oldest " + duration(ob.oldest_pending_age_seconds) }),
      card("Outbox dead", num(ob.dead), { id: "ov-outbox-dead", href: "#/outbox", alert: ob.dead > 0 }),
      (st.orphaned_durables || []).length ? card("Orphaned durables", num(st.orphaned_durables.length), {
        id: "ov-orphans", alert: true, sub: "keep HOOKS from being trimmed",
      }) : null,
    );

    refresh($("ov-consumers"), table(null, [
      { label: "Consumer", cell: (c) => [el("strong", { text: c.name }), keyedLine(c)] },
      { label: "Pending", num: true, cell: (c) => num(c.pending) },
      { label: "Ack pending", num: true, cell: (c) => num(c.ack_pending) },
      { label: "Redelivered", num: true, cell: (c) => num(c.redelivered) },
      { label: "Retrying", num: true, cell: (c) => num(c.retrying || 0) },
      { label: "Postponed", num: true, cell: (c) => num(c.postponed || 0) },
      { label: "Applied", num: true, cell: (c) => rate(rates.consumers[c.name] && rates.consumers[c.name].acked) },
      { label: "Delivered", num: true, cell: (c) => rate(rates.consumers[c.name] && rates.consumers[c.name].delivered) },
      { label: "Ack floor", num: true, cell: (c) => num(c.ack_floor_seq) },
      { label: "Oldest unacked", num: true, cell: (c) => c.oldest_unacked_age_seconds > 0 ? duration(c.oldest_unacked_age_seconds) : "—" },
      { label: "State", cell: consumerState },
      { label: "Action", cell: consumerAction },
    ], st.consumers, "No consumers are configured.", (c) => ({ "data-consumer": c.name })));
    refresh($("ov-keyed"), keyedDetails(st));
    refresh($("ov-orphans-hint"), (st.orphaned_durables || []).length ? el("p", { class: "hint" },
      "An orphaned durable belongs to no configured consumer (one taken out of the configuration). HOOKS keeps every message " +
      "it has not acked, so nothing after it is ever trimmed and the stream fills. Delete it once you are sure no consumer " +
      "will come back under that name.") : null);

    refresh($("ov-retrying"), table(cutCaption("Failing now, redelivered after their backoff and dead-lettered at max_deliver",
      st.retrying_by_consumer, st.retrying), [
      { label: "Consumer", cell: (f) => f.consumer },
      { label: "Event", cell: (f) => link(eventHref(f.source, f.event_id), f.source + " / " + f.event_id) },
      { label: "Stream seq", num: true, cell: (f) => num(f.stream_seq) },
      { label: "Failures", num: true, cell: (f) => num(f.failures) },
      { label: "Last failed", cell: (f) => time(f.last_failed_at) },
      { label: "Last error", cell: (f) => el("code", { text: f.last_error }) },
    ], st.retrying, "No event is failing right now.", (f) => ({ "data-event": f.event_id })));

    // A postponed event is not failing: its handler waits for a later
    // event of its key, for at most postpone_limit from when it was
    // first postponed.
    refresh($("ov-postponed"), table(cutCaption("Waiting for a later event of their key, dead-lettered once postponed for longer than postpone_limit",
      st.postponed_by_consumer, st.postponed), [
      { label: "Consumer", cell: (f) => f.consumer },
      { label: "Event", cell: (f) => link(eventHref(f.source, f.event_id), f.source + " / " + f.event_id) },
      { label: "Stream seq", num: true, cell: (f) => num(f.stream_seq) },
      { label: "Postponed since", cell: (f) => time(f.postponed_since) },
      { label: "Failures", num: true, cell: (f) => num(f.failures) },
      { label: "Last error", cell: (f) => el("code", { text: f.last_error }) },
    ], st.postponed, "No event is postponed.", (f) => ({ "data-event": f.event_id })));

    refresh($("ov-streams"), table(null, [
      { label: "Stream", cell: (s) => el("strong", { text: s.name }) },
      { label: "Messages", num: true, cell: (s) => num(s.messages) },
      { label: "Stored", num: true, cell: (s) => rate(rates.streams[s.name] && rates.streams[s.name].stored) },
      { label: "Bytes", num: true, cell: (s) => bytes(s.bytes) + (s.max_bytes > 0 ? " of " + bytes(s.max_bytes) : "") },
      { label: "Last seq", num: true, cell: (s) => num(s.last_seq) },
      // What a replay can reach is the oldest message still stored: the
      // max age is only one of the limits that trim the stream.
      { label: "Replay reaches back to", cell: (s) => s.messages && s.first_time ? el("span", { class: "reach" }, "seq " + num(s.first_seq) + ", ", time(s.first_time)) : "nothing stored" },
      { label: "Max age", cell: (s) => s.max_age_seconds > 0 ? duration(s.max_age_seconds) : "no limit" },
    ], st.streams, "No streams.", (s) => ({ "data-stream": s.name })));

    refresh($("ov-outbox"), fields([
      ["Pending", num(ob.pending)],
      ["Oldest pending", ob.pending > 0 ? duration(ob.oldest_pending_age_seconds) : "none pending"],
      ["Dead", ob.dead > 0 ? link("#/outbox", num(ob.dead) + " (view)") : "0"],
      ["Sent (kept until retention)", num(ob.sent)],
    ]));
    refresh($("ov-endpoints"), (st.endpoints || []).length || (st.orphaned_endpoint_durables || []).length ? [
      endpointsTable(st.endpoints || []),
      (st.orphaned_endpoint_durables || []).map((d) => el("p", { class: "warning" }, "Durable ", el("code", { text: d }),
        " on EVENTS belongs to no configured endpoint and keeps what it has not acked: ", el("code", { text: "nats consumer rm EVENTS " + d }))),
    ] : el("p", { class: "empty", text: "No delivery endpoints are configured." }));
    refresh($("ov-updated"), " updated " + new Date().toLocaleTimeString());
  }

  // ---- keyed consumers: partitions and members --------------------------

  // openKeyed holds the keyed consumers whose detail is open, and
  // openParts those whose partition list is; both survive the overview's
  // refreshes.
  const openKeyed = new Set();
  const openParts = new Set();

  function backlog(p) {
    return (p.pending || 0) + (p.ack_pending || 0);
  }

  function partitionsText(c) {
    const parts = c.partitions || [];
    const members = c.members || [];
    return num(parts.length) + " partitions, " + num(parts.filter((p) => p.pinned).length) + " pinned; " +
      num(members.length) + " member" + (members.length === 1 ? "" : "s");
  }

  // keyedLine is the short line under a keyed consumer's name.
  function keyedLine(c) {
    if (!(c.partitions || []).length) return null;
    return el("span", { class: "cell-sub", text: "keyed: " + partitionsText(c) });
  }

  // remember keeps a details element's open state in set across refreshes.
  function remember(set, key) {
    return (ev) => { if (ev.currentTarget.open) set.add(key); else set.delete(key); };
  }

  // keyedDetails shows, per keyed consumer, the instances serving it
  // (each with its partitions and backlog: its lag) and every partition
  // with its backlog and whether an instance holds it. A partition is
  // pinned to one instance from its first delivery on, so an idle one may
  // show no pin; one with a backlog and no pin is applied by nobody.
  function keyedDetails(st) {
    return (st.consumers || []).filter((c) => (c.partitions || []).length).map((c) => {
      const members = c.members || [];
      const owner = {};
      for (const m of members) for (const p of m.partitions || []) owner[p] = m;
      const waiting = c.partitions.filter((p) => backlog(p) > 0);
      const stranded = c.paused ? [] : waiting.filter((p) => !p.pinned).map((p) => p.partition);
      return el("details", { class: "keyed", "data-consumer": c.name, open: openKeyed.has(c.name), ontoggle: remember(openKeyed, c.name) },
        el("summary", null, el("strong", { text: c.name }), " — " + partitionsText(c)),
        stranded.length ? el("p", { class: "warning", "data-stranded": stranded.join(","), text: "Partition" + (stranded.length === 1 ? " " : "s ") +
          stranded.join(", ") + (stranded.length === 1 ? " has" : " have") + " a backlog and no instance holding it right now. " +
          "A member takes a partition over within about 15 s of the last one leaving; if this stays, check the members below." }) : null,
        table("Members: the instances running " + c.name, [
          { label: "Host", cell: (m) => m.host },
          { label: "PID", num: true, cell: (m) => String(m.pid) },
          { label: "Partitions", num: true, cell: (m) => num((m.partitions || []).length) },
          { label: "Serves", cell: (m) => (m.partitions || []).join(", ") },
          { label: "Backlog", num: true, cell: (m) => num(m.backlog) },
          { label: "Started", cell: (m) => time(m.started) },
        ], members, "No instance runs " + c.name + " now: its keyed events wait in their partitions.", (m) => ({ "data-member": m.id })),
        el("details", { class: "partitions", open: openParts.has(c.name), ontoggle: remember(openParts, c.name) },
          el("summary", { text: "Partitions: " + num(c.partitions.length) + ", " + num(waiting.length) + " with a backlog" }),
          table(null, [
            { label: "Partition", num: true, cell: (p) => String(p.partition) },
            { label: "Pending", num: true, cell: (p) => num(p.pending) },
            { label: "Ack pending", num: true, cell: (p) => num(p.ack_pending) },
            { label: "Ack floor", num: true, cell: (p) => num(p.ack_floor_seq) },
            { label: "Pinned", cell: (p) => p.pinned ? badge("pinned", "ok") : badge("not pinned", backlog(p) > 0 && !c.paused ? "bad" : "") },
            { label: "Member", cell: (p) => owner[p.partition] ? owner[p.partition].host + " (pid " + owner[p.partition].pid + ")" : "none" },
          ], c.partitions, null, (p) => ({ "data-partition": p.partition }))));
    });
  }

  function consumerState(c) {
    if (c.orphaned) return badge("orphaned", "bad");
    return c.paused ? badge("paused", "warn") : badge("running", "ok");
  }

  // armedDelete is the orphaned durable whose Delete was clicked once: the
  // second click deletes it. It survives the overview's refreshes.
  let armedDelete = null;

  function consumerAction(c) {
    if (c.orphaned) {
      const armed = armedDelete === c.name;
      return el("button", {
        type: "button", class: "small " + (armed ? "danger" : "secondary"), "data-durable": c.name,
        "aria-label": (armed ? "Confirm: delete durable " : "Delete durable ") + c.name,
        text: armed ? "Confirm delete" : "Delete",
        onclick: (ev) => armed ? deleteDurable(ev.currentTarget, c.name) : armDelete(ev.currentTarget, c.name),
      });
    }
    if (!operated(c)) return el("span", { class: "hint", text: "internal" });
    return el("button", {
      type: "button", class: "small secondary", "data-consumer": c.name,
      "aria-label": (c.paused ? "Resume " : "Pause ") + c.name,
      text: c.paused ? "Resume" : "Pause",
      onclick: (ev) => pauseResume(ev.currentTarget, c.name, !c.paused),
    });
  }

  function armDelete(button, name) {
    armedDelete = name;
    button.textContent = "Confirm delete";
    button.className = "small danger";
    button.setAttribute("aria-label", "Confirm: delete durable " + name);
    button.onclick = () => deleteDurable(button, name);
  }

  async function deleteDurable(button, name) {
    button.disabled = true;
    armedDelete = null;
    try {
      const r = await post("consumers/" + encodeURIComponent(name) + "/delete", {});
      flash("Durable " + r.name + " deleted (it had acked up to seq " + num(r.ack_floor_seq) + ").");
      previous = null;
      if (current === "overview") drawOverview(await get("status"), { consumers: {}, streams: {} });
    } catch (e) {
      flash("Could not delete " + name + ": " + errText(e), "error");
      button.disabled = false;
    }
  }

  // cutCaption says what a list of the overview is, and that it is cut
  // when there are more events than the overview lists.
  function cutCaption(what, byConsumer, list) {
    const all = Object.values(byConsumer || {}).reduce((a, n) => a + n, 0);
    const shown = (list || []).length;
    if (!shown) return null;
    return what + (all > shown ? " (the " + shown + " most recent of " + num(all) + ")" : "");
  }

  async function pauseResume(button, name, pause) {
    button.disabled = true;
    try {
      const r = await post("consumers/" + encodeURIComponent(name) + (pause ? "/pause" : "/resume"), {});
      flash("Consumer " + r.name + (r.paused ? " paused." : " resumed."));
      previous = null;
      if (current === "overview") drawOverview(await get("status"), { consumers: {}, streams: {} });
    } catch (e) {
      flash("Could not " + (pause ? "pause " : "resume ") + name + ": " + errText(e), "error");
      button.disabled = false;
    }
  }

  // operated reports whether a consumer is one of the configured ones an
  // operator pauses and replays: those read HOOKS. hookbridge's own
  // consumers (the conflict recorder reads HOOKS_CONFLICTS) are shown but
  // offer no action.
  function operated(c) {
    return c.stream === "HOOKS" && !c.orphaned;
  }

  let consumerNames = [];
  function fillConsumerNames(st) {
    const names = (st.consumers || []).filter(operated).map((c) => c.name);
    if (names.join("\n") === consumerNames.join("\n")) return;
    consumerNames = names;
    replace($("consumer-names"), names.map((n) => el("option", { value: n })));
  }

  // ---- dead letters ------------------------------------------------------

  function deadLetterStatus(d) {
    if (!d.resolved_at) return [badge("unresolved", "bad"), d.passed_by ? [" ", badge("passed", "warn")] : null];
    return badge(d.resolution || "resolved", "ok");
  }

  // passedText says which later event of a dead letter's ordering key
  // applied after it, and when.
  function passedText(pb) {
    return pb.event_id + " (stream seq " + num(pb.stream_seq) + ")";
  }

  async function renderDeadLetters(args, params, gen) {
    if (args.length > 0) return renderDeadLetter(args[0], gen);
    $("dl-list-view").hidden = false;
    $("dl-detail").hidden = true;
    const f = { consumer: params.get("consumer") || "", type: params.get("type") || "", resolved: params.get("resolved") || "false" };
    $("dl-consumer").value = f.consumer;
    $("dl-type").value = f.type;
    $("dl-resolved").value = f.resolved;
    const list = $("dl-list");
    replace(list, el("p", { class: "loading", text: "Loading…" }));
    const cols = [
      { label: "ID", cell: (d) => link("#/dead-letters/" + encodeURIComponent(d.id), String(d.id)) },
      { label: "Consumer", cell: (d) => d.consumer },
      { label: "Event type", cell: (d) => d.event_type },
      { label: "Event id", cell: (d) => el("code", { text: d.event_id }) },
      { label: "Source", cell: (d) => d.source },
      { label: "Deliveries", num: true, cell: (d) => num(d.deliveries) },
      { label: "Reason", cell: (d) => d.reason },
      { label: "Dead since", cell: (d) => time(d.dead_at) },
      { label: "Status", cell: (d) => deadLetterStatus(d) },
      { label: "", cell: (d) => link("#/dead-letters/" + encodeURIComponent(d.id), "Open") },
    ];
    await pagedList(list, "dead-letters", f, cols, "No dead letters match.", gen, (d) => ({ "data-id": d.id }));
    if (!stale(gen)) refreshConsumerNames();
  }

  // pagedList shows the first page of a list endpoint and a "Load more"
  // button while next_cursor is set.
  async function pagedList(target, path, filter, cols, empty, gen, rowAttrs) {
    let rows = [];
    const load = async (cursor) => {
      let r;
      try {
        r = await get(path + query(Object.assign({}, filter, { cursor })));
      } catch (e) {
        if (!stale(gen)) showError(target, e);
        return;
      }
      if (stale(gen)) return;
      rows = rows.concat(r.items || []);
      const more = r.next_cursor
        ? el("button", { type: "button", class: "secondary", text: "Load more", onclick: () => load(r.next_cursor) })
        : null;
      replace(target,
        el("p", { class: "meta", text: num(rows.length) + (r.next_cursor ? " shown, more available" : " in all") }),
        table(null, cols, rows, empty, rowAttrs), more);
    };
    await load("");
  }

  async function refreshConsumerNames() {
    if (consumerNames.length) return;
    try { fillConsumerNames(await get("status")); } catch (_) { /* the datalist is only a help */ }
  }

  $("dl-filter").addEventListener("submit", (ev) => {
    ev.preventDefault();
    navigate("#/dead-letters" + query({ consumer: $("dl-consumer").value.trim(), type: $("dl-type").value.trim(), resolved: $("dl-resolved").value }));
  });

  async function renderDeadLetter(id, gen) {
    $("dl-list-view").hidden = true;
    const box = $("dl-detail");
    box.hidden = false;
    replace(box, el("p", { class: "loading", text: "Loading…" }));
    let d;
    try {
      d = await get("dead-letters/" + encodeURIComponent(id));
    } catch (e) {
      if (!stale(gen)) replace(box, backLink("#/dead-letters", "All dead letters"), el("p", { class: "error", role: "alert", text: errText(e) }));
      return;
    }
    if (stale(gen)) return;
    const actions = [];
    if (!d.resolved_at) {
      const pb = d.passed_by;
      actions.push(el("div", { class: "action" },
        el("h3", { text: "Requeue" }),
        el("p", { class: "hint", text: "Re-delivers this event through the stream to " + d.consumer + ", once. Fix its cause first, or it fails again." }),
        pb ? el("p", { class: "warning", id: "dl-requeue-warning" }, "A later event of its ordering key, ", el("code", { text: pb.event_id }),
          " (stream seq " + num(pb.stream_seq) + "), applied ", time(pb.at),
          ". Requeueing this one now applies it after that event: out of order. The button asks you to confirm.") : null,
        el("button", { type: "button", id: "dl-requeue", "data-passed": pb ? "true" : null,
          onclick: (ev) => pb ? armRequeue(ev.currentTarget, d.id, pb) : requeueDeadLetter(ev.currentTarget, d.id, false) }, "Requeue event")));
      const reason = el("input", { id: "dl-discard-reason", name: "reason", required: true, placeholder: "e.g. test event, sender resent it" });
      actions.push(el("form", { class: "action", id: "dl-discard-form", onsubmit: (ev) => { ev.preventDefault(); discardDeadLetter(ev.currentTarget, d.id, reason.value.trim()); } },
        el("h3", { text: "Discard" }),
        el("p", { class: "hint", text: "Marks it resolved without applying it. The row is kept with your reason." }),
        el("label", { for: "dl-discard-reason", text: "Reason" }), reason,
        el("button", { type: "submit", class: "danger", id: "dl-discard" }, "Discard event")));
    }
    replace(box,
      backLink("#/dead-letters", "All dead letters"),
      el("h2", null, "Dead letter ", el("span", { id: "dl-detail-id", text: String(d.id) }), " ", el("span", { id: "dl-detail-status" }, deadLetterStatus(d))),
      fields([
        ["Consumer", d.consumer],
        ["Source", d.source],
        ["Event id", el("code", { text: d.event_id })],
        ["Event type", d.event_type],
        ["Subject", el("code", { text: d.subject })],
        ["Stream seq", num(d.stream_seq)],
        ["Deliveries", num(d.deliveries)],
        ["Reason", d.reason],
        ["Dead since", time(d.dead_at)],
        d.ordering_key ? ["Ordering key", el("code", { id: "dl-ordering-key", text: d.ordering_key })] : null,
        d.ordering_key ? ["Passed by", d.passed_by
          ? el("span", { id: "dl-passed-by" }, link(eventHref(d.source, d.passed_by.event_id), passedText(d.passed_by)), ", applied ", time(d.passed_by.at))
          : el("span", { id: "dl-passed-by", text: "no later event of its key has applied" })] : null,
        d.resolved_at ? ["Resolved", el("span", null, time(d.resolved_at), " — ", d.resolution || "")] : null,
        ["Life of this event", link(eventHref(d.source, d.event_id), "Look up " + d.event_id)],
      ]),
      d.last_error ? el("figure", { class: "body" }, el("figcaption", null, el("strong", { text: "Last error" })), el("pre", { class: "err", id: "dl-last-error" }, d.last_error)) : null,
      bodyBlock("Body", body(d, "body"), "dl-body"),
      actions.length ? el("div", { class: "actions-row" }, actions) : null);
  }

  function backLink(href, text) {
    return el("p", { class: "back" }, el("a", { href, text: "← " + text }));
  }

  // armRequeue is the first click on Requeue of a dead letter a later
  // event of its key has passed: it asks for an explicit second click,
  // which applies it out of order.
  function armRequeue(button, id, pb) {
    button.textContent = "Confirm: apply out of order, after " + pb.event_id;
    button.className = "danger";
    button.setAttribute("aria-describedby", "dl-requeue-warning");
    button.onclick = null;
    const armed = button.cloneNode(true);
    armed.addEventListener("click", () => requeueDeadLetter(armed, id, true));
    button.replaceWith(armed);
    armed.focus();
  }

  async function requeueDeadLetter(button, id, outOfOrder) {
    button.disabled = true;
    try {
      const r = await post("dead-letters/" + encodeURIComponent(id) + "/requeue", outOfOrder ? { out_of_order: true } : {});
      let msg = r.status === "requeued"
        ? "Dead letter " + r.id + " requeued: stream message " + r.stream_seq + " re-delivered" + (r.outcome ? " (" + r.outcome + ")" : "") + "."
        : "Dead letter " + r.id + " was already resolved; nothing changed.";
      if (r.out_of_order && r.passed_by) msg += " Applied out of order, after " + passedText(r.passed_by) + ".";
      flash(msg);
    } catch (e) {
      flash("Requeue failed: " + errText(e), "error");
      // A refusal because a later event passed it meanwhile: show the
      // page again, with the warning and the confirmation.
      if (e.status === 409 && current === "dead-letters") renderDeadLetter(id, generation);
      else button.disabled = false;
      return;
    }
    if (current === "dead-letters") renderDeadLetter(id, generation);
  }

  async function discardDeadLetter(form, id, reason) {
    if (!reason) return;
    const button = form.querySelector("button");
    button.disabled = true;
    try {
      const r = await post("dead-letters/" + encodeURIComponent(id) + "/discard", { reason });
      flash(r.status === "discarded" ? "Dead letter " + r.id + " discarded." : "Dead letter " + r.id + " was already resolved; nothing changed.");
    } catch (e) {
      flash("Discard failed: " + errText(e), "error");
      button.disabled = false;
      return;
    }
    if (current === "dead-letters") renderDeadLetter(id, generation);
  }

  // ---- conflicts ---------------------------------------------------------

  async function renderConflicts(args, params, gen) {
    if (args.length > 0) return renderConflict(args[0], gen);
    $("cf-list-view").hidden = false;
    $("cf-detail").hidden = true;
    const f = { resolved: params.get("resolved") || "false" };
    $("cf-resolved").value = f.resolved;
    const list = $("cf-list");
    replace(list, el("p", { class: "loading", text: "Loading…" }));
    await pagedList(list, "conflicts", f, [
      { label: "ID", cell: (c) => link("#/conflicts/" + encodeURIComponent(c.id), String(c.id)) },
      { label: "Detected by", cell: (c) => c.detected_by },
      { label: "Event type", cell: (c) => c.event_type },
      { label: "Event id", cell: (c) => el("code", { text: c.event_id }) },
      { label: "Source", cell: (c) => c.source },
      { label: "Detected", cell: (c) => time(c.detected_at) },
      { label: "Status", cell: (c) => c.resolved_at ? badge("resolved", "ok") : badge("unresolved", "bad") },
      { label: "", cell: (c) => link("#/conflicts/" + encodeURIComponent(c.id), "Compare") },
    ], "No conflicts match.", gen, (c) => ({ "data-id": c.id }));
  }

  $("cf-filter").addEventListener("submit", (ev) => {
    ev.preventDefault();
    navigate("#/conflicts" + query({ resolved: $("cf-resolved").value }));
  });

  async function renderConflict(id, gen) {
    $("cf-list-view").hidden = true;
    const box = $("cf-detail");
    box.hidden = false;
    replace(box, el("p", { class: "loading", text: "Loading…" }));
    let c;
    try {
      c = await get("conflicts/" + encodeURIComponent(id));
    } catch (e) {
      if (!stale(gen)) replace(box, backLink("#/conflicts", "All conflicts"), el("p", { class: "error", role: "alert", text: errText(e) }));
      return;
    }
    if (stale(gen)) return;
    const a = body(c, "original_body");
    const b = body(c, "rejected_body");
    let resolve = null;
    if (!c.resolved_at) {
      const text = el("input", { id: "cf-resolution", name: "resolution", required: true, placeholder: "e.g. sender bug, original kept" });
      resolve = el("form", { class: "action", id: "cf-resolve-form", onsubmit: (ev) => { ev.preventDefault(); resolveConflict(ev.currentTarget, c.id, text.value.trim()); } },
        el("h3", { text: "Resolve" }),
        el("p", { class: "hint", text: "Records what was decided. hookbridge changes no data: the original stays applied." }),
        el("label", { for: "cf-resolution", text: "Resolution" }), text,
        el("button", { type: "submit", id: "cf-resolve" }, "Mark resolved"));
    }
    replace(box,
      backLink("#/conflicts", "All conflicts"),
      el("h2", null, "Conflict ", el("span", { id: "cf-detail-id", text: String(c.id) }), " ",
        el("span", { id: "cf-detail-status" }, c.resolved_at ? badge("resolved", "ok") : badge("unresolved", "bad"))),
      fields([
        ["Detected by", c.detected_by === "ingress" ? "the ingress (inside the duplicate window)" : "consumer " + c.detected_by],
        ["Source", c.source],
        ["Event id", el("code", { text: c.event_id })],
        ["Event type", c.event_type],
        ["Stream seq", c.rejected_seq ? num(c.rejected_seq)
          : "not stored: the ingress refused it" + (c.original_seq ? " (the original is stream message " + num(c.original_seq) + ")" : "")],
        ["Detected", time(c.detected_at)],
        c.resolved_at ? ["Resolved", el("span", null, time(c.resolved_at), " — ", c.resolution || "")] : null,
        ["Life of this event", link(eventHref(c.source, c.event_id), "Look up " + c.event_id)],
      ]),
      diffView(a, b),
      resolve);
  }

  async function resolveConflict(form, id, resolution) {
    if (!resolution) return;
    const button = form.querySelector("button");
    button.disabled = true;
    try {
      const r = await post("conflicts/" + encodeURIComponent(id) + "/resolve", { resolution });
      flash(r.status === "resolved" ? "Conflict " + r.id + " resolved." : "Conflict " + r.id + " was already resolved; nothing changed.");
    } catch (e) {
      flash("Resolve failed: " + errText(e), "error");
      button.disabled = false;
      return;
    }
    if (current === "conflicts") renderConflict(id, generation);
  }

  // ---- diff --------------------------------------------------------------

  // diffLines returns the edit script from a to b as {op: "eq"|"del"|"ins",
  // a, b} (line texts). The common head and tail are taken off first; the
  // middle is an LCS table when it is small enough, else one replaced block.
  function diffLines(a, b) {
    let head = 0;
    while (head < a.length && head < b.length && a[head] === b[head]) head++;
    let tail = 0;
    while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
    const am = a.slice(head, a.length - tail);
    const bm = b.slice(head, b.length - tail);
    const ops = a.slice(0, head).map((l) => ({ op: "eq", a: l, b: l }));
    const n = am.length;
    const m = bm.length;
    if (n * m > 4000000) {
      for (const l of am) ops.push({ op: "del", a: l });
      for (const l of bm) ops.push({ op: "ins", b: l });
    } else {
      // lcs[i][j] = LCS length of am[i:] and bm[j:].
      const w = m + 1;
      const lcs = new Uint32Array((n + 1) * w);
      for (let i = n - 1; i >= 0; i--) {
        for (let j = m - 1; j >= 0; j--) {
          lcs[i * w + j] = am[i] === bm[j] ? lcs[(i + 1) * w + j + 1] + 1 : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
        }
      }
      let i = 0;
      let j = 0;
      while (i < n && j < m) {
        if (am[i] === bm[j]) { ops.push({ op: "eq", a: am[i], b: bm[j] }); i++; j++; } else if (lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) { ops.push({ op: "del", a: am[i++] }); } else { ops.push({ op: "ins", b: bm[j++] }); }
      }
      while (i < n) ops.push({ op: "del", a: am[i++] });
      while (j < m) ops.push({ op: "ins", b: bm[j++] });
    }
    for (const l of a.slice(a.length - tail)) ops.push({ op: "eq", a: l, b: l });
    return ops;
  }

  // sideBySide pairs each run of deleted lines with the run of inserted
  // lines that follows it, so a changed line sits next to its new version.
  function sideBySide(ops) {
    const rows = [];
    let dels = [];
    let ins = [];
    const flush = () => {
      for (let k = 0; k < Math.max(dels.length, ins.length); k++) rows.push({ a: dels[k], b: ins[k], changed: true });
      dels = [];
      ins = [];
    };
    for (const o of ops) {
      if (o.op === "eq") { flush(); rows.push({ a: o.a, b: o.b, changed: false }); } else if (o.op === "del") dels.push(o.a);
      else ins.push(o.b);
    }
    flush();
    return rows;
  }

  // charMarks renders text with the part that differs from other (after
  // the common prefix and suffix) in a <mark>.
  function charMarks(text, other) {
    if (text == null) return [];
    if (other == null) return [el("mark", { text })];
    let p = 0;
    while (p < text.length && p < other.length && text[p] === other[p]) p++;
    let s = 0;
    while (s < text.length - p && s < other.length - p && text[text.length - 1 - s] === other[other.length - 1 - s]) s++;
    const mid = text.slice(p, text.length - s);
    return [text.slice(0, p), mid ? el("mark", { text: mid }) : null, text.slice(text.length - s)];
  }

  function diffView(a, b) {
    const rows = sideBySide(diffLines(a.text.split("\n"), b.text.split("\n")));
    const changed = rows.filter((r) => r.changed).length;
    let la = 0;
    let lb = 0;
    const trs = rows.map((r) => {
      const na = r.a != null ? ++la : "";
      const nb = r.b != null ? ++lb : "";
      const cls = (x) => (r.changed ? (x != null ? "chg" : "gap") : "");
      return el("tr", { class: r.changed ? "changed" : null },
        el("td", { class: "ln", "aria-hidden": "true", text: na }),
        el("td", { class: "code a " + cls(r.a) }, r.changed ? charMarks(r.a, r.b) : r.a),
        el("td", { class: "ln", "aria-hidden": "true", text: nb }),
        el("td", { class: "code b " + cls(r.b) }, r.changed ? charMarks(r.b, r.a) : r.b));
    });
    return el("section", { class: "diff-box", "aria-label": "Bodies compared" },
      el("h3", { text: "Original and rejected body" }),
      el("p", { class: "meta", id: "cf-diff-summary", text: changed === 0 ? "The bodies are identical once pretty-printed (they differ in formatting only)." : changed + " line" + (changed === 1 ? "" : "s") + " differ; changes are highlighted." }),
      el("div", { class: "scroll" },
        el("table", { class: "diff" },
          el("colgroup", null, el("col", { class: "ln" }), el("col"), el("col", { class: "ln" }), el("col")),
          el("thead", null, el("tr", null,
            el("th", { colspan: "2", scope: "col" }, "Original (applied) ", el("span", { class: "hint", text: "(" + a.note + ")" })),
            el("th", { colspan: "2", scope: "col" }, "Rejected (refused) ", el("span", { class: "hint", text: "(" + b.note + ")" })))),
          el("tbody", null, trs))),
      el("details", null, el("summary", { text: "Raw bodies" }),
        el("div", { class: "pair" }, bodyBlock("Original", a, "cf-original"), bodyBlock("Rejected", b, "cf-rejected"))));
  }

  // ---- outbox ------------------------------------------------------------

  async function renderOutbox(args, params, gen) {
    const state = params.get("state") === "pending" ? "pending" : "dead";
    $("ob-state").value = state;
    const list = $("ob-list");
    replace(list, el("p", { class: "loading", text: "Loading…" }));
    await pagedList(list, "outbox", { state }, [
      { label: "ID", cell: (o) => String(o.id) },
      { label: "Event id", cell: (o) => el("code", { text: o.event_id }) },
      { label: "Subject", cell: (o) => el("code", { text: o.subject }) },
      { label: "Attempts", num: true, cell: (o) => num(o.attempts) },
      { label: "Last error", cell: (o) => o.last_error ? el("span", { class: "err", text: o.last_error }) : null },
      { label: "Created", cell: (o) => time(o.created_at) },
      { label: state === "dead" ? "Gave up" : "Next attempt", cell: (o) => time(o.next_attempt_at) },
      { label: "Action", cell: (o) => state === "dead"
        ? el("button", { type: "button", class: "small", "aria-label": "Requeue outbox row " + o.id, onclick: (ev) => requeueOutbox(ev.currentTarget, o.id) }, "Requeue")
        : null },
    ], state === "dead" ? "No dead outbox rows: the relay has published everything it was given." : "Nothing is waiting to be relayed.", gen, (o) => ({ "data-id": o.id }));
  }

  $("ob-filter").addEventListener("submit", (ev) => {
    ev.preventDefault();
    navigate("#/outbox" + query({ state: $("ob-state").value }));
  });

  async function requeueOutbox(button, id) {
    button.disabled = true;
    try {
      const r = await post("outbox/" + encodeURIComponent(id) + "/requeue", {});
      flash(r.status === "requeued" ? "Outbox row " + r.id + " requeued; the relay will publish it." : "Outbox row " + r.id + " is not dead; nothing changed.");
      button.textContent = r.status === "requeued" ? "Requeued" : "Not dead";
    } catch (e) {
      flash("Requeue failed: " + errText(e), "error");
      button.disabled = false;
    }
  }

  // ---- replay ------------------------------------------------------------

  let replayPlan = null; // the request of the last dry run, applied as is

  // The outcomes a replay's summary counts (ops.ReplayResult).
  const REPLAY_OUTCOMES = ["new", "duplicate", "conflict", "processed", "failed", "held", "missing", "mismatch", "unusable"];

  function replayRequest() {
    const r = { consumer: $("rp-consumer").value };
    const intField = (id, key) => {
      const v = $(id).value.trim();
      if (v !== "") r[key] = Number(v);
    };
    intField("rp-from", "from_seq");
    intField("rp-to", "to_seq");
    for (const [id, key] of [["rp-since", "since"], ["rp-until", "until"], ["rp-type", "type"]]) {
      const v = $(id).value.trim();
      if (v !== "") r[key] = v;
    }
    if ($("rp-dead").checked) r.dead_letters = true;
    if ($("rp-dead").checked && $("rp-out-of-order").checked) r.out_of_order = true;
    return r;
  }

  // The override applies to dead letters only.
  $("rp-dead").addEventListener("change", () => {
    $("rp-out-of-order").disabled = !$("rp-dead").checked;
    if (!$("rp-dead").checked) $("rp-out-of-order").checked = false;
  });

  async function renderReplay(args, params, gen) {
    const sel = $("rp-consumer");
    const keep = sel.value || params.get("consumer") || "";
    let st;
    try {
      st = await get("status");
    } catch (e) {
      if (!stale(gen)) showError($("rp-result"), e);
      return;
    }
    if (stale(gen)) return;
    fillConsumerNames(st);
    replace(sel, (st.consumers || []).filter(operated).map((c) => el("option", { value: c.name, text: c.name })));
    if (keep && consumerNames.includes(keep)) sel.value = keep;
  }

  // A changed selector invalidates the dry run: Apply always runs exactly
  // what was previewed.
  $("rp-form").addEventListener("input", () => {
    if (replayPlan) {
      replayPlan = null;
      $("rp-apply-box").hidden = true;
      replace($("rp-result"), el("p", { class: "hint", text: "The selection changed: run the dry run again." }));
    }
  });

  $("rp-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const req = replayRequest();
    if (!req.consumer) { flash("Choose a consumer.", "error"); return; }
    replayPlan = null;
    $("rp-apply-box").hidden = true;
    $("rp-progress").hidden = true;
    const out = $("rp-result");
    replace(out, el("p", { class: "loading", text: "Running the dry run…" }));
    $("rp-dry").disabled = true;
    let r;
    try {
      r = await post("replay", Object.assign({}, req, { dry_run: true }));
    } catch (e) {
      showError(out, e);
      return;
    } finally {
      $("rp-dry").disabled = false;
    }
    const sum = r.summary || {};
    const byType = Object.entries(sum.by_type || {}).sort((x, y) => y[1] - x[1]);
    const byOutcome = REPLAY_OUTCOMES.filter((o) => sum[o] > 0).map((o) => [o, sum[o]]).sort((x, y) => y[1] - x[1]);
    const items = r.items || [];
    const outcomes = items.some((i) => i.outcome);
    const skips = req.dead_letters && !req.out_of_order;
    const toApply = (sum.selected || 0) - (skips ? sum.passed_dead_letters || 0 : 0);
    replace(out,
      el("h2", { text: "Dry run" }),
      el("p", { id: "rp-summary", class: "summary" }, el("strong", { id: "rp-count", text: num(sum.selected || 0) }),
        " message" + (sum.selected === 1 ? "" : "s") + " would be re-delivered to " + req.consumer + "."),
      byOutcome.length ? el("p", { id: "rp-outcomes" }, "What the consumer's inbox would make of them: ",
        byOutcome.map(([o, n], i) => [i ? ", " : "", el("strong", { text: num(n) }), " " + o.replace("_", " ")]),
        ". Duplicates change nothing.") : null,
      sum.new_dead_letters ? el("p", { id: "rp-dead-note", class: "hint" }, el("strong", { text: num(sum.new_dead_letters) }),
        " of the new are dead letters: Apply re-delivers them, and each fails again unless its cause was fixed.") : null,
      sum.passed_dead_letters ? el("p", { id: "rp-passed", class: "warning" }, el("strong", { text: num(sum.passed_dead_letters) }),
        skips ? " of the new are dead letters a later event of their ordering key has passed: Apply leaves them alone. " +
          "To apply them after those events, out of order, tick the box above and run the dry run again."
          : " of the new are dead letters a later event of their ordering key has passed: Apply applies them after those events, out of order.") : null,
      byType.length ? table("By event type", [
        { label: "Event type", cell: (t) => t[0] },
        { label: "Messages", num: true, cell: (t) => num(t[1]) },
      ], byType) : null,
      items.length ? table(items.length < (sum.selected || 0) ? "The first " + items.length : "Messages", [
        { label: "Stream seq", num: true, cell: (i) => num(i.stream_seq) },
        { label: "Event id", cell: (i) => el("code", { text: i.event_id }) },
        { label: "Event type", cell: (i) => i.event_type },
        outcomes ? { label: "Would be", cell: (i) => i.skipped ? badge("left alone: passed", "warn")
          : i.outcome ? badge(i.outcome.replace("_", " "), i.outcome === "new" && !i.dead_letter_id ? "ok" : i.outcome === "conflict" || i.dead_letter_id ? "bad" : "") : null } : null,
        items.some((i) => i.note) ? { label: "Note", cell: (i) => i.dead_letter_id
          ? el("span", {}, link("#/dead-letters/" + encodeURIComponent(i.dead_letter_id), "dead letter " + i.dead_letter_id), i.note.replace(/^dead letter \d+/, ""))
          : null } : null,
      ].filter((c) => c), items) : null);
    if (toApply > 0) {
      replayPlan = req;
      $("rp-apply").textContent = "Apply: re-deliver " + num(toApply) + " message" + (toApply === 1 ? "" : "s");
      $("rp-apply").disabled = false;
      $("rp-apply-box").hidden = false;
    }
  });

  $("rp-apply").addEventListener("click", async () => {
    if (!replayPlan) return;
    const req = replayPlan;
    $("rp-apply").disabled = true;
    let job;
    try {
      job = await post("replay", Object.assign({}, req, { dry_run: false }));
    } catch (e) {
      flash("Replay failed to start: " + errText(e), "error");
      $("rp-apply").disabled = false;
      return;
    }
    replayPlan = null;
    $("rp-apply-box").hidden = true;
    $("rp-progress").hidden = false;
    const poll = async () => {
      let s;
      try {
        s = await get("replay/" + encodeURIComponent(job.job_id));
      } catch (e) {
        $("rp-progress-text").textContent = "Progress unknown: " + errText(e);
        return true;
      }
      const bar = $("rp-bar");
      bar.max = Math.max(s.total || 0, 1);
      bar.value = s.done || 0;
      const txt = num(s.done) + " of " + num(s.total) + " re-delivered";
      // Held ones were read and not applied, to keep their key's order.
      const held = (s.summary && s.summary.held) || 0;
      const left = (held ? " " + num(held) + " of them held, not applied: an earlier event of their ordering key failed or is not applied yet; " +
        "replay " + (held === 1 ? "it" : "them") + " once it is." : "") +
        (s.skipped_passed ? " " + num(s.skipped_passed) + " dead letter" + (s.skipped_passed === 1 ? "" : "s") +
        " left alone: a later event of their ordering key had passed them." : "");
      if (s.state === "done") {
        $("rp-progress-text").textContent = "Done: " + txt + "." + left;
        $("rp-progress-text").dataset.state = "done";
        flash("Replay finished: " + txt + "." + left);
        return true;
      }
      if (s.state === "failed") {
        $("rp-progress-text").textContent = "Failed after " + txt + ": " + (s.error || "unknown error") + "." + left;
        $("rp-progress-text").dataset.state = "failed";
        flash("Replay failed: " + (s.error || "unknown error"), "error");
        return true;
      }
      $("rp-progress-text").textContent = "Running: " + txt + "…";
      $("rp-progress-text").dataset.state = "running";
      return false;
    };
    $("rp-progress-text").textContent = "Started job " + job.job_id + "…";
    $("rp-progress-text").dataset.state = "running";
    if (await poll()) return;
    // The poll keeps going if the operator navigates away; its own timer
    // ends it when the job does.
    const t = setInterval(async () => {
      if (await poll()) clearInterval(t);
    }, JOB_POLL_MS);
  });

  // ---- event lookup ------------------------------------------------------

  function eventHref(source, id) {
    return "#/events/" + encodeURIComponent(source || "") + "/" + encodeURIComponent(id || "");
  }

  const stateKinds = { processed: "ok", duplicate: "ok", conflict: "bad", pending: "warn", redelivered: "warn", postponed: "warn", dead_lettered: "bad", sent: "ok", dead: "bad" };

  async function renderEvents(args, params, gen) {
    const out = $("ev-result");
    if (args.length < 2) {
      out.replaceChildren();
      return;
    }
    const [source, id] = args;
    $("ev-source").value = source;
    $("ev-id").value = id;
    replace(out, el("p", { class: "loading", text: "Looking up…" }));
    let e;
    try {
      e = await get("events/" + encodeURIComponent(source) + "/" + encodeURIComponent(id));
    } catch (err) {
      if (!stale(gen)) showError(out, err);
      return;
    }
    if (stale(gen)) return;
    const s = e.stored;
    replace(out,
      el("h2", null, "Event ", el("code", { text: e.event_id }), " from ", e.source),
      el("h3", { text: "1. Stored in the stream" }),
      s ? fields([
        ["Stream", s.stream],
        ["Stream seq", num(s.seq)],
        ["Subject", el("code", { text: s.subject })],
        ["Received", time(s.received_at)],
      ]) : el("p", { class: "empty", id: "ev-not-stored", text: "Not in HOOKS: never received, or older than the stream's max age." }),
      el("h3", { text: "2. Consumers" }),
      table(null, [
        { label: "Consumer", cell: (c) => c.name },
        { label: "Outcome", cell: (c) => badge(c.state.replace("_", " "), stateKinds[c.state]) },
        { label: "Stream seq", num: true, cell: (c) => num(c.stream_seq) },
        { label: "Processed", cell: (c) => time(c.processed_at) },
        { label: "Dead letter", cell: (c) => c.dead_letter_id ? link("#/dead-letters/" + encodeURIComponent(c.dead_letter_id), "Dead letter " + c.dead_letter_id) : null },
        { label: "Failures", num: true, cell: (c) => c.failures ? num(c.failures) : null },
        { label: "Postponed since", cell: (c) => time(c.postponed_since) },
        { label: "Last failed", cell: (c) => time(c.last_failed_at) },
        { label: "Last error", cell: (c) => c.last_error ? el("code", { text: c.last_error }) : null },
      ], e.consumers, "No consumer takes this event.", (c) => ({ "data-consumer": c.name, "data-state": c.state })),
      (e.dead_letters || []).length ? [el("h3", { text: "Dead letters" }), table(null, [
        { label: "Dead letter", cell: (d) => link("#/dead-letters/" + encodeURIComponent(d.id), "Dead letter " + d.id) },
        { label: "Consumer", cell: (d) => d.consumer },
        { label: "Stream seq", num: true, cell: (d) => num(d.stream_seq) },
        { label: "Resolved", cell: (d) => d.resolved_at ? [time(d.resolved_at), " (" + (d.resolution || "resolved") + ")"] : badge("unresolved", "bad") },
      ], e.dead_letters, null, (d) => ({ "data-dead-letter": d.id }))] : null,
      (e.conflicts || []).length ? [el("h3", { text: "Conflicts" }), table(null, [
        { label: "Conflict", cell: (x) => link("#/conflicts/" + encodeURIComponent(x.id), "Conflict " + x.id) },
        { label: "Detected by", cell: (x) => x.detected_by },
        { label: "Detected", cell: (x) => time(x.detected_at) },
        { label: "Resolved", cell: (x) => x.resolved_at ? [time(x.resolved_at), " (" + (x.resolution || "resolved") + ")"] : badge("unresolved", "bad") },
      ], e.conflicts, null, (x) => ({ "data-conflict": x.id }))] : null,
      el("h3", { text: "3. Outbox rows its apply wrote" }),
      table(null, [
        { label: "ID", cell: (o) => String(o.id) },
        { label: "Event id", cell: (o) => el("code", { text: o.event_id }) },
        { label: "Subject", cell: (o) => el("code", { text: o.subject }) },
        { label: "State", cell: (o) => badge(o.state, stateKinds[o.state]) },
        { label: "EVENTS seq", num: true, cell: (o) => o.sent_seq ? num(o.sent_seq) : null },
      ], e.outbox, "Its apply wrote no outbox rows.", (o) => ({ "data-state": o.state })),
      (e.deliveries || []).length ? [el("h3", { text: "4. Delivery to endpoints" }), e.deliveries.map((h) => h.endpoints.map((d) => [
        el("h4", null, el("code", { text: h.event_id }), " to ", link(endpointHref(d.endpoint), d.endpoint), " ",
          badge(d.state.replace("_", " "), endpointKinds[d.state])),
        attemptsTable(d.attempts, false),
        d.pending ? el("p", { class: "meta" }, "Pending (" + d.pending.origin + "): " + num(d.pending.attempts) + " failed attempt(s), ",
          d.pending.next_attempt_at ? ["next attempt ", time(d.pending.next_attempt_at)] : "behind an earlier event of its key") : null,
        (d.dead_letters || []).length ? deliveryDeadLetterTable(d.dead_letters, false) : null,
      ]))] : null);
  }

  $("ev-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    navigate(eventHref($("ev-source").value.trim(), $("ev-id").value.trim()));
  });

  // ---- delivery endpoints ------------------------------------------------

  const endpointKinds = { enabled: "ok", failing: "warn", disabled: "bad", delivered: "ok", pending: "warn", dead_lettered: "bad", failed: "bad", in_flight: "warn" };

  function endpointHref(name) {
    return "#/endpoints/" + encodeURIComponent(name);
  }

  function endpointState(e) {
    return [badge(e.state, endpointKinds[e.state]),
      e.disabled_reason ? " (" + e.disabled_reason + ")" : null,
      e.failing_since ? [" since ", time(e.failing_since)] : null];
  }

  function endpointsTable(list) {
    return table(null, [
      { label: "Endpoint", cell: (e) => link(endpointHref(e.name), e.name) },
      { label: "State", cell: (e) => endpointState(e) },
      { label: "Owner", cell: (e) => e.owner },
      { label: "Backlog", num: true, cell: (e) => num(e.backlog) },
      { label: "Dead letters", num: true, cell: (e) => num(e.dead_letters) },
      { label: "URL", cell: (e) => el("code", { text: e.url }) },
    ], list, "No delivery endpoints are configured.", (e) => ({ "data-endpoint": e.name, "data-state": e.state }));
  }

  // attemptClass is the class the delivery metrics count an attempt by
  // (delivery.StatusClass).
  function attemptClass(a) {
    const ec = a.error_class || "";
    if (ec === "" || ec === "status") {
      const s = a.status_code || 0;
      return s >= 100 && s < 600 ? Math.floor(s / 100) + "xx" : "other";
    }
    if (ec === "timeout") return "timeout";
    if (ec === "connect" || ec === "tls") return "connect";
    if (ec === "refused_address") return "refused";
    return "other";
  }

  function attemptsTable(list, withEvent) {
    return table(null, [
      withEvent ? { label: "Event id", cell: (a) => el("code", { text: a.event_id }) } : null,
      { label: "Attempt", num: true, cell: (a) => num(a.attempt) },
      { label: "Status", num: true, cell: (a) => a.status_code ? String(a.status_code) : null },
      { label: "Class", cell: (a) => attemptClass(a) },
      { label: "Latency", num: true, cell: (a) => num(Math.round((a.duration || 0) / 1e6)) + " ms" },
      { label: "At", cell: (a) => time(a.attempted_at) },
      { label: "Answer", cell: (a) => a.response_excerpt ? el("code", { text: a.response_excerpt.slice(0, 120) }) : null },
    ].filter((c) => c), list, "No attempts recorded.");
  }

  function deliveryDeadLetterTable(list, actions) {
    return table(null, [
      { label: "ID", cell: (d) => String(d.id) },
      { label: "Event id", cell: (d) => el("code", { text: d.event_id }) },
      { label: "Subject", cell: (d) => el("code", { text: d.subject }) },
      { label: "Attempts", num: true, cell: (d) => num(d.attempts) },
      { label: "Last status", cell: (d) => d.last_status ? String(d.last_status) : d.last_error_class },
      { label: "Dead since", cell: (d) => time(d.created_at) },
      { label: "Resolved", cell: (d) => d.resolved_at ? [time(d.resolved_at), " (" + (d.resolution || "resolved") + ")"] : badge("unresolved", "bad") },
      actions ? { label: "", cell: (d) => d.resolved_at ? null : [
        el("button", { type: "button", class: "secondary", "data-action": "requeue", "data-id": d.id, "aria-label": "Requeue dead letter " + d.id,
          onclick: (ev) => triageDelivery(ev.currentTarget, "requeue", { ids: [d.id] }) }, "Requeue"), " ",
        el("button", { type: "button", class: "danger", "data-action": "discard", "data-id": d.id, "aria-label": "Discard dead letter " + d.id,
          onclick: (ev) => triageDelivery(ev.currentTarget, "discard", { ids: [d.id] }) }, "Discard")] } : null,
    ].filter((c) => c), list, "No dead letters.", (d) => ({ "data-dead-letter": d.id }));
  }

  async function renderEndpoints(args, params, gen) {
    if (args.length > 0) return renderEndpoint(args[0], gen);
    $("ep-list").hidden = false;
    $("ep-detail").hidden = true;
    const tick = async () => {
      let list;
      try {
        list = await get("endpoints");
      } catch (e) {
        if (!stale(gen)) showError($("ep-list"), e);
        return;
      }
      if (!stale(gen)) refresh($("ep-list"), endpointsTable(list));
    };
    await tick();
    if (!stale(gen)) every(REFRESH_MS, tick);
  }

  // renderEndpoint shows one endpoint, refreshed every few seconds: its
  // state, backlog, latest attempts and dead letters; the replay form is
  // the page's own and keeps what was typed.
  async function renderEndpoint(name, gen) {
    $("ep-list").hidden = true;
    $("ep-detail").hidden = false;
    $("ep-name").textContent = name;
    $("ep-replay-form").dataset.endpoint = name;
    $("ep-rp-result").replaceChildren();
    $("ep-rp-apply").hidden = true;
    const tick = async () => {
      let v;
      try {
        v = await get("endpoints/" + encodeURIComponent(name));
      } catch (e) {
        if (!stale(gen)) showError($("ep-summary"), e);
        return;
      }
      if (stale(gen)) return;
      const disabled = v.state === "disabled";
      refresh($("ep-summary"),
        fields([
          ["State", el("span", { id: "ep-state", "data-state": v.state }, endpointState(v))],
          ["Owner", v.owner || "no instance reads it now"],
          ["Backlog", el("span", { id: "ep-backlog", text: num(v.backlog) })],
          ["Pending in EVENTS", num(v.pending)],
          ["Sent, not settled", num(v.ack_pending)],
          ["In Postgres (retrying, waiting, requeued)", num(v.tracked)],
          ["Dead letters", el("span", { id: "ep-dead-count", text: num(v.dead_letters) })],
          ["URL", el("code", { text: v.url })],
          ["Subjects", el("code", { text: (v.subjects || []).join(" ") })],
          ["Ordered", v.ordered ? "yes" : "no"],
          v.info_error ? ["Durable", el("span", { class: "error", text: v.info_error })] : null,
        ]),
        el("div", { class: "actions-row" },
          el("button", { type: "button", id: "ep-toggle", class: disabled ? null : "danger", "data-action": disabled ? "enable" : "disable",
            onclick: (ev) => toggleEndpoint(ev.currentTarget, name) }, disabled ? "Enable" : "Disable"),
          " ",
          el("button", { type: "button", id: "ep-test", class: "secondary", onclick: (ev) => testEndpoint(ev.currentTarget, name) }, "Send test event"),
          " ",
          (v.dead_letter_list || []).length ? el("button", { type: "button", id: "ep-requeue-all", class: "secondary",
            onclick: (ev) => triageDelivery(ev.currentTarget, "requeue", { endpoint: name }) }, "Requeue all dead letters") : null));
      refresh($("ep-dead"), deliveryDeadLetterTable(v.dead_letter_list || [], true));
      refresh($("ep-attempts"), attemptsTable(v.recent_attempts || [], true));
    };
    await tick();
    if (!stale(gen)) every(REFRESH_MS, tick);
  }

  async function toggleEndpoint(button, name) {
    const action = button.dataset.action;
    button.disabled = true;
    try {
      const r = await post("endpoints/" + encodeURIComponent(name) + "/" + action, {});
      flash(r.changed ? "Endpoint " + r.endpoint + " " + r.state + "." : "Endpoint " + r.endpoint + " was " + r.state + " already.");
    } catch (e) {
      flash(action + " failed: " + errText(e), "error");
    }
    button.disabled = false;
  }

  async function testEndpoint(button, name) {
    button.disabled = true;
    try {
      const r = await post("endpoints/" + encodeURIComponent(name) + "/test", {});
      flash("Test event " + r.event_id + ": " + (r.status ? "status " + r.status : r.class) + ", " + num(Math.round(r.latency / 1e6)) + " ms.",
        r.success ? "ok" : "error");
    } catch (e) {
      flash("Test failed: " + errText(e), "error");
    }
    button.disabled = false;
  }

  async function triageDelivery(button, action, sel) {
    button.disabled = true;
    try {
      const r = await post("delivery-dead-letters/" + action, sel);
      let msg = num((r.done || []).length) + " dead letter(s) " + (action === "requeue" ? "requeued" : "discarded") + ".";
      if ((r.refused || []).length) msg += " " + num(r.refused.length) + " refused: a later event of their key has reached the endpoint (requeue them out of order from the command line).";
      flash(msg);
    } catch (e) {
      flash(action + " failed: " + errText(e), "error");
    }
    button.disabled = false;
  }

  function replaySelector() {
    const sel = {};
    const from = $("ep-rp-from").value.trim();
    const to = $("ep-rp-to").value.trim();
    if (from) sel.from_seq = Number(from);
    if (to) sel.to_seq = Number(to);
    if ($("ep-rp-subject").value.trim()) sel.subject = $("ep-rp-subject").value.trim();
    if ($("ep-rp-id").value.trim()) sel.event_ids = $("ep-rp-id").value.split(",").map((s) => s.trim()).filter((s) => s);
    return sel;
  }

  // dryRunSelector is the selection the last dry run counted: Apply sends
  // exactly that one (changing a field hides Apply until a new dry run).
  let dryRunSelector = null;

  async function replayEndpoint(dryRun) {
    const name = $("ep-replay-form").dataset.endpoint;
    if (dryRun) dryRunSelector = replaySelector();
    if (!dryRunSelector) return;
    const sel = Object.assign({}, dryRunSelector, { dry_run: dryRun });
    const out = $("ep-rp-result");
    try {
      const r = await post("endpoints/" + encodeURIComponent(name) + "/replay", sel);
      replace(out, el("p", { id: "ep-rp-summary", text: dryRun
        ? num(r.matched) + " event(s) match; " + num(r.already_pending) + " already pending." + (r.truncated ? " More than the limit matched." : "")
        : num(r.queued) + " event(s) queued for " + name + "; " + num(r.already_pending) + " were pending already." }));
      $("ep-rp-apply").hidden = !dryRun || r.matched === 0;
    } catch (e) {
      showError(out, e);
      $("ep-rp-apply").hidden = true;
    }
  }

  $("ep-replay-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    replayEndpoint(true);
  });
  $("ep-rp-apply").addEventListener("click", () => replayEndpoint(false));
  $("ep-replay-form").addEventListener("input", () => { $("ep-rp-apply").hidden = true; });

  // ---- start -------------------------------------------------------------

  const renderers = {
    login: renderLogin,
    overview: renderOverview,
    "dead-letters": renderDeadLetters,
    conflicts: renderConflicts,
    outbox: renderOutbox,
    replay: renderReplay,
    events: renderEvents,
    endpoints: renderEndpoints,
  };

  window.addEventListener("hashchange", route);
  route();
})();
