// A workflow's graph in its admin page: dagre lays the steps out top to bottom, this draws
// them as SVG, a box per step (its colour its state, a link to its task, how long it ran) and an
// arrow per `after`. The first data comes from the page (json_script); while the workflow runs,
// the page reads its graph again every 2 s (the admin's graph.json) and redraws the boxes' colours
// and words and the workflow's state, and stops once the workflow has ended.
(function () {
  "use strict";
  const holder = document.getElementById("workflow-graph");
  const data = JSON.parse(document.getElementById("workflow-graph-data").textContent);
  if (!holder || !data || !window.dagre) return;
  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 160, HEIGHT = 58;
  const EVERY_MS = 2000;

  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "TB", nodesep: 24, ranksep: 48, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const node of data.nodes) g.setNode(node.id, { width: WIDTH, height: HEIGHT, step: node });
  for (const edge of data.edges) g.setEdge(edge.from, edge.to);
  dagre.layout(g);

  const make = (name, attrs, parent) => {
    const el = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (parent) parent.appendChild(el);
    return el;
  };
  const size = g.graph();
  const svg = make("svg", {
    width: size.width, height: size.height, viewBox: `0 0 ${size.width} ${size.height}`,
    role: "img",
  }, holder);
  const defs = make("defs", {}, svg);
  const marker = make("marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8,
    orient: "auto-start-reverse",
  }, defs);
  make("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow-head" }, marker);

  for (const e of g.edges()) {
    const points = g.edge(e).points;
    const d = points.map((p, i) => `${i ? "L" : "M"} ${p.x} ${p.y}`).join(" ");
    make("path", { d, class: "edge", "marker-end": "url(#arrow)", "data-from": e.v, "data-to": e.w }, svg);
  }

  const boxes = {}; // task id → {link, rect, sub, took, title}
  for (const id of g.nodes()) {
    const { x, y, step } = g.node(id);
    const link = make("a", { href: step.url, class: "step", "data-ref": step.ref }, svg);
    const rect = make("rect", {
      x: x - WIDTH / 2, y: y - HEIGHT / 2, width: WIDTH, height: HEIGHT, rx: 6,
    }, link);
    make("text", { x, y: y - 10, class: "ref" }, link).textContent = step.ref;
    const sub = make("text", { x, y: y + 6, class: "state" }, link);
    const took = make("text", { x, y: y + 20, class: "took" }, link);
    const title = make("title", {}, link);
    boxes[id] = { link, rect, sub, took, title };
  }

  // A step's box as its state and duration now.
  function paint(step) {
    const box = boxes[step.id];
    if (!box) return;
    box.link.setAttribute("data-state", step.state);
    box.rect.setAttribute("fill", step.colour);
    box.sub.textContent = `${step.label} · #${step.id}`;
    box.took.textContent = step.duration === null ? "" : (step.state === "handed_out" ? "running " : "ran ") + step.duration;
    box.took.setAttribute("data-ms", step.duration_ms === null ? "" : String(step.duration_ms));
    box.title.textContent = `${step.ref}: task ${step.id}, ${step.label}, attempts ${step.attempts}`;
  }

  // The page's own fields (Django's read-only rows) say the workflow's state and step counts.
  function fields(graph) {
    const set = (name, text) => {
      const el = document.querySelector(`.field-${name} .readonly`);
      if (el) el.textContent = text;
    };
    set("state", graph.state);
    set("steps", graph.steps_by_state || "-");
    holder.dataset.state = graph.state;
    const cancel = document.getElementById("cancel-workflow-form");
    if (cancel && !graph.cancellable) cancel.closest("li").hidden = true;
  }

  function show(graph) {
    for (const step of graph.nodes) paint(step);
    fields(graph);
  }

  const legend = document.getElementById("workflow-legend");
  for (const [label, colour] of Object.entries(data.colours)) {
    const item = document.createElement("span");
    item.className = "swatch";
    item.style.setProperty("--swatch", colour);
    item.textContent = label;
    legend.appendChild(item);
  }

  const live = document.getElementById("workflow-live");
  async function follow() {
    try {
      const res = await fetch(holder.dataset.url, {
        credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" },
      });
      if (!res.ok) throw new Error("HTTP " + res.status);
      const graph = await res.json();
      show(graph);
      if (!graph.running) {
        live.textContent = "The workflow has ended.";
        return;
      }
      live.textContent = "Following it: updated " + new Date().toLocaleTimeString() + ".";
    } catch (err) {
      live.textContent = "Could not read the workflow just now; trying again.";
    }
    setTimeout(follow, EVERY_MS);
  }

  show(data);
  if (data.running && holder.dataset.url) {
    live.textContent = "Following it while it runs.";
    setTimeout(follow, EVERY_MS);
  }
})();
