// The dashboard's history charts (uPlot, served from our own static files): throughput, failures,
// queue depth by state and processing time over 1 hour, 24 hours or 7 days, for one queue or all.
// The points are the broker's (GET /stats/history, kept in the database), so a reload shows the
// past; the page starts from the points embedded in it and refetches while it is open. The range
// and queue shown are kept in the page's URL (?range=24h&queue=mail), so a reload keeps them.
"use strict";

(function () {
  const root = document.getElementById("history");
  if (!root || typeof uPlot === "undefined") return;
  const URL_ = root.dataset.url;
  // {name: {span, step, every, words}}: broker/dashboard/charts.py's RANGES.
  const RANGES = JSON.parse(document.getElementById("history-ranges").textContent);
  // [key in a point, label, CSS colour variable]
  const CHARTS = {
    throughput: [
      ["enqueued", "in (enqueued)", "--dash-enqueued"],
      ["acked", "out (acked)", "--dash-acked"],
    ],
    failures: [
      ["nacked", "nacked", "--dash-failed"],
      ["reclaimed", "reclaimed (lease expired)", "--dash-reclaimed"],
      ["buried", "buried (to the DLQ)", "--dash-buried"],
    ],
    depth: [
      ["ready", "ready", "--dash-enqueued"],
      ["handed_out", "handed out", "--dash-running"],
      ["delayed", "delayed", "--dash-delayed"],
      ["dead", "dead", "--dash-failed"],
      ["blocked", "blocked", "--dash-blocked"],
    ],
    processing: [
      ["processing_p50_ms", "p50", "--dash-acked"],
      ["processing_p95_ms", "p95", "--dash-failed"],
    ],
  };

  const GAUGES = new Set(CHARTS.depth.map(([key]) => key));

  let range = root.dataset.initialRange; // as the URL asked, the server checked
  let queueName = root.dataset.initialQueue;
  let timer = null;
  let asked = 0; // the latest request: an older answer arriving late is dropped
  const plots = {};

  const fmt = (n) => Number(n).toLocaleString("en-US");
  const fmtMs = (ms) => (ms >= 1000 ? (ms / 1000).toFixed(ms >= 10000 ? 0 : 1) + " s" : Math.round(ms) + " ms");
  const color = (name) => getComputedStyle(root).getPropertyValue(name).trim() || "#888";

  // Every bucket of the range, oldest first: a bucket nothing was recorded in counts 0 (and has
  // no processing time).
  function columns(points, step, span) {
    const nowS = Date.now() / 1000;
    const last = points.length ? Date.parse(points[points.length - 1].at) / 1000 : 0;
    const end = Math.max(Math.floor(nowS / step) * step, last);
    const start = Math.floor((nowS - span) / step) * step;
    const byAt = new Map(points.map((p) => [Date.parse(p.at) / 1000, p]));
    const xs = [];
    for (let t = start; t <= end; t += step) xs.push(t);
    const data = { x: xs };
    for (const specs of Object.values(CHARTS)) {
      for (const [key] of specs) {
        // A gauge is sampled when it changes (and each minute a queue holds tasks): a bucket
        // without a sample keeps the last one. Before the first, unknown.
        let held = null;
        data[key] = xs.map((t) => {
          const p = byAt.get(t);
          if (GAUGES.has(key)) return p ? (held = p[key]) : held;
          if (p) return p[key];
          return key.startsWith("processing_") ? null : 0;
        });
      }
    }
    return data;
  }

  function sumOf(values) {
    return values.reduce((a, b) => a + (b || 0), 0);
  }

  function lastOf(values) {
    for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i];
    return null;
  }

  function captions(data, step) {
    const per = step === 60 ? "a minute" : "an hour";
    const words = RANGES[range].words;
    const set = (name, text) => (root.querySelector(`[data-sum="${name}"]`).textContent = text);
    set("throughput", `in ${fmt(sumOf(data.enqueued))} · out ${fmt(sumOf(data.acked))} over ${words} (tasks ${per})`);
    set(
      "failures",
      `nacked ${fmt(sumOf(data.nacked))} · reclaimed ${fmt(sumOf(data.reclaimed))} · buried ${fmt(sumOf(data.buried))}`
    );
    const now = CHARTS.depth.map(([key, label]) => `${label} ${fmt(data[key][data[key].length - 1] || 0)}`);
    set("depth", "now: " + now.join(" · "));
    const p95 = lastOf(data.processing_p95_ms);
    set("processing", p95 === null ? "no task settled in range" : `latest p95 ${fmtMs(p95)}`);
  }

  function options(name, width) {
    const fg = color("--body-quiet-color");
    const grid = color("--hairline-color");
    const isMs = name === "processing";
    return {
      width,
      height: 190,
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(isMs ? 1 : 4, max * 1.1)] } },
      series: [
        {},
        ...CHARTS[name].map(([key, label, cssVar]) => ({
          label,
          stroke: color(cssVar),
          width: 2,
          spanGaps: isMs,
          points: { show: false },
          value: (u, v) => (v === null || v === undefined ? "–" : isMs ? fmtMs(v) : fmt(v)),
        })),
      ],
      axes: [
        { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } },
        {
          stroke: fg,
          size: 64,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid },
          values: (u, vals) => vals.map((v) => (isMs ? fmtMs(v) : fmt(v))),
        },
      ],
    };
  }

  function draw(answer) {
    const data = columns(answer.points, answer.step, RANGES[range].span);
    for (const name of Object.keys(CHARTS)) {
      const series = [data.x, ...CHARTS[name].map(([key]) => data[key])];
      const box = root.querySelector(`[data-chart="${name}"] .dash-plot`);
      if (plots[name]) plots[name].setData(series);
      else plots[name] = new uPlot(options(name, box.clientWidth || 400), series, box);
    }
    captions(data, answer.step);
    root.dataset.points = String(answer.points.length);
    root.dataset.step = String(answer.step);
    const updated = root.querySelector("#history-updated");
    updated.textContent = "Updated " + new Date().toLocaleTimeString();
    updated.classList.remove("stale");
  }

  async function refresh() {
    clearTimeout(timer);
    const { span, step, every } = RANGES[range];
    const since = new Date(Date.now() - span * 1000).toISOString();
    const params = new URLSearchParams({ step: String(step), since });
    if (queueName) params.set("queue", queueName);
    const mine = ++asked;
    try {
      const res = await fetch(`${URL_}?${params}`, {
        credentials: "same-origin",
        cache: "no-store",
        headers: { Accept: "application/json" },
      });
      if (res.status === 403) return; // the session ended: dashboard.js says so
      if (!res.ok) throw new Error("HTTP " + res.status);
      const answer = await res.json();
      if (mine === asked) draw(answer);
    } catch (err) {
      root.querySelector("#history-updated").classList.add("stale");
    } finally {
      if (mine === asked) timer = setTimeout(refresh, every);
    }
  }

  // The choice into the URL, in place (no new history entry per click): a reload keeps it.
  function remember() {
    const url = new URL(window.location.href);
    url.searchParams.set("range", range);
    if (queueName) url.searchParams.set("queue", queueName);
    else url.searchParams.delete("queue");
    window.history.replaceState(window.history.state, "", url);
  }

  for (const button of root.querySelectorAll("[data-range]")) {
    button.addEventListener("click", () => {
      range = button.dataset.range;
      for (const b of root.querySelectorAll("[data-range]")) b.setAttribute("aria-pressed", String(b === button));
      remember();
      refresh();
    });
  }
  root.querySelector("#history-queue").addEventListener("change", (event) => {
    queueName = event.target.value;
    remember();
    refresh();
  });
  // Each chart follows its box's width (a window resize, the admin's side bar folding).
  const resized = new ResizeObserver((entries) => {
    for (const entry of entries) {
      const plot = plots[entry.target.closest("[data-chart]").dataset.chart];
      const width = Math.floor(entry.contentRect.width);
      if (plot && width > 0 && width !== plot.width) plot.setSize({ width, height: 190 });
    }
  });
  for (const box of root.querySelectorAll(".dash-plot")) resized.observe(box);

  draw(JSON.parse(document.getElementById("history-initial").textContent));
  timer = setTimeout(refresh, RANGES[range].every);
})();
