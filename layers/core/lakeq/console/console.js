// lakeq backlog console: static, no secret; the operator's key lives in sessionStorage only.
// Data comes from the JSON routes (same origin); refreshes itself every PERIOD_MS.
"use strict";
(function () {
  const PERIOD_MS = 5000;
  const KEY = "lakeq.console.key";
  const MAX_POINTS = 240;
  let timer = null;
  let busy = false;
  let isAdmin = false;

  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of kids) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const fmtTime = (ms) => (ms ? new Date(ms).toLocaleTimeString() : "");
  const enc = encodeURIComponent;

  function setStatus(text, error) {
    const s = $("status");
    s.textContent = text;
    s.className = error ? "error" : "";
  }

  async function api(path, allow404) {
    const key = sessionStorage.getItem(KEY);
    const r = await fetch(path, {headers: {"Authorization": "Bearer " + key}, cache: "no-store"});
    let body = null;
    try { body = await r.json(); } catch (_e) { body = null; }
    if (r.ok) return body;
    if (allow404 && r.status === 404) return null;
    const msg = body && body.error ? body.error.code + ": " + body.error.message : "HTTP " + r.status;
    const err = new Error(path + " → " + msg);
    err.status = r.status;
    throw err;
  }

  // one table cell carrying data-* attributes so a test (or a script) can find a number
  // a subscription's push endpoint (issue 17): paused, or the last attempt's status, failures and next attempt
  function pushState(p) {
    if (!p) return "";
    if (p.paused) return "paused";
    if (p.last_attempt_at === null || p.last_attempt_at === undefined) return "no attempt yet";
    let out = "last " + (p.last_status === null ? "timeout/connection error" : p.last_status);
    if (p.failures) out += `, ${p.failures} failures`;
    if (p.next_attempt_at) out += ", next " + new Date(p.next_attempt_at).toLocaleTimeString();
    return out;
  }
  function cell(value, data, cls) {
    const td = el("td", {class: cls, text: value === null || value === undefined ? "" : String(value)});
    for (const [k, v] of Object.entries(data || {})) td.dataset[k] = String(v);
    return td;
  }
  function table(headers, rows, id) {
    const t = el("table", {id: id});
    t.append(el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {class: h.cls, text: h.text || h})))));
    const tb = el("tbody");
    rows.forEach((r) => tb.append(r));
    t.append(tb);
    return t;
  }

  // ---- summary (GET /v1/summary): totals first; rates from this summary and the previous one ------
  let prevSummary = null;
  function fmtAge(ms) {
    if (ms === null || ms === undefined) return "—";
    const s = Math.round(ms / 1000);
    if (s < 120) return s + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    if (s < 172800) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " d";
  }
  function rate(now, prev, field) {
    if (!prev || now.computed_at <= prev.computed_at) return null;
    return Math.max(0, (now.totals[field] - prev.totals[field]) * 1000 / (now.computed_at - prev.computed_at));
  }
  // the newest minute's figure of a CloudWatch series, as messages per second
  function lastMinute(points) {
    if (!points.length) return {r: 0, t: null};
    const p = points[points.length - 1];
    return {r: p.v / 60, t: p.t};
  }
  function renderSummary(sum, m) {
    const t = sum.totals;
    const fromCw = hasPoints(m, "produced", "consumed");
    let pr, cr, suffix = "";
    if (fromCw) {
      const a = lastMinute(m.series.produced), b = lastMinute(m.series.consumed);
      pr = a.r; cr = b.r;
      const newest = Math.max(a.t || 0, b.t || 0);
      suffix = ` (CloudWatch, minute of ${new Date(newest).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"})})`;
    } else {
      pr = rate(sum, prevSummary, "produced"); cr = rate(sum, prevSummary, "consumed");
    }
    const fmtRate = (r) => (r === null ? "… (next refresh)" : r.toFixed(r < 10 ? 2 : 0) + " msg/s");
    const tiles = [
      ["total backlog", t.backlog, "summary_backlog"],
      ["oldest unconsumed", fmtAge(t.oldest_unconsumed_age_ms), "summary_oldest_age"],
      ["dead-lettered", t.dead_lettered, "summary_dead_lettered"],
      ["produce rate" + (fromCw ? suffix : " (sampled)"), fmtRate(pr), "summary_produce_rate"],
      ["consume rate (acks)" + (fromCw ? suffix : " (sampled)"), fmtRate(cr), "summary_consume_rate"],
      ["topics / groups", `${t.topics} / ${t.groups}`, "summary_counts"]];
    const box = el("div", {class: "tiles"});
    for (const [label, value, field] of tiles) {
      box.append(el("div", {class: "tile"}, el("div", {class: "muted", text: label}),
        el("b", {"data-field": field, text: String(value)})));
    }
    const rows = sum.groups.map((g) => {
      const d = {group: g.group, topic: g.topic};
      if (g.mode === "broadcasting") {
        return el("tr", {}, cell(g.group, {}, "text"), cell(g.topic, {}, "text"),
          el("td", {colspan: 4, class: "text muted", text: "broadcasting: per client_id"}));
      }
      const link = el("a", {href: "#group-" + g.group.replace(/[^A-Za-z0-9_-]/g, "_"), text: g.group});
      const name = el("td", {class: "text"}, link);
      return el("tr", {"data-group": g.group, "data-topic": g.topic}, name, cell(g.topic, {}, "text"),
        cell(g.backlog, {...d, field: "summary_group_backlog"}, g.backlog > 0 ? "backlog-hot" : ""),
        cell(g.dead_lettered, {...d, field: "summary_group_dead_lettered"}),
        cell(fmtAge(g.oldest_unconsumed_age_ms), {...d, field: "summary_group_oldest_age"}, "text"),
        cell(g.locked_queues, {...d, field: "summary_group_locked"}));
    });
    for (const x of sum.subscriptions || []) {
      const d = {subscription: x.subscription};
      const link = el("a", {href: "#group-" + x.subscriber.replace(/[^A-Za-z0-9_-]/g, "_"), text: x.subscriber});
      rows.push(el("tr", {"data-subscription": x.subscription}, el("td", {class: "text"}, link, " (subscription)"),
        cell(x.topic, {}, "text"),
        cell(x.backlog, {...d, field: "summary_sub_backlog"}, x.backlog > 0 ? "backlog-hot" : ""),
        cell(x.dead_lettered, {...d, field: "summary_sub_dead_lettered"}),
        cell(fmtAge(x.oldest_unconsumed_age_ms), {...d, field: "summary_sub_oldest_age"}, "text"), cell("")));
    }
    rows.sort((a, b) => Number(b.children[2].textContent || 0) - Number(a.children[2].textContent || 0));
    const parts = [box];
    if (rows.length) {
      parts.push(table([{text: "group", cls: "text"}, {text: "topic", cls: "text"}, "backlog", "dead-lettered",
                        {text: "oldest unconsumed", cls: "text"}, "locked queues"], rows, "summary-table"));
    }
    if (fromCw) {
      const perMin = (pts) => pts.map((p) => ({t: p.t, v: p.v}));
      parts.push(chart([["produced", perMin(m.series.produced), "#1f6feb", "produced / min"],
                        ["consumed", perMin(m.series.consumed), "#15803d", "acked / min"],
                        ["backlog", m.series.backlog, "#b91c1c", "total backlog"]], "summary-chart",
                       "produced, acked and backlog per minute, last hour"));
      parts.push(el("p", {class: "muted", "data-field": "summary_rates_source", text:
        "Rates and chart from CloudWatch, per minute over the last hour: NumberOfMessagesSent and NumberOfAcks " +
        "(the deployment's), ApproximateNumberOfMessagesBacklog (the metrics function's total)."}));
    } else {
      parts.push(el("p", {class: "muted", "data-field": "summary_rates_source", text: m
        ? "No metrics in CloudWatch yet: the rates are sampled by this page (the change between two refreshes) until the functions have published some."
        : isAdmin ? "Rates sampled by this page (the change between two refreshes): CloudWatch's figures could not be read (GET /v1/console/metrics)."
        : "Rates sampled by this page (the change between two refreshes): the deployment's CloudWatch figures are the admin key's."}));
    }
    if (sum.truncated) parts.push(el("p", {class: "muted", text: "Only the first 200 topics, and 200 (group, topic) pairs and subscriptions, are counted."}));
    $("summary").replaceChildren(...parts);
    prevSummary = sum;
  }

  // ---- actions, each behind a confirmation (admin key) ----------------------------------------
  async function post(path, method, body) {
    const key = sessionStorage.getItem(KEY);
    const r = await fetch(path, {method: method, cache: "no-store", body: JSON.stringify(body),
      headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json"}});
    let out = null;
    try { out = await r.json(); } catch (_e) { out = null; }
    if (!r.ok) throw new Error(path + " → " + (out && out.error ? out.error.code + ": " + out.error.message : "HTTP " + r.status));
    return out;
  }
  async function resetOffset(group, topic, q) {
    const answer = window.prompt(`Reset ${group}'s committed offset on ${topic} queue ${q.queue} ` +
      `(${q.min_offset}–${q.max_offset}; now ${q.committed_offset}) to:`, String(q.max_offset));
    if (answer === null) return;
    const offset = Number(answer.trim());
    if (!Number.isInteger(offset)) { setStatus(`not an offset: ${answer}`, true); return; }
    if (!window.confirm(`Really move ${group} on ${topic}#${q.queue} from ${q.committed_offset} to ${offset}? ` +
                        "Messages skipped over are not delivered; moved back, they are delivered again.")) return;
    try {
      await post("/v1/groups/" + enc(group) + "/offsets", "PUT", {topic: topic, queue: q.queue, offset: offset});
      setStatus(`${group} ${topic}#${q.queue} reset to ${offset}`);
      refresh();
    } catch (e) { setStatus(e.message, true); }
  }

  // ---- a refresh's requests, POOL at a time ----------------------------------------------------
  // fn(item) for each item, at most POOL in flight, answers in the items' order. One after another, a
  // refresh of 43 topics and 23 groups on the local stack took over 30 s (each group's topics: offsets,
  // backlog report, ledger, metrics); a browser opens 6 connections a host over HTTP/1.1 anyway.
  const POOL = 6;
  async function inPool(items, fn) {
    const out = new Array(items.length);
    let next = 0;
    async function worker() {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]);
      }
    }
    await Promise.all(Array.from({length: Math.min(POOL, items.length)}, worker));
    return out;
  }

  // ---- topics -----------------------------------------------------------------------------
  async function loadTopics(names) {
    return inPool(names, async (n) => {
      try { return await api("/v1/topics/" + enc(n)); } catch (e) { return {name: n, error: e.message}; }
    });
  }
  function renderTopics(topics) {
    const rows = [];
    for (const t of topics) {
      if (t.error) { rows.push(el("tr", {}, cell(t.name, {}, "text"), el("td", {colspan: 6, class: "text", text: t.error}))); continue; }
      for (const q of t.queue_offsets) {
        const d = {topic: t.name, queue: q.queue};
        rows.push(el("tr", {},
          cell(t.name, {}, "text"), cell(q.queue),
          cell(q.max_offset, {...d, field: "produced"}),
          cell(q.min_offset, {...d, field: "min_offset"}),
          cell(q.max_offset, {...d, field: "max_offset"}),
          cell(fmtTime(q.last_produced_at), {}, "text"),
          cell(t.parent || "", {}, "text")));
      }
    }
    const box = $("topics");
    box.replaceChildren(topics.length
      ? table([{text: "topic", cls: "text"}, "queue", "produced", "min_offset", "max_offset",
               {text: "last produced", cls: "text"}, {text: "parent", cls: "text"}], rows, "topics-table")
      : el("p", {class: "muted", text: "No topics."}));
  }

  // ---- groups -----------------------------------------------------------------------------
  function coveredTopics(grants, allTopics) {
    if (!allTopics) return grants.slice();
    return allTopics.filter((t) => grants.some((g) => t === g || t.startsWith(g + "/")));
  }

  async function loadGroup(c, allTopics) {
    const g = {client: c, topics: coveredTopics(c.topics, allTopics), offsets: [], reports: {}, ledgers: {}, metrics: {},
               subs: []};
    try { g.desc = await api("/v1/groups/" + enc(c.name)); } catch (e) { g.descError = e.message; }
    if (c.mode !== "broadcasting") {
      for (const t of g.topics) {
        try { g.offsets.push(await api("/v1/groups/" + enc(c.name) + "/offsets?topic=" + enc(t))); }
        catch (e) { g.offsets.push({topic: t, error: e.message}); }
        g.reports[t] = await lakeOf("/v1/reports/backlog?group=" + enc(c.name) + "&topic=" + enc(t));
        // the delivery ledger (issue 32.4): its summary line, from the ledger job's newest run
        g.ledgers[t] = await lakeOf("/v1/groups/" + enc(c.name) + "/ledger?topic=" + enc(t));
        g.metrics[t] = await metricsOf(t, c.name);
      }
    }
    try {
      const subs = (await api("/v1/subscriptions?subscriber=" + enc(c.name))).subscriptions;
      for (const s of subs) {
        try { s.offsets = await api("/v1/subscriptions/" + enc(s.id) + "/offsets"); } catch (e) { s.offsetsError = e.message; }
        g.subs.push(s);
      }
    } catch (e) { g.subsError = e.message; }
    return g;
  }

  // the delivery ledger's line: "N produced, N accepted, … 0 lost, M redelivered" (the ledger job's window)
  function ledgerLine(group, topic, led) {
    const attrs = {"data-group": group, "data-topic": topic, "data-field": "ledger"};
    if (!led) return el("p", {...attrs, class: "muted", text: "No delivery ledger yet for this group and topic " +
                                                              "(the ledger job has not run)."});
    if (led.error) return el("p", {...attrs, class: "muted", text: led.error});
    const causes = Object.entries(led.causes || {}).map(([c, n]) => `${c} ${n}`).join(", ");
    return el("p", {...attrs, class: led.lost > 0 ? "backlog-hot" : "",
      title: `messages produced ${new Date(led.from).toLocaleString()} – ${new Date(led.to).toLocaleString()}, ` +
             `computed ${new Date(led.computed_at).toLocaleString()}`,
      text: "ledger: " + led.line + (causes ? ` (dead letters: ${causes})` : "")});
  }

  // backlog history per group|topic: lake report points (one per computed_at) and live samples
  function history(group, topic, report, liveBacklog) {
    const k = "lakeq.console.hist." + group + "|" + topic;
    let h;
    try { h = JSON.parse(sessionStorage.getItem(k)) || {lake: [], live: []}; } catch (_e) { h = {lake: [], live: []}; }
    if (report && !report.error) {
      const pts = Array.isArray(report.series) ? report.series.map((p) => ({t: p.at, v: p.backlog})) : [];
      pts.push({t: report.computed_at, v: report.backlog !== undefined ? report.backlog
        : report.queues.reduce((a, q) => a + q.backlog, 0)});
      for (const p of pts) if (!h.lake.some((x) => x.t === p.t)) h.lake.push(p);
      h.lake.sort((a, b) => a.t - b.t);
      h.lake = h.lake.slice(-MAX_POINTS);
    }
    if (typeof liveBacklog === "number") {
      h.live.push({t: Date.now(), v: liveBacklog});
      h.live = h.live.slice(-MAX_POINTS);
    }
    sessionStorage.setItem(k, JSON.stringify(h));
    return h;
  }

  // an inline SVG line chart of named series [[name, points {t, v}, colour, legend]]; empty series are skipped
  function chart(series, id, label) {
    const W = 560, H = 170, L = 46, R = 10, T = 12, B = 26;
    const shown = series.filter((x) => x[1].length);
    const all = shown.flatMap((x) => x[1]);
    const s = svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "chart", id: id, role: "img",
                          "aria-label": label || "backlog over time"});
    if (!all.length) return s;
    const t0 = Math.min(...all.map((p) => p.t)), t1 = Math.max(...all.map((p) => p.t));
    const vmax = Math.max(1, ...all.map((p) => p.v));
    const x = (t) => L + (t1 === t0 ? (W - L - R) / 2 : ((t - t0) / (t1 - t0)) * (W - L - R));
    const y = (v) => H - B - (v / vmax) * (H - T - B);
    s.append(svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#889"}));
    s.append(svg("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#889"}));
    s.append(svg("text", {x: L - 4, y: y(vmax) + 4, "text-anchor": "end", "font-size": 10}, String(Math.round(vmax * 100) / 100)));
    s.append(svg("text", {x: L - 4, y: H - B + 4, "text-anchor": "end", "font-size": 10}, "0"));
    s.append(svg("text", {x: L, y: H - 8, "font-size": 10}, fmtTime(t0)));
    s.append(svg("text", {x: W - R, y: H - 8, "text-anchor": "end", "font-size": 10}, fmtTime(t1)));
    shown.forEach(([name, pts, color, legend], i) => {
      if (pts.length > 1) {
        s.append(svg("polyline", {points: pts.map((p) => `${x(p.t)},${y(p.v)}`).join(" "), fill: "none",
                                  stroke: color, "stroke-width": 2, "data-series": name}));
      }
      for (const p of pts) s.append(svg("circle", {cx: x(p.t), cy: y(p.v), r: name === "lake" ? 4 : 2.5, fill: color,
                                                   "data-series": name, "data-value": p.v}));
      s.append(svg("text", {x: L + 8 + i * 170, y: T + 2, "font-size": 11, fill: color}, "● " + legend));
    });
    return s;
  }

  // ---- CloudWatch's figures (GET /v1/console/metrics): the last hour, per minute -----------------
  // null when the route answers nothing usable (a key that may not ask, an API without the route)
  // Asked at most once a minute per (topic, group) (the figures are per minute; GetMetricData is billed
  // per metric asked), a failed answer again after a minute too.
  const METRICS_EVERY_MS = 60000;
  const metricsCache = new Map();
  async function metricsOf(topic, group) {
    const q = topic === undefined ? "" : "?topic=" + enc(topic) + "&group=" + enc(group);
    const hit = metricsCache.get(q);
    if (hit && Date.now() - hit.at < METRICS_EVERY_MS) return hit.m;
    let m = null;
    try { m = await api("/v1/console/metrics" + q); } catch (_e) { m = null; }
    metricsCache.set(q, {at: Date.now(), m: m});
    return m;
  }
  // ---- the lake's reports (GET /v1/reports/backlog, GET /v1/groups/{g}/ledger) ---------------------
  // Computed by hourly jobs: asked at most once a minute per (group, topic), as the charts are (console35:
  // asked every refresh, they were two of the ~4 requests a (group, topic) each 5 s); null: none yet (404)
  const LAKE_EVERY_MS = 60000;
  const lakeCache = new Map();
  async function lakeOf(path) {
    const hit = lakeCache.get(path);
    if (hit && Date.now() - hit.at < LAKE_EVERY_MS) return hit.v;
    let v;
    try { v = await api(path, true); } catch (e) { v = {error: e.message}; }
    lakeCache.set(path, {at: Date.now(), v: v});
    return v;
  }
  const hasPoints = (m, ...names) => !!m && names.some((n) => (m.series[n] || []).length > 0);

  function renderGroup(g) {
    const c = g.client, name = c.name;
    const box = el("div", {class: "group", "data-group": name, id: "group-" + name.replace(/[^A-Za-z0-9_-]/g, "_")});
    box.append(el("h3", {text: `${name}`}, el("span", {class: "muted",
      text: `  ${c.mode}, visibility ${c.visibility_timeout_ms} ms, grants ${c.topics.join(", ")}`})));
    // membership
    if (g.desc) {
      const d = g.desc;
      box.append(el("p", {}, "generation ",
        el("b", {"data-group": name, "data-field": "generation", text: String(d.generation)}),
        `, assignor ${d.assignor || "-"}, ${d.members.length} member(s)`));
      if (d.members.length) {
        box.append(table(["member", "state", "assignment", "last heartbeat"].map((t) => ({text: t, cls: "text"})),
          d.members.map((m) => el("tr", {"data-member": m.member_id},
            cell(m.member_id, {}, "text"), cell(m.state, {}, "text"),
            cell((m.assignment || []).map((a) => `${a.topic}#${a.queue}`).join(" ") || "—",
                 {group: name, member: m.member_id, field: "assignment"}, "text"),
            cell(fmtTime(m.last_heartbeat), {}, "text")))));
      }
    } else if (g.descError) box.append(el("p", {class: "muted", text: g.descError}));
    if (c.push) {  // the group's push endpoint (issue 17), as GET /v1/clients summarises it
      const p = c.push;
      box.append(el("p", {}, `push → ${p.url} (topic ${p.topic}, ${p.max_in_flight} in flight): `,
        el("span", {"data-group": name, "data-field": "push", text: pushState(p)}), `, ${p.delivered} delivered`));
    }
    if (c.mode === "broadcasting") {
      box.append(el("p", {class: "muted", text: "broadcasting: offsets are kept per client_id (GET /v1/groups/" + name +
                                                   "/offsets?topic=…&client_id=…)"}));
    }
    // offsets per topic
    for (const o of g.offsets) {
      if (o.error) { box.append(el("p", {class: "muted", text: o.error})); continue; }
      const hasDlq = o.queues.some((q) => q.dead_lettered !== undefined);
      const heads = ["queue", "produced", "min_offset", "committed", "backlog", {text: "lock holder", cls: "text"},
                     {text: "lock expires", cls: "text"}];
      if (hasDlq) heads.push("dead-lettered");
      if (isAdmin) heads.push({text: "action", cls: "text"});
      const now = Date.now();
      const rows = o.queues.map((q) => {
        const d = {group: name, topic: o.topic, queue: q.queue};
        const tds = [cell(q.queue), cell(q.max_offset, {...d, field: "produced"}), cell(q.min_offset, {...d, field: "min_offset"}),
          cell(q.committed_offset, {...d, field: "committed_offset"}),
          cell(q.backlog, {...d, field: "backlog"}, q.backlog > 0 ? "backlog-hot" : ""),
          cell(q.locked_until ? (q.lock_owner || "-") : "", {...d, field: "lock_owner"}, "text locked"),
          cell(q.locked_until ? `${fmtTime(q.locked_until)} (${Math.max(0, Math.round((q.locked_until - now) / 1000))} s)` : "",
               {...d, field: "locked_until", value: q.locked_until}, "text locked")];
        if (hasDlq) tds.push(cell(q.dead_lettered === undefined ? "" : q.dead_lettered, {...d, field: "dead_lettered"}));
        if (isAdmin) {
          const b = el("button", {type: "button", class: "action", "data-action": "reset", "data-group": name,
                                  "data-topic": o.topic, "data-queue": q.queue, text: "reset…"});
          b.addEventListener("click", () => resetOffset(name, o.topic, q));
          tds.push(el("td", {}, b));
        }
        return el("tr", {}, ...tds);
      });
      box.append(el("h4", {}, `topic ${o.topic}: backlog `,
        el("span", {"data-group": name, "data-topic": o.topic, "data-field": "total_backlog", text: String(o.backlog)})));
      box.append(table(heads, rows));
      box.append(ledgerLine(name, o.topic, g.ledgers[o.topic]));
      // backlog over time
      const rep = g.reports[o.topic];
      const m = g.metrics[o.topic];
      const fromCw = hasPoints(m, "backlog");
      const h = history(name, o.topic, rep, fromCw ? null : o.backlog);  // sampled only without metrics
      let note;
      if (!rep) note = "No lake report yet for this group and topic (the backlog job has not run: `make jobs`).";
      else if (rep.error) note = rep.error;
      else if (h.lake.length < 2) note = `Only the latest lake report exists (computed ${new Date(rep.computed_at).toLocaleString()}, ` +
                       `backlog ${h.lake.length ? h.lake[h.lake.length - 1].v : "?"}): it is charted as one point; ` +
                       "more points appear as later reports are computed.";
      else note = `${h.lake.length} lake reports, the latest computed ${new Date(rep.computed_at).toLocaleString()}.`;
      const cw = fromCw ? m.series.backlog : [];
      box.append(chart([["metrics", cw, "#15803d", "CloudWatch (per minute)"],
                        ["live", fromCw ? [] : h.live, "#1f6feb", "live (offsets)"],
                        ["lake", h.lake, "#d97706", "lake reports"]],
                       `chart-${name}-${o.topic}`.replace(/[^A-Za-z0-9_-]/g, "_")));
      box.append(el("p", {class: "muted", "data-group": name, "data-topic": o.topic, "data-field": "chart_source",
        text: fromCw ? `Backlog per minute over the last hour from CloudWatch (${cw.length} minute(s) with data: ` +
                       "ApproximateNumberOfMessagesBacklog, published by the metrics function each minute while there is a backlog)."
                     : "No metrics in CloudWatch yet for this group and topic: the live backlog is sampled by this page " +
                       "at each refresh (a fallback) until the metrics function has published some."}));
      box.append(el("p", {class: "muted", "data-group": name, "data-topic": o.topic, "data-field": "chart_note", text: note}));
    }
    // subscriptions
    if (g.subs.length) {
      box.append(el("h4", {text: "subscriptions"}));
      box.append(table(["id", "topic", "conditions", "list backlog", "parked", "push"].map((t) => ({text: t, cls: "text"})),
        g.subs.map((s) => el("tr", {},
          cell(s.id, {}, "text"), cell(s.topic, {}, "text"),
          cell(JSON.stringify(s.conditions) + (s.tags && s.tags.length ? " tags " + s.tags.join("||") : ""), {}, "text"),
          cell(s.offsets ? s.offsets.backlog : (s.offsetsError || ""), {subscription: s.id, field: "backlog"}),
          cell((s.parked || []).length ? JSON.stringify(s.parked) : "", {}, "text"),
          cell(pushState(s.push), {subscription: s.id, field: "push"}, "text")))));
    } else if (g.subsError) box.append(el("p", {class: "muted", text: g.subsError}));
    return box;
  }

  // ---- peek and redrive (issue 18.3; admin) ----------------------------------------------------
  async function send(method, path, body) {
    const key = sessionStorage.getItem(KEY);
    const r = await fetch(path, {method: method, headers: {"Authorization": "Bearer " + key,
      "Content-Type": "application/json"}, body: body === undefined ? undefined : JSON.stringify(body)});
    let out = null;
    try { out = await r.json(); } catch (_e) { out = null; }
    if (!r.ok) throw new Error(path + " → " + (out && out.error ? out.error.code + ": " + out.error.message : "HTTP " + r.status));
    return out;
  }
  function opsStatus(text, error) {
    const s = $("ops-status");
    s.textContent = text;
    s.className = error ? "error" : "";
  }
  async function peek(ev) {
    if (ev) ev.preventDefault();
    const t = $("peek-topic").value.trim(), q = $("peek-queue").value.trim(), from = $("peek-from").value.trim();
    if (!t) return;
    try {
      const page = await api(`/v1/topics/${enc(t)}/queues/${enc(q)}/messages?limit=20` + (from ? "&from=" + enc(from) : ""));
      const rows = page.messages.map((m) => el("tr", {},
        cell(m.offset, {field: "offset", offset: m.offset}),
        cell(m.id, {}, "text"),
        cell(m.body.length > 80 ? m.body.slice(0, 80) + "…" : m.body, {field: "body", offset: m.offset}, "text"),
        cell(m.dead_letter ? `${m.dead_letter.reason} from ${m.dead_letter.topic}#${m.dead_letter.queue}@${m.dead_letter.offset}` : "",
          {field: "dead_letter", offset: m.offset}, "text"),
        cell(fmtTime(m.produced_at))));
      $("peek").replaceChildren(
        el("p", {class: "muted", text: `${t} queue ${page.queue}: offsets ${page.min_offset}–${page.max_offset}` +
          (page.next === null ? "" : `; next page from ${page.next}`)}),
        table(["offset", {text: "id", cls: "text"}, {text: "body", cls: "text"}, {text: "dead letter", cls: "text"}, "produced"],
          rows, "peek-table"));
      if (page.next !== null) $("peek-from").value = String(page.next);
    } catch (e) {
      $("peek").replaceChildren(el("p", {class: "error", text: e.message}));
    }
  }
  async function redrive(ev) {
    ev.preventDefault();
    const source = $("redrive-source").value.trim(), rate = parseInt($("redrive-rate").value, 10);
    if (!source) return;
    if (!window.confirm(`Move the messages of '${source}' back to the topics they were dead-lettered from, ${rate}/s?`)) {
      opsStatus("Redrive not started.");
      return;
    }
    try {
      const r = await send("POST", "/v1/redrives", {source: source, rate: rate});
      opsStatus(`Redrive ${r.id} ${r.status}: ${r.moved} of ${r.total} moved.`);
      await loadRedrives();
    } catch (e) { opsStatus(e.message, true); }
  }
  async function cancelRedrive(id) {
    if (!window.confirm(`Cancel redrive ${id}? What it moved stays moved.`)) return;
    try {
      const r = await send("POST", `/v1/redrives/${enc(id)}/cancel`);
      opsStatus(`Redrive ${r.id} ${r.status}.`);
      await loadRedrives();
    } catch (e) { opsStatus(e.message, true); }
  }
  async function loadRedrives() {
    const list = (await api("/v1/redrives")).redrives;
    const rows = list.map((r) => el("tr", {"data-redrive": r.id},
      cell(r.id.slice(0, 8), {}, "text"),
      cell(r.source, {}, "text"),
      cell(r.destination || "(each message's source)", {}, "text"),
      cell(r.status, {redrive: r.id, field: "status"}, "text"),
      cell(r.moved, {redrive: r.id, field: "moved"}),
      cell(r.total, {redrive: r.id, field: "total"}),
      cell(r.failed, {redrive: r.id, field: "failed"}),
      cell(r.rate),
      el("td", {}, r.status === "running" ? (() => {
        const b = el("button", {type: "button", class: "cancel", text: "Cancel…", "data-cancel": r.id});
        b.addEventListener("click", () => cancelRedrive(r.id));
        return b;
      })() : "")));
    $("redrives").replaceChildren(list.length
      ? table([{text: "redrive", cls: "text"}, {text: "source", cls: "text"}, {text: "destination", cls: "text"},
        {text: "status", cls: "text"}, "moved", "of", "failed", "msgs/s", ""], rows, "redrives-table")
      : el("p", {class: "muted", text: "No redrives."}));
  }

  // ---- replays from the lake (issue 18.1; admin; docs/api.md "Replays") ----------------------------
  // datetime-local values are read as UTC (the API's from / to are epoch ms; the lake's partitions are UTC)
  const utcMs = (v) => (v ? Date.parse(v + (v.length === 16 ? ":00" : "") + "Z") : NaN);
  const fmtUtc = (ms) => new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  function replayStatus(text, error) {
    const s = $("replay-status");
    s.textContent = text;
    s.className = error ? "error" : "";
  }
  function replayRequest() {
    const topic = $("replay-topic").value.trim(), target = $("replay-target").value.trim();
    const from = utcMs($("replay-from").value), to = utcMs($("replay-to").value);
    const rate = parseInt($("replay-rate").value, 10), raw = $("replay-filter").value.trim();
    if (!topic || !target) throw new Error("a topic and a target are needed");
    if (!Number.isFinite(from) || !Number.isFinite(to) || from >= to) throw new Error("'from' must be before 'to'");
    if (!Number.isInteger(rate) || rate < 1 || rate > 1000) throw new Error("the rate is 1 to 1000 messages per second");
    const body = {topic: topic, from: from, to: to, target: {[$("replay-target-kind").value]: target}, rate: rate};
    if (raw) {
      let f;
      try { f = JSON.parse(raw); } catch (_e) { throw new Error("the filter is not JSON"); }
      if (f === null || typeof f !== "object" || Array.isArray(f)) throw new Error('the filter is an object: {"conditions": [...], "tags": [...]}');
      body.filter = f;
    }
    return body;
  }
  async function dryRun() {
    // the same request with "dry_run": the count and a sample of what it would select; it copies
    // nothing, so no confirmation
    let body;
    try { body = replayRequest(); } catch (e) { replayStatus(e.message, true); return; }
    body.dry_run = true;
    try {
      const r = await send("POST", "/v1/replays", body);
      replayStatus(`Dry run ${r.id} ${r.status}: its count and sample show below once selected.`);
      await loadReplays();
    } catch (e) { replayStatus(e.message, true); }
  }
  async function replay(ev) {
    ev.preventDefault();
    let body;
    try { body = replayRequest(); } catch (e) { replayStatus(e.message, true); return; }
    const into = body.target.group !== undefined ? `group '${body.target.group}'` : `topic '${body.target.topic}'`;
    const what = `Replay '${body.topic}' from ${fmtUtc(body.from)} to ${fmtUtc(body.to)}` +
      (body.filter ? ` (filter ${JSON.stringify(body.filter)})` : "") + ` into ${into}, ${body.rate}/s?`;
    if (!window.confirm(what)) {
      replayStatus("Replay not started.");
      return;
    }
    try {
      const r = await send("POST", "/v1/replays", body);
      replayStatus(`Replay ${r.id} ${r.status}.`);
      await loadReplays();
    } catch (e) { replayStatus(e.message, true); }
  }
  async function cancelReplay(id) {
    if (!window.confirm(`Cancel replay ${id}? What it copied stays copied.`)) return;
    try {
      const r = await send("POST", `/v1/replays/${enc(id)}/cancel`);
      replayStatus(`Replay ${r.id} ${r.status}.`);
      await loadReplays();
    } catch (e) { replayStatus(e.message, true); }
  }
  async function loadReplays() {
    const page = await api("/v1/replays?limit=20", true);
    if (page === null) {  // an API without replays (404): say so rather than fail the whole refresh
      $("replays").replaceChildren(el("p", {class: "muted", text: "This API has no replays (GET /v1/replays: 404)."}));
      return;
    }
    const target = (t) => (t.group !== undefined ? "group " + t.group : "topic " + t.topic);
    // a dry run's sample (docs/api.md: up to 20 of the selected messages, in the order a replay copies them)
    const sampleRow = (r) => el("tr", {"data-replay-sample": r.id}, el("td", {colspan: "11"},
      r.sample.length
        ? table([{text: "queue"}, {text: "offset"}, {text: "id", cls: "text"}, {text: "key", cls: "text"},
          {text: "produced (UTC)", cls: "text"}, {text: "bytes"}],
          r.sample.map((m) => el("tr", {},
            cell(m.queue), cell(m.offset), cell(m.id, {}, "text"), cell(m.key === null ? "" : m.key, {}, "text"),
            cell(fmtUtc(m.produced_at), {}, "text"), cell(m.size === null ? "—" : m.size))), "")
        : el("p", {class: "muted", text: "The dry run selected nothing."})));
    const rows = page.replays.flatMap((r) => [el("tr", {"data-replay": r.id},
      cell(r.id, {}, "text"),
      cell(r.topic, {}, "text"),
      cell(`${fmtUtc(r.from)} – ${fmtUtc(r.to)}`, {}, "text"),
      cell(r.filter ? JSON.stringify(r.filter) : "", {replay: r.id, field: "filter"}, "text"),
      cell(target(r.target), {replay: r.id, field: "target"}, "text"),
      cell((r.dry_run ? "dry run: " : "") + r.status + (r.error ? ": " + r.error : ""),
        {replay: r.id, field: "status"}, "text"),
      cell(r.found === null || r.found === undefined ? (r.status === "selecting" ? "…" : "—") : r.found,
        {replay: r.id, field: "found"}),
      cell(r.dry_run ? "—" : r.copied, {replay: r.id, field: "copied"}),
      cell(r.dry_run ? "—" : r.failed, {replay: r.id, field: "failed"}),
      cell(r.rate),
      el("td", {}, (r.status === "selecting" || r.status === "copying") ? (() => {
        const b = el("button", {type: "button", class: "cancel", text: "Cancel…", "data-cancel-replay": r.id});
        b.addEventListener("click", () => cancelReplay(r.id));
        return b;
      })() : "")), ...(r.dry_run && r.sample ? [sampleRow(r)] : [])]);
    $("replays").replaceChildren(page.replays.length
      ? table([{text: "replay", cls: "text"}, {text: "topic", cls: "text"}, {text: "range (UTC)", cls: "text"},
        {text: "filter", cls: "text"}, {text: "into", cls: "text"}, {text: "status", cls: "text"},
        "found", "copied", "failed", "msgs/s", ""], rows, "replays-table")
      : el("p", {class: "muted", text: "No replays."}));
  }

  // ---- refresh loop -------------------------------------------------------------------------
  async function refresh() {
    if (busy || !sessionStorage.getItem(KEY)) return;
    busy = true;
    try {
      const who = await api("/v1/clients");
      isAdmin = who.caller.admin;
      const sum = await api("/v1/summary");
      renderSummary(sum, isAdmin ? await metricsOf() : null);
      let topicNames = null;
      if (who.caller.admin) topicNames = (await api("/v1/topics")).topics.map((t) => t.name);
      const consumers = who.clients.filter((c) => c.role === "consumer");
      const names = topicNames || [...new Set(consumers.flatMap((c) => c.topics))];
      const topicsLoaded = await loadTopics(names);
      renderTopics(topicsLoaded);
      $("ops-section").hidden = !who.caller.admin;
      if (who.caller.admin) await loadRedrives();
      $("replays-section").hidden = !who.caller.admin;
      if (who.caller.admin) await loadReplays();
      const groups = await inPool(consumers, (c) => loadGroup(c, topicNames));
      const gbox = $("groups");
      gbox.replaceChildren(...(groups.length ? groups.map(renderGroup)
        : [el("p", {class: "muted", text: "No consumer groups."})]));
      setStatus(`${who.caller.admin ? "admin key" : "key of " + who.caller.client} · refreshed ${new Date().toLocaleTimeString()}`);
      document.body.dataset.refreshed = String(Date.now());
    } catch (e) {
      setStatus(e.message, true);
      if (e.status === 401) stop();
    } finally {
      busy = false;
    }
  }
  function start() {
    stop();
    metricsCache.clear();
    lakeCache.clear();
    refresh();
    timer = setInterval(refresh, PERIOD_MS);
  }
  function stop() { if (timer) clearInterval(timer); timer = null; }

  document.addEventListener("DOMContentLoaded", () => {
    $("period").textContent = String(PERIOD_MS / 1000);
    $("key-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const k = $("key").value.trim();
      $("key").value = "";
      if (!k) return;
      sessionStorage.setItem(KEY, k);
      start();
    });
    $("peek-form").addEventListener("submit", peek);
    $("redrive-form").addEventListener("submit", redrive);
    $("replay-form").addEventListener("submit", replay);
    $("replay-dry").addEventListener("click", dryRun);
    $("forget-key").addEventListener("click", () => {
      sessionStorage.clear();
      stop();
      $("summary").replaceChildren();
      $("topics").replaceChildren();
      $("groups").replaceChildren();
      prevSummary = null;
      $("peek").replaceChildren();
      $("redrives").replaceChildren();
      $("ops-section").hidden = true;
      $("replays").replaceChildren();
      $("replays-section").hidden = true;
      setStatus("No key yet.");
    });
    if (sessionStorage.getItem(KEY)) start();
  });
})();
