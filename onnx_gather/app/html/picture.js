/* onnx-gather: the picture of a model as ONNX Runtime's DirectML session runs it, drawn in SVG from dagre's layout.
   Each <div class="picture" data-source=ID> reads its data from the JSON script element ID
   (onnx_gather.app.check_page.picture): per graph its nodes, the links between them and the boxes (DirectML
   partitions, runs of CPU nodes). A box of more than one node is drawn closed, one shape with its node count, and
   opens on a click: its nodes are laid out once, then the graph around it again. Layouts run in a Web Worker made
   of the page's own copy of dagre, so that the page stays responsive while a large box is laid out. */
(function () {
  "use strict";

  const FONT = "12px system-ui, sans-serif";
  const BOLD = "bold 12px system-ui, sans-serif";
  const LINE = 15;
  const PAD = 8;
  const TITLE = 24; // the title bar of an open box
  const NAME_LENGTH = 34;
  const READABLE = 0.6; // the least scale a picture opens at
  const OPEN_ALL = 150; // a graph of at most so many nodes opens with every box open

  // What the worker runs, and this page too where no worker can start.
  function layOut(nodes, edges, direction) {
    const graph = new dagre.graphlib.Graph();
    graph.setGraph({ rankdir: direction, nodesep: 16, ranksep: 34, edgesep: 8, marginx: 12, marginy: 12 });
    graph.setDefaultEdgeLabel(function () { return {}; });
    for (const [key, width, height] of nodes) graph.setNode(key, { width: width, height: height });
    for (const [from, to] of edges) graph.setEdge(from, to);
    dagre.layout(graph);
    const placed = {};
    for (const key of graph.nodes()) {
      const node = graph.node(key);
      placed[key] = [node.x, node.y];
    }
    const routes = graph.edges().map(function (edge) {
      return [edge.v, edge.w, graph.edge(edge).points.map(function (p) { return [Math.round(p.x), Math.round(p.y)]; })];
    });
    const label = graph.graph();
    return { placed: placed, routes: routes, width: label.width || 0, height: label.height || 0 };
  }

  const Layouts = {
    worker: null,
    waiting: new Map(),
    next: 0,
    start() {
      const library = document.getElementById("layout-library");
      if (!library || typeof Worker === "undefined") return;
      const source = library.textContent + "\n" + layOut.toString() + "\n" +
        "self.onmessage = function (event) { var m = event.data; try { self.postMessage({ id: m.id, " +
        "result: layOut(m.nodes, m.edges, m.direction) }); } catch (error) { self.postMessage({ id: m.id, error: String(error) }); } };";
      try {
        const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
        this.worker = new Worker(url);
      } catch (error) {
        this.worker = null; // laid out on this page's thread instead
        return;
      }
      this.worker.onmessage = (event) => {
        const waiting = this.waiting.get(event.data.id);
        this.waiting.delete(event.data.id);
        if (event.data.error) waiting.reject(new Error(event.data.error));
        else waiting.resolve(event.data.result);
      };
      this.worker.onerror = (event) => { // the worker could not run: lay out here what it was given
        event.preventDefault();
        this.worker = null;
        for (const waiting of this.waiting.values()) waiting.resolve(layOut(waiting.nodes, waiting.edges, waiting.direction));
        this.waiting.clear();
      };
    },
    run(nodes, edges) {
      const direction = across(nodes, edges);
      if (!this.worker) {
        return new Promise(function (resolve) { setTimeout(function () { resolve(layOut(nodes, edges, direction)); }, 0); });
      }
      return new Promise((resolve, reject) => {
        const id = this.next++;
        this.waiting.set(id, { resolve: resolve, reject: reject, nodes: nodes, edges: edges, direction: direction });
        this.worker.postMessage({ id: id, nodes: nodes, edges: edges, direction: direction });
      });
    },
  };

  // Top to bottom, as a deep graph reads best; left to right where the graph is so shallow and broad that top to
  // bottom would lay its shapes out in a few rows a hundred wide (a model whose partitions take in most nodes).
  function across(nodes, edges) {
    const rank = new Map(nodes.map(function (n) { return [n[0], 0]; }));
    const next = new Map(nodes.map(function (n) { return [n[0], []]; }));
    const count = new Map(nodes.map(function (n) { return [n[0], 0]; }));
    for (const [from, to] of edges) { next.get(from).push(to); count.set(to, count.get(to) + 1); }
    const ready = nodes.map(function (n) { return n[0]; }).filter(function (key) { return count.get(key) === 0; });
    while (ready.length) { // longest paths, over the edges of no cycle
      const key = ready.pop();
      for (const to of next.get(key)) {
        rank.set(to, Math.max(rank.get(to), rank.get(key) + 1));
        count.set(to, count.get(to) - 1);
        if (count.get(to) === 0) ready.push(to);
      }
    }
    const breadth = new Map();
    for (const value of rank.values()) breadth.set(value, (breadth.get(value) || 0) + 1);
    const ranks = breadth.size;
    const broadest = Math.max.apply(null, Array.from(breadth.values()));
    const wide = nodes.reduce(function (sum, n) { return sum + n[1]; }, 0) / Math.max(nodes.length, 1);
    const high = nodes.reduce(function (sum, n) { return sum + n[2]; }, 0) / Math.max(nodes.length, 1);
    return broadest * (wide + 16) > 3 * ranks * (high + 34) ? "LR" : "TB";
  }

  const measure = document.createElement("canvas").getContext("2d");
  function width(text, font) {
    measure.font = font;
    return measure.measureText(text).width;
  }

  function escape(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }

  function shorten(text, length) {
    if (text.length <= length) return text;
    const half = Math.floor((length - 1) / 2);
    return text.slice(0, half) + "\u2026" + text.slice(text.length - half);
  }

  function nodes(count) { return count === 1 ? "1 node" : count + " nodes"; }

  function sized(lines) {
    const wide = Math.max.apply(null, lines.map(function (line, i) { return width(line, i === 0 ? BOLD : FONT); }));
    return [Math.ceil(wide) + 2 * PAD + 16, lines.length * LINE + 2 * PAD - 4];
  }

  function nodeLines(node) {
    const lines = [node.op, shorten(node.name, NAME_LENGTH)];
    if (node.cause) lines.push(node.cause);
    return lines;
  }

  function boxLines(box) {
    return [box.title, nodes(box.size) + (box.dml ? "" : box.causes ? ": " + shorten(box.causes, 48) : ""),
      shorten(box.ops, 48)];
  }

  function badges(item, right) {
    let svg = "";
    let x = right - 10;
    for (const [key, kind] of [["met", "met"], ["possible", "possible"]]) {
      if (item[key]) {
        svg += '<g class="badge ' + kind + '"><circle cx="' + x + '" cy="0" r="9"/><text x="' + x +
          '" y="4" text-anchor="middle">' + item[key] + "</text><title>" + item[key] + " known behaviour" +
          (item[key] === 1 ? "" : "s") + " " + kind + "</title></g>";
        x -= 20;
      }
    }
    return svg;
  }

  function textLines(lines, x) {
    return lines.map(function (line, i) {
      return '<text x="' + x + '" y="' + (PAD + 8 + i * LINE) + '"' + (i === 0 ? ' class="head"' : "") + ">" +
        escape(line) + "</text>";
    }).join("");
  }

  function route(points) {
    return "M" + points.map(function (p) { return p[0] + "," + p[1]; }).join("L");
  }

  class Picture {
    constructor(holder, index) {
      this.holder = holder;
      this.index = index;
      this.data = JSON.parse(document.getElementById(holder.dataset.source).textContent);
      this.svg = holder.querySelector("svg");
      this.details = holder.querySelector(".details");
      this.status = holder.querySelector(".status");
      this.found = holder.querySelector(".found");
      this.search = holder.querySelector(".search");
      this.choice = holder.querySelector(".graph");
      this.graphIndex = 0;
      this.open = new Set();
      this.inner = new Map(); // graph:box -> the layout of the box's own nodes
      this.outer = new Map(); // graph:open boxes -> the layout of the graph
      this.view = { x: 0, y: 0, k: 1 };
      this.hits = [];
      this.hitIndex = -1;
      this.token = 0;
      this.drawn = null;
      this.data.graphs.forEach((graph, i) => {
        const option = document.createElement("option");
        option.value = String(i);
        option.textContent = graph.graph + " (" + nodes(graph.nodes.length) + ")";
        this.choice.appendChild(option);
      });
      this.choice.hidden = this.data.graphs.length < 2;
      this.bind();
      this.openSmall();
    }

    openSmall() {
      this.open.clear();
      if (this.graph.nodes.length <= OPEN_ALL) for (const box of Object.keys(this.graph.boxes)) this.open.add(Number(box));
    }

    get graph() { return this.data.graphs[this.graphIndex]; }

    members(box) {
      const graph = this.graph;
      if (!graph.members) {
        graph.members = {};
        graph.nodes.forEach(function (node, i) { (graph.members[node.box] = graph.members[node.box] || []).push(i); });
      }
      return graph.members[box] || [];
    }

    unit(node) { // the key of the shape the graph around a node is laid out with: the node, or its box
      const box = this.graph.nodes[node].box;
      return this.members(box).length > 1 ? "b" + box : "n" + node;
    }

    async innerLayout(box) {
      const key = this.graphIndex + ":" + box;
      if (!this.inner.has(key)) {
        const inside = new Set(this.members(box));
        const graph = this.graph;
        const shapes = this.members(box).map(function (i) { return ["n" + i].concat(sized(nodeLines(graph.nodes[i]))); });
        const edges = graph.links.filter(function (l) { return inside.has(l[0]) && inside.has(l[1]); })
          .map(function (l) { return ["n" + l[0], "n" + l[1]]; });
        this.say("laying out " + nodes(shapes.length) + "\u2026");
        this.inner.set(key, await Layouts.run(shapes, edges));
      }
      return this.inner.get(key);
    }

    async render(focus) {
      const token = ++this.token;
      const started = performance.now();
      const graph = this.graph;
      const opened = Array.from(this.open).filter((box) => this.members(box).length > 1).sort(function (a, b) {
        return a - b;
      });
      const inner = {};
      for (const box of opened) {
        inner[box] = await this.innerLayout(box);
        if (token !== this.token) return;
      }
      const units = new Map();
      graph.nodes.forEach((node, i) => {
        const key = this.unit(i);
        const box = node.box;
        if (units.has(key)) return;
        if (key[0] === "n") units.set(key, { kind: "node", node: i, size: sized(nodeLines(node)) });
        else if (!this.open.has(box)) units.set(key, { kind: "box", box: box, size: sized(boxLines(graph.boxes[box])) });
        else {
          const wide = Math.max(inner[box].width, width(this.openTitle(box), BOLD) + 3 * PAD);
          units.set(key, { kind: "open", box: box, size: [wide + 2 * PAD, inner[box].height + TITLE + PAD] });
        }
      });
      const edges = new Map();
      for (const [from, to, copy] of graph.links) {
        const a = this.unit(from);
        const b = this.unit(to);
        if (a === b) continue;
        const key = a + ">" + b;
        if (!edges.has(key) || copy) edges.set(key, copy || edges.get(key) || "");
      }
      const layoutKey = this.graphIndex + ":" + opened.join(",");
      if (!this.outer.has(layoutKey)) {
        const count = units.size;
        this.say("laying out " + count + " boxes\u2026");
        const shapes = Array.from(units, function ([key, unit]) { return [key].concat(unit.size); });
        const pairs = Array.from(edges.keys(), function (key) { return key.split(">"); });
        this.outer.set(layoutKey, await Layouts.run(shapes, pairs));
        if (token !== this.token) return;
      }
      const laid = this.outer.get(layoutKey);
      const layoutDone = performance.now();
      this.drawn = { graph: graph, units: units, edges: edges, laid: laid, inner: inner };
      this.draw();
      this.say("");
      const timing = {
        graph: graph.graph, shapes: units.size, edges: edges.size,
        layout: Math.round(layoutDone - started), draw: Math.round(performance.now() - layoutDone),
        at: Math.round(performance.now()),
      };
      window.onnxGather.timings.push(timing);
      if (this.first === undefined) {
        this.first = timing;
        this.fit(true);
      }
      if (focus !== undefined) this.center(focus);
    }

    openTitle(box) {
      const about = this.graph.boxes[box];
      return "\u25be " + about.title + " \u00b7 " + nodes(about.size) + " (click to close)";
    }

    say(text) { this.status.textContent = text; }

    draw() {
      const { graph, units, edges, laid, inner } = this.drawn;
      const hits = new Set(this.hits);
      const hitBoxes = {};
      for (const i of this.hits) hitBoxes[graph.nodes[i].box] = (hitBoxes[graph.nodes[i].box] || 0) + 1;
      this.where = {}; // node -> its centre on the drawing, where it is drawn
      const arrow = "arrow-" + this.index;
      const copyArrow = "copy-arrow-" + this.index;
      const parts = ['<defs><marker id="' + arrow + '" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" ' +
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" class="arrowhead"/></marker>' +
        '<marker id="' + copyArrow + '" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" ' +
        'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" class="arrowhead copy"/></marker></defs>',
      '<g class="viewport">'];
      const nodeShape = (i, left, top) => {
        const node = graph.nodes[i];
        const lines = nodeLines(node);
        const [w, h] = sized(lines);
        this.where[i] = [left + w / 2, top + h / 2];
        const classes = ["node", node.on === "DirectML" ? "dml" : "cpu"];
        if (node.fails) classes.push("fails");
        if (node.marks) classes.push("marked");
        if (hits.has(i)) classes.push("hit");
        let svg = '<g class="' + classes.join(" ") + '" data-node="' + i + '" transform="translate(' + left + "," +
          top + ')"><rect width="' + w + '" height="' + h + '" rx="4"/>' + textLines(lines, PAD) + badges(node, w);
        if (node.marks) svg += '<text class="mark" x="0" y="-5">\u25c6 ' + escape(shorten(node.marks.join("; "), 60)) + "</text>";
        return svg + "<title>" + escape(node.name + " (" + node.op + ", " + node.on + "): " + node.reason) + "</title></g>";
      };
      for (const [from, to, points] of laid.routes) {
        const copy = edges.get(from + ">" + to) || "";
        parts.push('<path class="edge' + (copy ? " copy" : "") + '" d="' + route(points) + '" marker-end="url(#' +
          (copy ? copyArrow : arrow) + ')">' + (copy ? "<title>" + escape(copy) + "</title>" : "") + "</path>");
      }
      for (const [key, unit] of units) {
        const [x, y] = laid.placed[key];
        const [w, h] = unit.size;
        const left = Math.round(x - w / 2);
        const top = Math.round(y - h / 2);
        if (unit.kind === "node") {
          parts.push(nodeShape(unit.node, left, top));
          continue;
        }
        const box = graph.boxes[unit.box];
        const classes = ["box", box.dml ? "dml" : "cpu", unit.kind];
        if (box.fails) classes.push("fails");
        if (box.marks) classes.push("marked");
        if (hitBoxes[unit.box] && unit.kind === "box") classes.push("hit"); // an open box's nodes say it themselves
        if (unit.kind === "box") {
          for (const i of this.members(unit.box)) this.where[i] = [x, y];
          parts.push('<g class="' + classes.join(" ") + '" data-box="' + unit.box + '" transform="translate(' + left +
            "," + top + ')"><rect width="' + w + '" height="' + h + '" rx="6"/>' + textLines(boxLines(box), PAD) +
            badges(box, w) + (hitBoxes[unit.box] ? '<text class="hits" x="' + (w - 6) + '" y="' + (h - 6) +
            '" text-anchor="end">' + hitBoxes[unit.box] + " found</text>" : "") +
            (box.marks ? '<text class="mark" x="0" y="-5">\u25c6 ' + box.marks + " marked inside</text>" : "") +
            "<title>" + escape(box.title + ": " + nodes(box.size) + " (" + box.ops + "); click to open") +
            "</title></g>");
          continue;
        }
        const layout = inner[unit.box];
        parts.push('<g class="' + classes.join(" ") + '" transform="translate(' + left + "," + top + ')">' +
          '<rect width="' + w + '" height="' + h + '" rx="6"/><g class="close" data-close="' + unit.box + '">' +
          '<rect class="bar" width="' + w + '" height="' + TITLE + '" rx="6"/><text class="head" x="' + PAD +
          '" y="16">' + escape(this.openTitle(unit.box)) + "</text></g>" + badges(box, w));
        const offsetX = left + PAD;
        const offsetY = top + TITLE;
        parts.push('<g transform="translate(' + PAD + "," + TITLE + ')">');
        for (const [, , points] of layout.routes) parts.push('<path class="edge inner" d="' + route(points) + '" marker-end="url(#' + arrow + ')"/>');
        for (const i of this.members(unit.box)) {
          const [cx, cy] = layout.placed["n" + i];
          const [nw, nh] = sized(nodeLines(graph.nodes[i]));
          const shape = nodeShape(i, Math.round(cx - nw / 2), Math.round(cy - nh / 2));
          this.where[i] = [this.where[i][0] + offsetX, this.where[i][1] + offsetY];
          parts.push(shape);
        }
        parts.push("</g></g>");
      }
      parts.push("</g>");
      this.svg.innerHTML = parts.join("");
      this.viewport = this.svg.querySelector(".viewport");
      this.apply();
    }

    apply() {
      if (this.viewport) {
        this.viewport.setAttribute("transform", "translate(" + this.view.x + "," + this.view.y + ") scale(" + this.view.k + ")");
      }
    }

    fit(start) { // the whole drawing; at the start, no smaller than READABLE, from its top (its left if wide)
      if (!this.drawn) return;
      const box = this.svg.getBoundingClientRect();
      const laid = this.drawn.laid;
      const whole = Math.min(1, box.width / Math.max(laid.width, 1), box.height / Math.max(laid.height, 1));
      const k = start ? Math.max(whole, READABLE) : whole;
      const below = laid.height * k < box.height ? (box.height - laid.height * k) / 2 : 0;
      this.view = {
        k: k,
        x: laid.width * k < box.width ? (box.width - laid.width * k) / 2 : 0,
        y: start ? Math.min(below, 8) : below, // the start of the model at the top
      };
      this.apply();
    }

    zoom(factor, at) {
      const box = this.svg.getBoundingClientRect();
      const [px, py] = at || [box.width / 2, box.height / 2];
      const k = Math.min(4, Math.max(0.02, this.view.k * factor));
      this.view.x = px - (px - this.view.x) * (k / this.view.k);
      this.view.y = py - (py - this.view.y) * (k / this.view.k);
      this.view.k = k;
      this.apply();
    }

    center(node) {
      const at = this.where && this.where[node];
      if (!at) return;
      const box = this.svg.getBoundingClientRect();
      this.view.k = Math.max(this.view.k, 0.8);
      this.view.x = box.width / 2 - at[0] * this.view.k;
      this.view.y = box.height / 2 - at[1] * this.view.k;
      this.apply();
      this.show(node);
    }

    focus(node) {
      const box = this.graph.nodes[node].box;
      if (this.members(box).length > 1 && !this.open.has(box)) {
        this.open.add(box);
        this.render(node);
      } else this.center(node);
    }

    show(node) {
      const item = this.graph.nodes[node];
      const rows = [["node", item.name], ["op type", item.op], ["runs on", item.on], ["why", item.reason]];
      if (item.of) rows.push(["stands for", item.of.join(", ") || "(no node of the model)"]);
      if (item.flags) rows.push(["known behaviours", item.flags.join("; ")]);
      if (item.fails) rows.push(["fails", "DirectML fails at this node (its row in the table says how)"]);
      if (item.marks) rows.push(["marked", item.marks.join("; ")]);
      const box = this.graph.boxes[item.box];
      rows.push(["box", box.title + " (" + nodes(box.size) + ")"]);
      this.details.innerHTML = "<dl>" + rows.map(function (r) {
        return "<dt>" + escape(r[0]) + "</dt><dd>" + escape(r[1]) + "</dd>";
      }).join("") + "</dl>";
      this.details.hidden = false;
    }

    find(query) {
      this.query = query.trim().toLowerCase();
      this.hits = [];
      this.hitIndex = -1;
      if (this.query) {
        this.graph.nodes.forEach((node, i) => {
          const said = [node.name, node.op].concat(node.of || []).join("\n").toLowerCase();
          if (said.includes(this.query)) this.hits.push(i);
        });
      }
      this.found.textContent = this.query ? (this.hits.length === 1 ? "1 node found" : this.hits.length + " nodes found") : "";
      if (this.drawn) this.draw();
    }

    bind() {
      let timer = 0;
      this.search.addEventListener("input", () => {
        clearTimeout(timer);
        timer = setTimeout(() => this.find(this.search.value), 150);
      });
      this.search.addEventListener("keydown", (event) => {
        if (event.key !== "Enter") return;
        clearTimeout(timer);
        if (this.search.value.trim().toLowerCase() !== this.query) this.find(this.search.value);
        if (!this.hits.length) return;
        this.hitIndex = (this.hitIndex + 1) % this.hits.length;
        this.found.textContent = (this.hitIndex + 1) + " of " + this.hits.length;
        this.focus(this.hits[this.hitIndex]);
      });
      this.choice.addEventListener("change", () => {
        this.graphIndex = Number(this.choice.value);
        this.openSmall();
        this.first = undefined;
        this.find(this.search.value);
        this.render();
      });
      this.holder.querySelector(".fit").addEventListener("click", () => this.fit(false));
      this.holder.querySelector(".in").addEventListener("click", () => this.zoom(1.25));
      this.holder.querySelector(".out").addEventListener("click", () => this.zoom(0.8));
      this.holder.querySelector(".collapse").addEventListener("click", () => { this.open.clear(); this.render(); });
      let drag = null;
      this.svg.addEventListener("pointerdown", (event) => {
        drag = { x: event.clientX, y: event.clientY, vx: this.view.x, vy: this.view.y, moved: false };
      });
      this.svg.addEventListener("pointermove", (event) => {
        if (!drag) return;
        const dx = event.clientX - drag.x;
        const dy = event.clientY - drag.y;
        if (!drag.moved && Math.abs(dx) + Math.abs(dy) > 4) {
          drag.moved = true;
          this.svg.setPointerCapture(event.pointerId);
        }
        if (drag.moved) {
          this.view.x = drag.vx + dx;
          this.view.y = drag.vy + dy;
          this.apply();
        }
      });
      this.svg.addEventListener("pointerup", (event) => {
        const moved = drag && drag.moved;
        drag = null;
        if (moved) return;
        const target = event.target.closest("[data-node],[data-box],[data-close]");
        if (!target) { // a click beside the shapes puts the details away
          this.details.hidden = true;
          return;
        }
        if (target.dataset.close !== undefined) {
          this.open.delete(Number(target.dataset.close));
          this.render();
        } else if (target.dataset.box !== undefined) {
          this.open.add(Number(target.dataset.box));
          this.render();
        } else this.show(Number(target.dataset.node));
      });
      this.svg.addEventListener("wheel", (event) => {
        event.preventDefault();
        const box = this.svg.getBoundingClientRect();
        if (event.ctrlKey || event.metaKey) {
          this.zoom(Math.exp(-event.deltaY * 0.01), [event.clientX - box.left, event.clientY - box.top]);
        } else {
          this.view.x -= event.shiftKey ? event.deltaY : event.deltaX;
          this.view.y -= event.shiftKey ? 0 : event.deltaY;
          this.apply();
        }
      }, { passive: false });
      document.addEventListener("onnx-gather-focus", (event) => {
        const graph = this.data.graphs.findIndex(function (g) { return g.graph === event.detail.graph; });
        if (graph < 0) return;
        const node = this.data.graphs[graph].nodes.findIndex(function (n) { return n.name === event.detail.name; });
        if (node < 0) return;
        this.holder.scrollIntoView({ block: "start" });
        if (graph !== this.graphIndex) {
          this.graphIndex = graph;
          this.choice.value = String(graph);
          this.openSmall();
        }
        this.focus(node);
      });
    }
  }

  window.onnxGather = { timings: [], pictures: [] };
  const holders = Array.from(document.querySelectorAll(".picture[data-source]"));
  if (holders.length) Layouts.start();
  window.onnxGather.pictures = holders.map(function (holder, i) { return new Picture(holder, i); });
  window.onnxGather.ready = Promise.all(window.onnxGather.pictures.map(function (picture) { return picture.render(); }))
    .then(function () { return window.onnxGather.timings.slice(); });
})();
