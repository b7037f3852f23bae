// A workflow's graph in its admin page: dagre lays the steps out top to bottom, this draws
// them as SVG, a box per step (its colour its state, a link to its task) and an arrow per
// `after`. The data comes from the page (json_script), nothing is fetched.
(function () {
  "use strict";
  const holder = document.getElementById("workflow-graph");
  const data = JSON.parse(document.getElementById("workflow-graph-data").textContent);
  if (!holder || !data || !window.dagre) return;
  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 150, HEIGHT = 46;

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
  for (const id of g.nodes()) {
    const { x, y, step } = g.node(id);
    const link = make("a", { href: step.url, class: "step", "data-ref": step.ref, "data-state": step.state }, svg);
    make("rect", {
      x: x - WIDTH / 2, y: y - HEIGHT / 2, width: WIDTH, height: HEIGHT, rx: 6,
      fill: step.colour,
    }, link);
    const title = make("text", { x, y: y - 4, class: "ref" }, link);
    title.textContent = step.ref;
    const sub = make("text", { x, y: y + 13, class: "state" }, link);
    sub.textContent = `${step.state.replace("_", " ")} · #${step.id}`;
    make("title", {}, link).textContent = `${step.ref}: task ${step.id}, ${step.state}, attempts ${step.attempts}`;
  }

  const legend = document.getElementById("workflow-legend");
  for (const [state, colour] of Object.entries(data.colours)) {
    const item = document.createElement("span");
    item.className = "swatch";
    item.style.setProperty("--swatch", colour);
    item.textContent = state.replace("_", " ");
    legend.appendChild(item);
  }
})();
