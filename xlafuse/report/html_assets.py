"""The style and the script of report.html, inlined into the page: no file or network beside it.

The script reads the page's data (`<script type="application/json" id="data">`,
`xlafuse.report.html_data.page_data`) and draws the tabs from it: the kernel table of a cell
(sorted by a click on a column's head, filtered by a kernel's name), the kernel groups of a
cell's diff, the missed fusions and XLA's scored decisions, and the graph around a kernel (an
SVG laid out in layers: each edge points down a layer where the links allow; the buffers
between kernels drawn from the producers of the cells' kernel tables). It formats
numbers only; every figure it shows is the data's. Each number cell carries its value in
`data-v`, so a test reads back what the page holds; once the tabs are drawn, `<body>` carries
`data-ready`: the milliseconds since the page was asked for.
"""

CSS = """
:root { --fg: #1d232a; --mute: #5b6670; --line: #d6dbe0; --head: #f3f5f7; --accent: #1f6feb;
  --loop: #cfe2f3; --input: #d9ead3; --output: #fff2cc; --custom: #f4cccc; --other: #ead1dc; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); }
header { position: sticky; top: 0; z-index: 3; background: #fff; border-bottom: 1px solid var(--line);
  padding: 8px 18px 0; }
header h1 { font-size: 18px; margin: 0 0 2px; }
header .source { color: var(--mute); margin: 0 0 6px; font-size: 12px; overflow-wrap: anywhere; }
nav button { font: inherit; border: 1px solid var(--line); border-bottom: none; background: var(--head);
  padding: 5px 12px; margin-right: 3px; border-radius: 6px 6px 0 0; cursor: pointer; }
nav button.on { background: #fff; color: var(--accent); font-weight: 600; }
main { padding: 10px 18px 40px; }
section[hidden] { display: none; }
.banner { background: #fff4e5; border: 1px solid #f0c36d; padding: 8px 12px; border-radius: 6px; }
.note { color: var(--mute); max-width: 110ch; }
.bar { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 6px 0; }
.bar select, .bar input { font: inherit; padding: 3px 6px; }
.bar input { min-width: 26ch; }
table { border-collapse: collapse; margin: 6px 0 14px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 3px 7px; text-align: left; vertical-align: top; }
thead th { background: var(--head); position: sticky; top: 0; }
table.live thead th { cursor: pointer; user-select: none; white-space: nowrap; }
table.live thead th.asc::after { content: " \\25B2"; }
table.live thead th.desc::after { content: " \\25BC"; }
td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.absent { color: #9aa3ab; }
.kernel-link { color: var(--accent); cursor: pointer; text-decoration: underline dotted; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
.scroll { max-height: 70vh; overflow: auto; border: 1px solid var(--line); }
.scroll table { margin: 0; }
/* the summary's blocks below the fold are laid out when scrolled to: the page is usable sooner */
#tab-summary > table, #tab-summary > details, #tab-summary > figure, #tab-summary > ul {
  content-visibility: auto; contain-intrinsic-size: auto 300px; }
img.plot { max-width: 100%; border: 1px solid var(--line); margin: 6px 0; }
figure { margin: 10px 0; }
figcaption { color: var(--mute); font-size: 12px; }
details { margin: 6px 0; }
#gview .graph { overflow: auto; max-height: 75vh; }
#gview svg { border: 1px solid var(--line); background: #fcfcfd; }
#gview .node rect { stroke: #59636e; stroke-width: 1; rx: 5; }
#gview .node.center rect { stroke: var(--accent); stroke-width: 3; }
#gview .node text { font: 11px ui-monospace, Menlo, monospace; fill: var(--fg); }
#gview .node text.sub { font-size: 9.5px; fill: var(--mute); }
#gview .node { cursor: pointer; }
#gview .edge { fill: none; stroke: #7d8590; stroke-width: 1.2; }
#gview .edge.data { stroke: #4f7fc0; }
#gview .edge.missed { stroke: #d1242f; stroke-dasharray: 5 3; }
#gview .edge.decision { stroke: #9a6700; stroke-dasharray: 2 2; }
#gview .elabel { font: 9.5px system-ui, sans-serif; fill: #57606a; }
.legend span { display: inline-block; margin-right: 14px; font-size: 12px; color: var(--mute); }
.swatch { display: inline-block; width: 12px; height: 12px; border: 1px solid #59636e;
  vertical-align: -2px; margin-right: 4px; border-radius: 3px; }
"""

