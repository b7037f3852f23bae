// The queue dashboard: polls /dashboard/data.json, fills the page, and plots per-second rates.
// Rates come from successive snapshots of the lifetime totals, kept here for the last 5 minutes;
// a new page starts from the minutes of history embedded in it, so a reload is not a blank chart.
// The page holds only the parts the user's admin permissions let them view: each part is
// filled when it is there.
"use strict";

(function () {
  const root = document.getElementById("dashboard");
  if (!root) return;
  const DATA_URL = root.dataset.url;
  const INTERVAL_MS = 1500;
  const WINDOW_MS = 5 * 60 * 1000;
  const SERIES = [
    { key: "enqueued", cssVar: "--dash-enqueued" },
    { key: "acked", cssVar: "--dash-acked" },
    { key: "failed", cssVar: "--dash-failed" },
  ];
  const STATES = ["ready", "handed_out", "delayed", "dead", "blocked"];

  let previous = null; // {t, enqueued, acked, failed}: the last snapshot's counters
  const points = []; // {t, enqueued, acked, failed}: rates per second
  let stopped = false;

  const $ = (sel) => root.querySelector(sel);
  const $$ = (sel) => Array.from(root.querySelectorAll(sel));
  const fmt = (n) => Number(n).toLocaleString("en-US");

  function fmtRate(r) {
    if (r === undefined || r === null) return "–";
    return r >= 100 ? fmt(Math.round(r)) : r.toFixed(1);
  }

  function fmtAge(seconds) {
    if (seconds === null || seconds === undefined) return "none ready";
    if (seconds < 60) return seconds.toFixed(1) + " s";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min " + Math.floor(seconds % 60) + " s";
    return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
  }

  function cell(tag, text) {
    const el = document.createElement(tag);
    el.textContent = text;
    return el;
  }

  // A table's one row saying it has none.
  function emptyRow(text, columns) {
    const td = cell("td", text);
    td.colSpan = columns;
    td.className = "dash-empty";
    const tr = document.createElement("tr");
    tr.append(td);
    return tr;
  }

  // Badges for a queue's settings: paused, its cap on tasks in flight, its rate, its keys'.
  function settingsBadges(limit) {
    const badges = [];
    if (!limit) return badges;
    if (limit.paused) badges.push(["paused", "dash-tag dash-tag-paused"]);
    if (limit.max_in_flight != null) badges.push([`\u2264 ${fmt(limit.max_in_flight)} in flight`, "dash-tag"]);
    if (limit.rate_per_s != null) badges.push([`${limit.rate_per_s}/s`, "dash-tag"]);
    if (limit.fair) badges.push(["fair", "dash-tag"]);
    if (limit.key_max_in_flight != null) {
      badges.push([`\u2264 ${fmt(limit.key_max_in_flight)} per key`, "dash-tag"]);
    }
    if (limit.ordered) badges.push(["ordered", "dash-tag"]);
    return badges.map(([text, cls]) => {
      const span = cell("span", text);
      span.className = cls;
      return span;
    });
  }

  function settingsCell(limit) {
    const td = document.createElement("td");
    for (const badge of settingsBadges(limit)) td.append(badge, " ");
    return td;
  }

  // Per keyed queue, its busiest keys (the server counts them every few seconds).
  function renderKeys(snap) {
    if (!$("#keys-panel")) return;
    const perQueue = snap.top_keys || {};
    const names = Object.keys(perQueue).sort();
    $("#keys-panel").hidden = names.length === 0;
    const blocks = names.map((name) => {
      const { keys, top } = perQueue[name];
      const block = document.createElement("div");
      block.className = "dash-keyqueue";
      block.dataset.queue = name;
      const title = cell("h3", name + " ");
      for (const badge of settingsBadges((snap.queue_settings || {})[name])) title.append(badge, " ");
      const table = document.createElement("table");
      table.className = "dash-table";
      const head = document.createElement("thead");
      const headRow = document.createElement("tr");
      headRow.append(cell("th", "key"), cell("th", "ready"), cell("th", "handed out"));
      head.append(headRow);
      const body = document.createElement("tbody");
      const rows = top.map((k) => {
        const tr = document.createElement("tr");
        tr.dataset.key = k.key ?? "";
        const th = document.createElement("th");
        if (k.url) {
          const a = document.createElement("a");
          a.href = k.url;
          a.textContent = k.key;
          a.title = "Open this key's tasks in admin";
          th.append(a);
        } else {
          th.append(cell("i", "(no key)"));
        }
        tr.append(th, cell("td", fmt(k.ready)), cell("td", fmt(k.handed_out)));
        return tr;
      });
      if (!rows.length) rows.push(emptyRow("No task ready or handed out.", 3));
      body.replaceChildren(...rows);
      table.append(head, body);
      const note = cell("p", keys > top.length ? `the ${top.length} busiest of ${fmt(keys)} keys` : "");
      note.className = "dash-subtitle";
      block.append(title, table, note);
      return block;
    });
    $("#key-queues").replaceChildren(...blocks);
  }

  function render(snap) {
    $("#updated-at").textContent = new Date(snap.now_ms).toLocaleTimeString();
    renderCounts(snap);
    renderErrors(snap);
    renderRunning(snap);
    renderKeys(snap);
  }

  function renderCounts(snap) {
    const badge = $("#invariant");
    if (!badge || !snap.invariant) return;
    for (const el of $$("[data-gauge]")) el.textContent = fmt(snap.gauges[el.dataset.gauge] ?? 0);
    for (const el of $$("[data-total]")) el.textContent = fmt(snap.totals[el.dataset.total] ?? 0);

    const inv = snap.invariant;
    badge.textContent = inv.healthy ? "Invariant holds" : "Invariant broken";
    badge.classList.toggle("healthy", inv.healthy);
    badge.classList.toggle("broken", !inv.healthy);
    $("#inv-left").textContent = fmt(inv.nacked_plus_reclaimed);
    $("#inv-right").textContent = fmt(inv.retried_plus_buried);
    $("#oldest-ready").textContent = fmtAge(snap.oldest_ready_age_s);

    const body = $("#queue-table tbody");
    const limits = snap.queue_settings || {};
    // Queues with live tasks, and paused, limited or keyed ones even when empty.
    const names = [...new Set([...Object.keys(snap.queues), ...Object.keys(limits)])].sort();
    const rows = names.map((name) => {
      const counts = snap.queues[name] || {};
      const tr = document.createElement("tr");
      tr.dataset.queue = name;
      tr.append(cell("th", name), ...STATES.map((s) => cell("td", fmt(counts[s] ?? 0))));
      tr.append(settingsCell(limits[name]));
      tr.classList.toggle("dash-paused", Boolean(limits[name] && limits[name].paused));
      return tr;
    });
    if (!rows.length) rows.push(emptyRow("No live tasks in any queue.", 6));
    body.replaceChildren(...rows);
  }

  function renderErrors(snap) {
    const list = $("#top-errors");
    if (!list) return;
    list.replaceChildren(
      ...snap.top_errors.map((e) => {
        const li = document.createElement("li");
        const a = document.createElement("a");
        a.href = e.dlq_url;
        a.title = "Open the dead-letter queue filtered on this error";
        a.append(cell("span", fmt(e.count) + " ×"), cell("code", e.error ?? "(no error recorded)"));
        a.firstChild.className = "dash-count";
        li.append(a);
        return li;
      })
    );
    $("#no-errors").hidden = snap.top_errors.length > 0;
  }

  function fmtFor(ms) {
    if (ms === null || ms === undefined) return "–";
    return fmtAge(Math.max(0, ms) / 1000);
  }

  // A running task's last report: a bar (indeterminate with a message only) and its text.
  function progressCell(progress) {
    const td = document.createElement("td");
    td.className = "dash-progress";
    if (!progress) {
      td.append(cell("span", "no report yet"));
      td.firstChild.className = "dash-empty";
      return td;
    }
    const bar = document.createElement("progress");
    bar.className = "broker-progress";
    const label = progress.fraction === null ? "" : Math.round(progress.fraction * 100) + "%";
    if (progress.fraction !== null) {
      bar.max = 1;
      bar.value = progress.fraction;
    }
    const text = [label, progress.message || ""].filter(Boolean).join(" ");
    bar.title = text;
    const span = cell("span", text);
    span.className = "broker-progress-text";
    td.append(bar, " ", span);
    return td;
  }

  function renderRunning(snap) {
    if (!$("#running-table")) return;
    const running = snap.running || [];
    const total = snap.gauges.handed_out || 0;
    $("#running-count").textContent =
      total > running.length ? `(the ${running.length} longest of ${fmt(total)})` : `(${fmt(total)})`;
    const rows = running.map((t) => {
      const tr = document.createElement("tr");
      tr.dataset.task = t.id;
      const link = document.createElement("a");
      link.href = t.url;
      link.textContent = "#" + t.id;
      const th = document.createElement("th");
      th.append(link);
      tr.append(th, cell("td", t.queue), cell("td", t.type || "–"), cell("td", t.worker || "–"),
        cell("td", fmtFor(t.claimed_ms === null ? null : snap.now_ms - t.claimed_ms)),
        progressCell(t.progress));
      return tr;
    });
    if (!rows.length) rows.push(emptyRow("No task is running.", 6));
    $("#running-table tbody").replaceChildren(...rows);
  }

  function record(snap) {
    if (!("enqueued" in snap.totals)) return; // counts are not the user's to view
    const t = snap.now_ms;
    const cur = {
      t,
      enqueued: snap.totals.enqueued,
      acked: snap.totals.acked,
      failed: snap.totals.nacked + snap.totals.reclaimed,
    };
    if (previous && t > previous.t) {
      const dt = (t - previous.t) / 1000;
      const point = { t };
      for (const { key } of SERIES) point[key] = (cur[key] - previous[key]) / dt;
      // A counter that went down means a new database: start the plot afresh.
      if (SERIES.some(({ key }) => point[key] < 0)) points.length = 0;
      else points.push(point);
    }
    previous = cur;
    while (points.length && points[0].t < t - WINDOW_MS) points.shift();
    const latest = points[points.length - 1];
    for (const el of $$("[data-rate]")) el.textContent = fmtRate(latest && latest[el.dataset.rate]);
  }

  // The window's whole minutes from the broker's history (every queue), one point each at the
  // minute's end: its counts over 60 s. A minute in which nothing was recorded is 0.
  function seed(recent, nowMs) {
    const byAt = new Map(recent.map((p) => [Date.parse(p.at), p]));
    const first = Math.ceil((nowMs - WINDOW_MS) / 60000) * 60000;
    for (let start = first; start + 60000 <= nowMs; start += 60000) {
      const p = byAt.get(start) || { enqueued: 0, acked: 0, nacked: 0, reclaimed: 0 };
      points.push({
        t: start + 60000,
        enqueued: p.enqueued / 60,
        acked: p.acked / 60,
        failed: (p.nacked + p.reclaimed) / 60,
      });
    }
  }

  // A round grid step (1, 2, 2.5 or 5 times a power of ten) giving at most about 4 lines.
  function niceStep(top) {
    const raw = Math.max(top, 1) / 4;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5]) if (raw <= m * power) return m * power;
    return 10 * power;
  }

  function draw() {
    const canvas = document.getElementById("rate-plot");
    if (!canvas) return;
    canvas.dataset.points = String(points.length);
    canvas.dataset.from = points.length ? String(points[0].t) : "";
    const style = getComputedStyle(root);
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);

    const fg = style.getPropertyValue("--body-quiet-color").trim() || "#666";
    const grid = style.getPropertyValue("--hairline-color").trim() || "#ddd";
    const pad = { left: 48, right: 12, top: 10, bottom: 24 };
    const plotW = width - pad.left - pad.right;
    const plotH = height - pad.top - pad.bottom;
    const end = previous ? previous.t : Date.now();
    // The x axis spans 1, 2, 3 or 5 minutes: as much as the page has seen, so a fresh page
    // does not squeeze its first seconds into the right edge.
    const seen = points.length ? end - points[0].t : 0;
    const span = [1, 2, 3, 5].map((m) => m * 60000).find((w) => w >= seen) ?? WINDOW_MS;
    const start = end - span;
    let highest = 0;
    for (const p of points) for (const { key } of SERIES) highest = Math.max(highest, p[key]);
    const yStep = niceStep(highest);
    const top = Math.max(1, Math.ceil(highest / yStep) * yStep);

    const x = (t) => pad.left + ((t - start) / span) * plotW;
    const y = (v) => pad.top + plotH - (v / top) * plotH;

    ctx.font = "11px " + (getComputedStyle(document.body).fontFamily || "sans-serif");
    ctx.lineWidth = 1;
    ctx.fillStyle = fg;
    ctx.strokeStyle = grid;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let i = 0; i * yStep <= top + 1e-9; i++) {
      const v = i * yStep;
      const yy = Math.round(y(v)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(pad.left, yy);
      ctx.lineTo(width - pad.right, yy);
      ctx.stroke();
      ctx.fillText(String(Number(v.toFixed(2))), pad.left - 6, yy);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const step = span <= 60000 ? 15000 : 60000;
    for (let ago = span; ago >= 0; ago -= step) {
      const label = ago === 0 ? "now" : ago % 60000 ? "−" + ago / 1000 + " s" : "−" + ago / 60000 + " min";
      ctx.fillText(label, x(end - ago), height - pad.bottom + 6);
    }

    if (points.length < 2) {
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.fillText("collecting rates…", pad.left + plotW / 2, pad.top + plotH / 2);
    }
    ctx.save();
    ctx.beginPath();
    ctx.rect(pad.left, pad.top - 2, plotW, plotH + 4);
    ctx.clip();
    ctx.lineWidth = 2;
    ctx.lineJoin = "round";
    for (const { key, cssVar } of SERIES) {
      if (!points.length) break;
      ctx.strokeStyle = style.getPropertyValue(cssVar).trim();
      ctx.beginPath();
      points.forEach((p, i) => (i ? ctx.lineTo(x(p.t), y(p[key])) : ctx.moveTo(x(p.t), y(p[key]))));
      ctx.stroke();
    }
    ctx.restore();
  }

  function setStale(stale, message) {
    const el = $("#updated");
    el.classList.toggle("stale", stale);
    if (message) el.textContent = message;
  }

  async function tick() {
    if (stopped) return;
    try {
      const res = await fetch(DATA_URL, {
        credentials: "same-origin",
        cache: "no-store",
        headers: { Accept: "application/json" },
      });
      if (res.status === 403) {
        stopped = true;
        setStale(true, "Your session has ended: reload the page to log in again.");
        return;
      }
      if (!res.ok) throw new Error("HTTP " + res.status);
      const snap = await res.json();
      render(snap);
      record(snap);
      draw();
      setStale(false);
    } catch (err) {
      setStale(true);
    } finally {
      if (!stopped) setTimeout(tick, INTERVAL_MS);
    }
  }

  const initial = JSON.parse(document.getElementById("dashboard-initial").textContent);
  const recent = document.getElementById("rates-initial");
  if (recent) seed(JSON.parse(recent.textContent), initial.now_ms);
  render(initial);
  record(initial);
  draw();
  window.addEventListener("resize", draw);
  setTimeout(tick, INTERVAL_MS);
})();