JS = r"""
(function () {
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const $ = (id) => document.getElementById(id);
const COL = Object.fromEntries(D.kernel_columns.map((c, i) => [c, i]));
const ESC = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"};
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);
const md = (s) => esc(s).replace(/`([^`]+)`/g, "<code>$1</code>");  // a note's `code`
const F4 = new Intl.NumberFormat("en-US", {maximumSignificantDigits: 4});
const F3 = new Intl.NumberFormat("en-US", {maximumSignificantDigits: 3});
const absent = (v) => v === null || v === undefined;
const show = (v, scale, f) => absent(v) ? "-" : (f || F4).format(v * scale);
const numCell = (v, scale, f) => absent(v) ? '<td class="n absent" data-v="">-</td>'
  : `<td class="n" data-v="${esc(v)}">${show(v, scale, f)}</td>`;
const textCell = (t) => absent(t) || t === "" ? '<td class="absent">-</td>' : `<td>${esc(t)}</td>`;
const kernelCell = (variant, name, workload) =>
  `<td><span class="kernel-link mono" data-graph="${esc(variant + ":" + name)}" ` +
  `data-workload="${esc(workload)}">${esc(name)}</span></td>`;
const source = (lines) => !lines || !lines.length ? null
  : lines[0].split("/").slice(-2).join("/") + (lines.length > 1 ? ` +${lines.length - 1}` : "");
const PAIRING = {"same": "one to one", "changed": "one to one, bytes differ"};

// ---- tabs
function openTab(name) {
  for (const b of document.querySelectorAll("nav button")) b.classList.toggle("on", b.dataset.tab === name);
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== "tab-" + name;
}
for (const b of document.querySelectorAll("nav button")) b.addEventListener("click", () => openTab(b.dataset.tab));

function fillSelect(select, cells) {
  select.innerHTML = cells.map((i) => {
    const c = D.cells[i];
    return `<option value="${i}">${esc(c.label)} @ ${esc(c.variant)}</option>`;
  }).join("");
}

// ---- a table sorted by a click on a column's head
const SHOWN = 400;  // rows drawn at first: a table of thousands lays out slowly
function liveTable(table, columns, rows, render) {
  const state = {key: null, dir: 1, limit: SHOWN};
  table.classList.add("live");
  table.querySelector("thead").innerHTML = "<tr>" + columns.map((c, i) =>
    `<th data-i="${i}" title="${esc(c.title || "")}">${esc(c.name)}</th>`).join("") + "</tr>";
  function draw(shown) {
    let list = shown || state.rows;
    state.rows = list;
    if (state.key !== null) {
      const get = columns[state.key].sort;
      list = list.slice().sort((a, b) => {
        const x = get(a), y = get(b);
        if (absent(x) && absent(y)) return 0;
        if (absent(x)) return 1;
        if (absent(y)) return -1;
        return (x < y ? -1 : x > y ? 1 : 0) * state.dir;
      });
    }
    const more = list.length > state.limit ? `<tr class="more"><td colspan="${columns.length}">The first ` +
      `${state.limit} of ${list.length} rows. <button type="button">show all ${list.length}</button></td></tr>` : "";
    table.querySelector("tbody").innerHTML = list.slice(0, state.limit).map(render).join("") + more;
    for (const th of table.querySelectorAll("thead th")) {
      const on = Number(th.dataset.i) === state.key;
      th.classList.toggle("asc", on && state.dir === 1);
      th.classList.toggle("desc", on && state.dir === -1);
    }
  }
  table.querySelector("tbody").addEventListener("click", (e) => {
    if (e.target.closest("tr.more button")) { state.limit = Infinity; draw(); }
  });
  table.querySelector("thead").addEventListener("click", (e) => {
    const th = e.target.closest("th");
    if (!th) return;
    const i = Number(th.dataset.i);
    if (state.key === i) state.dir = -state.dir;
    else { state.key = i; state.dir = columns[i].text ? 1 : -1; }
    draw();
  });
  state.rows = rows;
  draw(rows);
  return draw;
}

// ---- kernels
const KCOLS = [
  {name: "kernel", text: true, sort: (r) => r[COL.name]},
  {name: "kind", text: true, sort: (r) => r[COL.kind]},
  {name: "launches/call", sort: (r) => r[COL.launches_per_call]},
  {name: "µs/call", title: "traced time per call", sort: (r) => r[COL.time_s]},
  {name: "share", title: "of the cell's traced kernel time", sort: (r) => r[COL.time_s]},
  {name: "modeled MB", sort: (r) => r[COL.modeled_bytes]},
  {name: "GFLOP", sort: (r) => r[COL.flops]},
  {name: "% of bound", sort: (r) => r[COL.pct_of_bound]},
  {name: "bound", text: true, sort: (r) => r[COL.bound]},
  {name: "headroom µs", sort: (r) => r[COL.headroom_s]},
  {name: "source", text: true, sort: (r) => source(r[COL.source_lines])},
  {name: "XLA predicted µs", sort: (r) => r[COL.predicted_s]},
];
function kernelRow(cell, total) {
  return (r) => "<tr>" + kernelCell(cell.variant, r[COL.name], cell.workload) + textCell(r[COL.kind]) +
    numCell(r[COL.launches_per_call], 1) + numCell(r[COL.time_s], 1e6) +
    (absent(r[COL.time_s]) || !total ? numCell(null) :
      `<td class="n" data-v="${r[COL.time_s] / total}">${F3.format(100 * r[COL.time_s] / total)}%</td>`) +
    numCell(r[COL.modeled_bytes], 1e-6) + numCell(r[COL.flops], 1e-9) + numCell(r[COL.pct_of_bound], 1) +
    textCell(r[COL.bound]) + numCell(r[COL.headroom_s], 1e6) + textCell(source(r[COL.source_lines])) +
    numCell(r[COL.predicted_s], 1e6) + "</tr>";
}
function untraced(c) {
  const kinds = Object.entries(c.kinds || {}).map(([k, n]) => `${k} ${n}`).join(", ");
  let text = `<p class="banner">${esc(c.label)} @ ${esc(c.variant)} was not traced: its record holds no ` +
    "kernel times (a run with <code>[measure] profile = true</code> on a GPU keeps them, as " +
    "<code>configs/kernels.toml</code> does).</p><p>What the record has: " +
    `${absent(c.kernels_in_program) ? "no kernel count" : c.kernels_in_program + (c.kernels_in_program === 1 ? " kernel" : " kernels") + " in the program"}` +
    `${kinds ? " (" + esc(kinds) + ")" : ""}.</p>`;
  if (c.device_top && c.device_top.length) {
    text += "<p>The device profile's longest kernels (names as the profiler gives them):</p><table>" +
      "<thead><tr><th>kernel</th><th>µs/call</th></tr></thead><tbody>" +
      c.device_top.map((k) => `<tr><td class="mono">${esc(k[0])}</td>${numCell(k[1], 1e6)}</tr>`).join("") +
      "</tbody></table>";
  }
  return text;
}
let drawKernels = null;
function showKernels() {
  const c = D.cells[Number($("kcell").value)];
  const table = $("ktable"), filter = $("kfilter");
  $("kinfo").innerHTML = "";
  table.hidden = true;
  drawKernels = null;
  if (!c) return;
  if (c.malformed) { $("kinfo").innerHTML = `<p class="banner">This cell's trace is malformed (${esc(c.malformed)}).</p>`; return; }
  if (!c.totals && !c.kernels.length) { $("kinfo").innerHTML = untraced(c); $("kcount").textContent = ""; return; }
  const t = c.totals;
  $("kinfo").innerHTML = (t ? `<p id="ktotals">${esc(t.basis)}: <span data-v="${esc(t.time_s)}" id="ktime">` +
    `${show(t.time_s, 1e6)}</span> µs per call over ${esc(t.calls)} traced calls; ` +
    `<span id="kran" data-v="${esc(t.kernels)}">${esc(t.kernels)}</span> kernels, ${show(t.launches_per_call, 1)} launches ` +
    `per call; unattributed ${show(t.unattributed_share, 100, F3)}%.</p>` :
    `<p class="banner" id="kuntraced">${esc(c.label)} @ ${esc(c.variant)} was not traced: the times, ` +
    "shares, bounds and headroom columns are empty.</p>") + `<p class="note" id="knote">${md(c.kernels_note)}</p>`;
  table.hidden = false;
  const draw = liveTable(table, KCOLS, c.kernels, kernelRow(c, t ? t.time_s : null));
  drawKernels = () => {
    const q = filter.value.trim().toLowerCase();
    const rows = q ? c.kernels.filter((r) => String(r[COL.name]).toLowerCase().includes(q)) : c.kernels;
    draw(rows);
    $("kcount").dataset.n = rows.length;
    $("kcount").textContent = `${rows.length} of ${c.kernels.length} kernels`;
  };
  drawKernels();
}

// ---- groups
function names(list, count, variant, workload) {
  if (!count) return "<td>(none)</td>";
  const shown = list.map((n) => `<span class="kernel-link mono" data-graph="${esc(variant + ":" + n)}" ` +
    `data-workload="${esc(workload)}">${esc(n)}</span>`).join(", ");
  return `<td>${count > list.length ? count + ": " : ""}${shown}${count > list.length ? " +" + (count - list.length) : ""}</td>`;
}
function groupTable(title, rows, d, c, interval) {
  const cols = [
    {name: "pairing", text: true, sort: (g) => PAIRING[g.kind] || g.kind},
    {name: d.a + " kernels", text: true, sort: (g) => g.kernels_a[0]},
    {name: d.b + " kernels", text: true, sort: (g) => g.kernels_b[0]},
    {name: d.a + " µs", sort: (g) => g.time_a_s},
    {name: d.b + " µs", sort: (g) => g.time_b_s},
    {name: `${esc(d.b)} - ${esc(d.a)} µs`, sort: (g) => g.saved_s},
  ];
  if (interval) cols.push({name: "95% CI µs", sort: (g) => g.ci_s && g.ci_s[0]}, {name: "verdict", text: true, sort: (g) => g.verdict});
  cols.push({name: d.a + " MB", sort: (g) => g.bytes_a}, {name: d.b + " MB", sort: (g) => g.bytes_b});
  const wrap = document.createElement("div");
  wrap.innerHTML = `<h3>${esc(title)}: ${rows.length || "no"} group${rows.length === 1 ? "" : "s"}</h3>` +
    '<table><thead></thead><tbody></tbody></table>';
  liveTable(wrap.querySelector("table"), cols, rows, (g) => "<tr>" + textCell(PAIRING[g.kind] || g.kind) +
    names(g.kernels_a, g.n_a, d.a, c.workload) + names(g.kernels_b, g.n_b, d.b, c.workload) +
    numCell(g.time_a_s, 1e6) + numCell(g.time_b_s, 1e6) + numCell(g.saved_s, 1e6) +
    (interval ? (g.ci_s ? `<td class="n" data-v="${esc(g.ci_s[0])},${esc(g.ci_s[1])}">${show(g.ci_s[0], 1e6)} to ${show(g.ci_s[1], 1e6)}</td>`
      : numCell(null)) + textCell(g.verdict) : "") +
    numCell(g.bytes_a, 1e-6) + numCell(g.bytes_b, 1e-6) + "</tr>");
  return wrap;
}
function showGroups() {
  const c = D.cells[Number($("gcell").value)];
  const out = $("ginfo");
  out.innerHTML = "";
  if (!c) return;
  const d = c.diff;
  if (d.error) { out.innerHTML = `<p class="banner">Kernel diff not available: ${esc(d.error)}</p>`; return; }
  let head = `<p id="gtotals">Each row is a group of <code>xlafuse diff</code>: the kernels of ${esc(d.a)} and of ` +
    `${esc(d.b)} that hold the same instructions, with their traced time per call. All ` +
    `<span id="gcount" data-v="${esc(d.groups)}">${esc(d.groups)}</span> groups plus the unattributed time add up to ` +
    `<span id="gtime-a" data-v="${esc(d.time_a_s)}">${show(d.time_a_s, 1e6)}</span> µs (${esc(d.a)}) and ` +
    `<span id="gtime-b" data-v="${esc(d.time_b_s)}">${show(d.time_b_s, 1e6)}</span> µs (${esc(d.b)}).`;
  if (d.changed_s) {
    const s = d.changed_s, n = d.changed_groups;
    head += ` ${esc(d.b)} gains <span id="gfaster" data-v="${esc(s.faster)}">${show(-s.faster, 1e6)}</span> µs in ` +
      `<span id="gfaster-n" data-v="${esc(n.faster)}">${esc(n.faster)}</span> groups, loses ` +
      `<span id="gslower" data-v="${esc(s.slower)}">${show(s.slower, 1e6)}</span> µs in ` +
      `<span id="gslower-n" data-v="${esc(n.slower)}">${esc(n.slower)}</span>, and ` +
      `<span id="gsame" data-v="${esc(s.same)}">${show(s.same, 1e6)}</span> µs is in ` +
      `<span id="gsame-n" data-v="${esc(n.same)}">${esc(n.same)}</span> groups judged the same. The record keeps the ` +
      "largest groups each way; all groups are in the kept traces (<code>xlafuse diff --measure</code>).";
  }
  out.innerHTML = head + "</p>";
  if (d.gains) {
    out.append(groupTable(`Where ${esc(d.b)} gains (faster)`, d.gains, d, c, true));
    out.append(groupTable(`Where ${esc(d.b)} loses (slower)`, d.losses, d, c, true));
  } else {
    out.append(groupTable(`Top groups by time saved (${esc(d.b)} - ${esc(d.a)})`, d.top, d, c, false));
  }
}

// ---- missed fusions and XLA's decisions
const REASONS = (r) => r.reasons ? [].concat(r.reasons).join("; ") : (r.reason || null);
function showMissed() {
  const out = $("minfo");
  const parts = [];
  for (const c of D.cells) {
    if (c.missed) parts.push(missedHtml(c));
    if (c.decisions) parts.push(decisionsHtml(c));
  }
  out.innerHTML = parts.join("") || '<p class="banner">No record of this file holds missed fusions or scored ' +
    "fusion decisions (the default variant's cells record their missed fusions).</p>";
}
function missedHtml(c) {
  const m = c.missed;
  const title = `<h3>${esc(c.label)} @ ${esc(c.variant)}</h3>`;
  if (m.error) return title + `<p>Missed fusions could not be traced: ${esc(m.error)}</p>`;
  const reasons = m.top.some((r) => REASONS(r));
  let text = title + `<p>${esc(m.boundaries)} kernel boundaries (missed fusions) in all, ` +
    `<span data-v="${esc(m.boundary_bytes)}">${show(m.boundary_bytes, 1e-6)}</span> MB written and read back; ` +
    `${esc(m.lost)} of ${esc(m.instructions)} instructions not traced. The record keeps the largest ${esc(m.top.length)}.</p>`;
  if (!m.top.length) return text;
  text += "<table><thead><tr><th>MB</th><th>producer</th><th>its kernel</th><th>source</th><th>consumer</th>" +
    "<th>its kernel</th><th>source</th><th>readers</th>" + (reasons ? "<th>XLA's reasons</th>" : "") +
    "</tr></thead><tbody>" + m.top.map((r) => "<tr>" + numCell(r.boundary_bytes, 1e-6) +
      `<td class="mono">${esc(r.producer)}</td>` + kernelCell(c.variant, r.producer_kernel, c.workload) +
      textCell(r.producer_source) + `<td class="mono">${esc(r.consumer)}</td>` +
      kernelCell(c.variant, r.consumer_kernel, c.workload) + textCell(r.consumer_source) + numCell(r.readers, 1) +
      (reasons ? textCell(REASONS(r)) : "") + "</tr>").join("") + "</tbody></table>";
  if (!reasons) text += '<p class="note">The record holds no reasons of XLA\'s for these boundaries: ' +
    "<code>xlafuse explain --workload ...</code> on a GPU prints them (XLA's priority-fusion dump).</p>";
  return text;
}
function decisionsHtml(c) {
  const d = c.decisions;
  const title = `<h3>${esc(c.label)} @ ${esc(c.variant)}: XLA's fusion decisions against the measured groups</h3>`;
  if (d.error) return title + `<p>Fusion decisions not scored: ${esc(d.error)}</p>`;
  let text = title + `<p>${esc(d.decisions)} fusion steps in XLA's priority-fusion dump (${esc(d.a)}), ` +
    `${esc(d.with_estimate)} with a predicted gain, ${esc(d.measured)} in a timed group; the sign of the predicted gain ` +
    `agrees with the measured one in ${esc(d.agree)} of ${esc(d.decided)} decisions judged.</p>`;
  for (const [key, head] of [["predicted_gain_measured_loss", "Predicted a gain, measured a loss"],
                             ["predicted_loss_measured_gain", "Predicted a loss, measured a gain"]]) {
    const rows = d[key];
    text += `<p><b>${head}</b>: ${rows.length || "none"}</p>`;
    if (!rows.length) continue;
    text += "<table><thead><tr><th>step</th><th>producer</th><th>consumer</th><th>kernel</th>" +
      "<th>predicted gain µs</th><th>measured gain µs</th><th>source</th></tr></thead><tbody>" +
      rows.map((r) => `<tr>${textCell(r.step)}<td class="mono">${esc(r.producer)}</td>` +
        `<td class="mono">${esc(r.consumer)}</td>` + kernelCell(d.a, r.kernel, c.workload) +
        numCell(r.predicted_gain_s, 1e6) + numCell(r.measured_gain_s, 1e6) +
        textCell((r.sources || []).join(", ")) + "</tr>").join("") + "</tbody></table>";
  }
  return text;
}

// ---- the graph around a kernel
const MAX_NODES = 80;
function neighbourhood(g, center, hops) {
  const adj = {};
  for (const [s, t] of g.edges) { (adj[s] = adj[s] || []).push(t); (adj[t] = adj[t] || []).push(s); }
  const depth = {[center]: 0};
  let frontier = [center], total = 1;
  for (let h = 1; h <= hops && frontier.length; h++) {
    const next = [];
    for (const n of frontier) for (const m of adj[n] || []) if (!(m in depth)) { depth[m] = h; next.push(m); total++; }
    frontier = next;
  }
  const ids = Object.keys(depth).sort((a, b) => depth[a] - depth[b]).slice(0, MAX_NODES);
  const keep = new Set(ids);
  return {ids, total, edges: g.edges.filter(([s, t]) => keep.has(s) && keep.has(t))};
}
function layers(ids, edges) {
  const layer = Object.fromEntries(ids.map((i) => [i, 0]));
  for (let round = 0; round < ids.length; round++) {
    let moved = false;
    for (const [s, t] of edges) if (layer[t] < layer[s] + 1 && layer[s] + 1 < ids.length) { layer[t] = layer[s] + 1; moved = true; }
    if (!moved) break;
  }
  return layer;
}
const FILL = {kLoop: "var(--loop)", kInput: "var(--input)", kOutput: "var(--output)", kCustom: "var(--custom)"};
function nodeFill(node, kinds) {
  if (node.type === "group") return "#ffffff";
  if (node.type === "more") return "#eef1f4";
  if (node.type === "decision") return "#fdf6e3";
  return FILL[kinds[node.variant + ":" + node.label]] || "var(--other)";
}
function kindsOf(workload) {  // "variant:kernel" -> its kind, from the workload's kernel tables
  const kinds = {};
  for (const i of (D.workloads.find((w) => w.key === workload) || {cells: []}).cells) {
    const c = D.cells[i];
    for (const r of c.kernels || []) kinds[c.variant + ":" + r[COL.name]] = r[COL.kind];
  }
  return kinds;
}
function place(nb, nodes) {  // each node's centre and width: a row per layer, rows centred
  const layer = layers(nb.ids, nb.edges), rows = [], pos = {};
  for (const id of nb.ids) (rows[layer[id]] = rows[layer[id]] || []).push(id);
  const W = (id) => Math.max(90, 7 * Math.max(nodes[id].label.length, nodes[id].variant.length + 2) + 18);
  const above = (id) => {  // the mean x of the nodes above that link to it
    const xs = nb.edges.filter((e) => e[1] === id && pos[e[0]]).map((e) => pos[e[0]].x);
    return xs.length ? xs.reduce((a, b) => a + b) / xs.length : 1e9;
  };
  let width = 0;
  rows.forEach((row, y) => {
    if (y > 0) row.sort((a, b) => above(a) - above(b));
    let x = 20;
    for (const id of row) { pos[id] = {x: x + W(id) / 2, y: 30 + 95 * y, w: W(id)}; x += W(id) + 26; }
    width = Math.max(width, x);
  });
  rows.forEach((row) => {
    const right = Math.max(...row.map((id) => pos[id].x + pos[id].w / 2)) + 20;
    for (const id of row) pos[id].x += (width - right) / 2;
  });
  return {pos, width, height: 95 * rows.length - 20};
}
function edgeSvg([s, t, kind, label, detail], pos) {
  const a = pos[s], b = pos[t];
  const y1 = a.y + 17, y2 = b.y - 17, mid = (y1 + y2) / 2;
  const d = b.y > a.y ? `M${a.x},${y1} C${a.x},${mid} ${b.x},${mid} ${b.x},${y2}`
    : `M${a.x},${y1} C${a.x},${a.y + 70} ${b.x},${b.y - 70} ${b.x},${y2}`;
  return `<path class="edge ${esc(kind)}" d="${d}" marker-end="url(#arrow)"><title>${esc(detail || kind)}</title></path>` +
    (label ? `<text class="elabel" x="${(a.x + b.x) / 2 + 4}" y="${mid - 3}">${esc(label)}<title>${esc(detail)}</title></text>` : "");
}
function nodeSvg(id, n, p, center, kinds) {
  const sub = n.type === "group" ? "kernel group" : n.type === "decision" ? "fusion steps of " + n.variant : n.variant;
  return `<g class="node ${n.type}${id === center ? " center" : ""}" data-id="${esc(id)}">` +
    `<rect x="${p.x - p.w / 2}" y="${p.y - 17}" width="${p.w}" height="34" fill="${nodeFill(n, kinds)}"/>` +
    `<text x="${p.x}" y="${p.y - 2}" text-anchor="middle">${esc(n.label)}</text>` +
    `<text class="sub" x="${p.x}" y="${p.y + 11}" text-anchor="middle">${esc(sub)}</text>` +
    `<title>${esc(id)}</title></g>`;
}
const FLOWS = {};
function withFlow(workload) {  // the workload's graph, with the buffers its kernel tables name
  if (FLOWS[workload]) return FLOWS[workload];
  const g = D.graphs[workload], nodes = Object.assign({}, g.nodes), edges = g.edges.slice();
  let tables = 0;
  for (const i of (D.workloads.find((w) => w.key === workload) || {cells: []}).cells) {
    const c = D.cells[i], rows = c.kernels || [];
    if (!rows.some((r) => r[COL.producers])) continue;
    tables++;
    const id = (r) => c.variant + ":" + r[COL.name];
    for (const r of rows) {
      if (!nodes[id(r)]) nodes[id(r)] = {label: r[COL.name], type: "kernel", variant: c.variant};
      for (const p of r[COL.producers] || []) {
        edges.push([id(rows[p]), id(r), "data", "", `${rows[p][COL.name]} -> ${r[COL.name]}: reads the buffer it writes`]);
      }
    }
  }
  return (FLOWS[workload] = {nodes, edges, tables});
}
function drawGraph(workload, center, hops) {
  const view = $("gview");
  if (!D.graphs[workload]) { view.innerHTML = ""; return; }
  const g = withFlow(workload);
  const nodes = Object.assign({}, g.nodes);
  if (!nodes[center]) nodes[center] = {label: center.slice(center.indexOf(":") + 1), type: "kernel", variant: center.split(":")[0]};
  const nb = neighbourhood(g, center, hops), kinds = kindsOf(workload);
  const {pos, width, height} = place(nb, nodes);
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" data-center="${esc(center)}">` +
    '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto">' +
    '<path d="M0,0 L10,5 L0,10 z" fill="#7d8590"/></marker></defs>' +
    nb.edges.map((e) => edgeSvg(e, pos)).join("") +
    nb.ids.map((id) => nodeSvg(id, nodes[id], pos[id], center, kinds)).join("") + "</svg>";
  let note = nb.total > nb.ids.length ? `<p class="note">Showing the ${nb.ids.length} nearest of ${nb.total} nodes within ${hops} hops.</p>` : "";
  if (nb.edges.length === 0) note += `<p class="banner">No record of this workload links <code>${esc(nodes[center].label)}</code> ` +
    "to another kernel: the records keep the largest groups of each diff, the largest missed fusions and the " +
    "fusion decisions that the measurement contradicts" + (g.tables ? ", and each kernel's producers (none read or " +
    "written by this one)." : ". They keep no kernel table (records from before <code>xlafuse.kernel_times/2</code>), " +
    "so no buffer between kernels.") + " The program's whole buffer graph is " +
    "<code>xlafuse inspect --workload ... --svg</code>, drawn from its HLO.</p>";
  view.innerHTML = note + '<div class="graph">' + svg + "</div>";
  const box = view.querySelector(".graph");  // the chosen kernel in sight
  box.scrollLeft = Math.max(0, pos[center].x - box.clientWidth / 2);
}
function graphFromInputs() {
  const w = $("gworkload").value, k = $("gkernel").value.trim();
  if (w && k) drawGraph(w, k.includes(":") ? k : firstVariant(w) + ":" + k, Number($("ghops").value));
}
function firstVariant(w) {
  const ws = D.workloads.find((x) => x.key === w);
  return ws && ws.cells.length ? D.cells[ws.cells[0]].variant : "";
}
function fillGraphNodes() {
  const w = $("gworkload").value, g = D.graphs[w] ? withFlow(w) : {nodes: {}};
  $("gnodes").innerHTML = Object.entries(g.nodes).filter(([, n]) => n.type === "kernel")
    .map(([id]) => `<option value="${esc(id)}"></option>`).join("");
}
function openGraph(workload, id) {
  $("gworkload").value = workload;
  fillGraphNodes();
  $("gkernel").value = id;
  openTab("graph");
  drawGraph(workload, id, Number($("ghops").value));
}
document.addEventListener("click", (e) => {
  const link = e.target.closest("[data-graph]");
  if (link) { openGraph(link.dataset.workload, link.dataset.graph); return; }
  const node = e.target.closest("#gview .node");
  if (node && node.dataset.id !== $("gview").querySelector("svg").dataset.center && !node.classList.contains("more")) {
    $("gkernel").value = node.dataset.id;
    graphFromInputs();
  }
});

// ---- start
const traced = D.cells.map((c, i) => i).filter((i) => D.cells[i].status === "ok");
const diffs = D.cells.map((c, i) => i).filter((i) => D.cells[i].diff);
fillSelect($("kcell"), traced.filter((i) => D.cells[i].totals).concat(traced.filter((i) => !D.cells[i].totals)));
fillSelect($("gcell"), diffs);
$("kcell").addEventListener("change", showKernels);
$("kfilter").addEventListener("input", () => drawKernels && drawKernels());
$("gcell").addEventListener("change", showGroups);
$("gworkload").innerHTML = D.workloads.map((w) => `<option>${esc(w.key)}</option>`).join("");
$("gworkload").addEventListener("change", () => { fillGraphNodes(); $("gkernel").value = ""; $("gview").innerHTML = ""; });
$("gkernel").addEventListener("change", graphFromInputs);
$("ghops").addEventListener("change", graphFromInputs);
fillGraphNodes();
if (!traced.length) $("kinfo").innerHTML = '<p class="banner">No cell of this file measured anything: no kernels to show.</p>';
else showKernels();
if (!diffs.length) $("ginfo").innerHTML = '<p class="banner">No record of this file holds a kernel diff: the groups ' +
  "come from traced cells of a variant beside a traced reference (<code>configs/kernels.toml</code>).</p>";
else showGroups();
showMissed();
document.body.dataset.ready = String(Math.round(performance.now()));  // ms since the page was asked for
})();
"""
