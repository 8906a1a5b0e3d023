// The live page: the harness's server-sent events drawn as figures, tables and canvas
// charts. Every event carries the whole state, so a lost event or a reconnection loses
// nothing. Text goes in with textContent only: nothing from the run is parsed as HTML.
"use strict";

const PALETTE = ["#2463eb", "#e0662b", "#1f9d55", "#c23a8f", "#7a5cd6", "#b38600",
  "#0f8a94", "#d43c3c", "#5b6b82", "#8f5a2e", "#3f7f2a", "#a1458c", "#4a6fb5"];
const $ = (id) => document.getElementById(id);

function number(value, digits = 0) {
  if (value === null || value === undefined) return "–";
  return Number(value).toLocaleString("en", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  return m < 60 ? `${m} min ${s % 60} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

function colourOf(state, framework) {
  const index = (state.frameworks || []).indexOf(framework);
  return PALETTE[(index < 0 ? 0 : index) % PALETTE.length];
}

// a bench's case: "aiohttp ours round 3 of at most 60" (harness.bench_live)
const BENCH_CASE = / (ours|minimal) round (\d+)/;

// what a line stands for: its framework; in a bench, the framework and the app, so that
// ours and the minimal app differ in colour
function keyOf(state, series) {
  const found = state.kind === "bench" && series.case.match(BENCH_CASE);
  return found ? `${series.framework} ${found[1]}` : series.framework;
}

function colourOfKey(state, key) {
  if (state.kind !== "bench") return colourOf(state, key);
  const [framework, app] = key.split(" ");
  const index = Math.max(0, (state.frameworks || []).indexOf(framework)) * 2 + (app === "minimal" ? 1 : 0);
  return PALETTE[index % PALETTE.length];
}

function set(id, text) {
  const element = $(id);
  if (element.textContent !== text) element.textContent = text;
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
}

function errorsText(errors) {
  const kinds = Object.entries(errors || {}).filter(([k, v]) => k !== "total" && v > 0);
  if (!kinds.length) return "0";
  return kinds.map(([k, v]) => `${k} ${number(v)}`).join(", ");
}

function interval(pair, digits) {
  return pair ? ` [${number(pair[0], digits)}, ${number(pair[1], digits)}]` : "";
}

// -- charts -------------------------------------------------------------------------
function niceStep(span, ticks) {
  const raw = span / ticks;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const fraction = raw / power;
  return (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * power;
}

function drawChart(canvas, lines) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  if (!width || !height) return;
  if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
  if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, width, height);
  const points = lines.flatMap((line) => line.points);
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#5c6475";
  if (!points.length) {
    g.fillText("no figures yet", 12, height / 2);
    return;
  }
  let xMax = Math.max(...points.map((p) => p[0]));
  let xMin = Math.min(0, ...points.map((p) => p[0]));
  let yMax = Math.max(...points.map((p) => p[1]));
  if (xMax <= xMin) xMax = xMin + 1;
  if (yMax <= 0) yMax = 1;
  // counts (errors, connections) get whole-number ticks
  const integers = points.every((p) => Number.isInteger(p[1]));
  const yStep = integers ? Math.max(1, niceStep(yMax, 4)) : niceStep(yMax, 4);
  yMax = Math.ceil(yMax / yStep) * yStep;
  const yDigits = yStep < 1 ? 2 : 0;
  const left = 8 + g.measureText(number(yMax, yDigits)).width, right = width - 10;
  const top = 8, bottom = height - 22;
  const x = (v) => left + ((v - xMin) / (xMax - xMin)) * (right - left);
  const y = (v) => bottom - (v / yMax) * (bottom - top);
  g.strokeStyle = "#e3e6ec";
  g.lineWidth = 1;
  g.textAlign = "right";
  g.textBaseline = "middle";
  for (let v = 0; v <= yMax + yStep / 2; v += yStep) {
    g.beginPath(); g.moveTo(left, y(v)); g.lineTo(right, y(v)); g.stroke();
    g.fillText(number(v, yDigits), left - 4, y(v));
  }
  const xStep = niceStep(xMax - xMin, Math.max(2, Math.floor((right - left) / 70)));
  g.textAlign = "center";
  g.textBaseline = "top";
  for (let v = Math.ceil(xMin / xStep) * xStep; v <= xMax; v += xStep) {
    g.fillText(number(v, xStep < 1 ? 1 : 0), x(v), bottom + 4);
  }
  for (const line of lines) {
    if (!line.points.length) continue;
    g.strokeStyle = line.colour;
    g.fillStyle = line.colour;
    g.lineWidth = line.current ? 2.2 : 1.4;
    g.globalAlpha = line.current || !line.fade ? 1 : 0.75;
    g.beginPath();
    line.points.forEach((p, i) => (i ? g.lineTo(x(p[0]), y(p[1])) : g.moveTo(x(p[0]), y(p[1]))));
    g.stroke();
    if (line.dots) for (const p of line.points) { g.beginPath(); g.arc(x(p[0]), y(p[1]), 2.5, 0, 7); g.fill(); }
    g.globalAlpha = 1;
  }
}

function seriesLines(state, column, scale) {
  return state.series.map((s, i) => ({
    colour: colourOfKey(state, keyOf(state, s)),
    current: i === state.series.length - 1 && s.status === "running",
    fade: true,
    points: s.points.filter((p) => p[column] !== null).map((p) => [p[0], p[column] * scale]),
  }));
}

function stepLines(state, pick) {
  if (state.kind === "bench") return roundLines(state, pick);
  return state.series.map((s, i) => ({
    colour: colourOf(state, s.framework),
    current: i === state.series.length - 1 && s.status === "running",
    dots: true,
    points: s.steps.map((step) => [step.offered, pick(step)]).filter((p) => p[1] !== null && p[1] !== undefined),
  }));
}

// a bench's finished runs, one line per framework and app, x: the round (an HTTP bench's
// run has one step; a WebSocket bench's top step is its figure)
function roundLines(state, pick) {
  const lines = new Map();
  for (const s of state.series) {
    const found = s.case.match(BENCH_CASE);
    const last = s.steps[s.steps.length - 1];
    if (!found || !last) continue;
    const key = keyOf(state, s);
    if (!lines.has(key)) lines.set(key, { colour: colourOfKey(state, key), dots: true, points: [] });
    const value = pick(last);
    if (value !== null && value !== undefined) lines.get(key).points.push([Number(found[2]), value]);
  }
  return [...lines.values()];
}

function drawCharts(state) {
  const connections = state.series.some((s) => s.steps.some((st) => st.unit === "conns")) ||
    (state.current && state.current.step && state.current.step.unit === "conns");
  set("rate-title", connections ? "open connections over each case (the server's count; x: s into the case)"
                                : "req/s over each case (the server's count; x: s into the case)");
  drawChart($("chart-rate"), seriesLines(state, connections ? 2 : 1, 1));
  drawChart($("chart-cpu"), seriesLines(state, 3, 1));
  drawChart($("chart-rss"), seriesLines(state, 4, 1e-6));
  drawChart($("chart-tick"), seriesLines(state, 5, 1));
  const by = state.kind === "bench" ? "by round (the driver's, each app's run; x: round)" : "by step (the driver's; x: offered)";
  set("steps-chart-title", `achieved ${by}`);
  set("p99-chart-title", `p99 latency ms ${by}`);
  set("errors-chart-title", `errors ${by}, every kind`);
  drawChart($("chart-steps"), stepLines(state, (st) => st.achieved));
  drawChart($("chart-p99"), stepLines(state, (st) => st.p99_ms));
  drawChart($("chart-errors"), stepLines(state, (st) => (st.errors || {}).total));
  const legend = $("legend");
  const shown = [...new Set(state.series.map((s) => keyOf(state, s)))];
  if (legend.dataset.shown !== shown.join(",")) {
    legend.dataset.shown = shown.join(",");
    legend.replaceChildren(...shown.map((key) => {
      const item = document.createElement("li");
      const swatch = document.createElement("i");
      swatch.style.background = colourOfKey(state, key);
      item.append(swatch, key);
      return item;
    }));
  }
}

// -- figures and tables ----------------------------------------------------------------
function drawNow(state) {
  const current = state.current;
  set("status", state.status === "preparing" ? `preparing ${state.preparing}` : state.status);
  $("status").className = `badge ${state.status}`;
  set("profile", state.profile ? `profile ${state.profile}` : "");
  if (state.run_id) {  // a page opened before the plan was made learns the run here
    set("title", `serverbench live: ${state.run_id}`);
    if (document.title !== $("title").textContent) document.title = $("title").textContent;
  }
  set("elapsed", duration(state.elapsed_s));
  set("cases", state.cases_total ? `${state.cases_done} of ${state.cases_total}` : "–");
  set("run-left", duration(state.time_left ? state.time_left.run_s : null));
  if (state.report_url) {
    $("report").hidden = false;
    $("report-link").href = state.report_url;
  }
  if (!current) {
    set("case", state.status === "running" ? "between cases" : "–");
    for (const id of ["round", "step", "offered", "step-left", "rate", "cpu", "rss", "tick", "last-step"]) set(id, id === "round" ? "" : "–");
    $("step-bar").style.width = "0";
    return;
  }
  set("case", current.case);
  // a bench's label names its round already; a run's rounds are confirmation rounds
  set("round", current.round && state.kind !== "bench" ? `(confirmation round ${current.round})` : "");
  const step = current.step;
  set("step", step ? `${step.index + 1} of ${current.steps}` : `${current.steps_done} of ${current.steps} done`);
  $("step-detail").hidden = !step;  // between steps: only how many are done
  set("offered", step ? `${number(step.offered)} ${step.unit}` : "–");
  const left = state.time_left ? state.time_left.step_s : null;
  set("step-left", duration(left));
  $("step-bar").style.width = `${Math.round(100 * (current.steps_done + (step ? 0.5 : 0)) / Math.max(1, current.steps))}%`;
  const row = current.row || {};
  const conns = step && step.unit === "conns";
  set("rate-label", conns ? "open connections" : "req/s (server)");
  set("rate", number(conns ? row.open : row.requests_per_s));
  set("cpu", number(row.server_cpu_pct));
  set("rss", row.server_rss_bytes === undefined ? "–" : number(row.server_rss_bytes / 1e6, 1));
  set("tick", number(row.tick_max_ms, 1));
  const last = current.last_step;
  set("last-step", last
    ? `${number(last.achieved)} ${last.unit === "conns" ? "held" : "req/s"} at ${number(last.offered)} ${last.unit}, ` +
      `p50 ${number(last.p50_ms, 2)} ms, p99 ${number(last.p99_ms, 2)} ms, errors ${errorsText(last.errors)}`
    : "–");
}

function drawSettled(state) {
  const body = $("settled").tBodies[0];
  const rows = (state.settled || []).map((c) => {
    const row = document.createElement("tr");
    cell(row, c.framework);
    cell(row, c.protocol);
    cell(row, c.status);
    cell(row, c.status === "ok" ? `${number(c.peak)} ${c.peak_unit}${interval(c.peak_ci, 0)}` : "–");
    cell(row, c.status === "ok" ? `${number(c.p99_ms, 2)}${interval(c.p99_ci_ms, 2)}` : "–");
    cell(row, String(c.rounds || 0));
    cell(row, number(c.errors));
    cell(row, c.status === "ok" ? c.flags.join(" ") : (c.error || ""), "wrap");
    return row;
  });
  if (!rows.length) {
    const row = document.createElement("tr");
    cell(row, "none finished yet", "text");
    row.firstChild.colSpan = 8;
    rows.push(row);
  }
  body.replaceChildren(...rows);
}

// a bench: each framework's figures round by round, and ours / minimal so far
function drawBench(state) {
  const rows = state.bench || [];
  $("bench-section").hidden = state.kind !== "bench";
  $("cases-section").hidden = state.kind === "bench";  // a bench settles no run's cases
  if (state.kind !== "bench") return;
  const digits = (unit) => (unit === "KB/conn" ? 2 : 0);
  const body = $("bench").tBodies[0];
  const lines = rows.map((b) => {
    const row = document.createElement("tr");
    const n = b.ours.length;
    cell(row, b.framework);
    cell(row, b.protocol);
    cell(row, b.unit);
    cell(row, `${b.rounds_done} of ${b.rounds_max}`);
    cell(row, `${number(b.ours[n - 1], digits(b.unit))} · ${number(b.minimal[n - 1], digits(b.unit))}`);
    cell(row, b.ratio === null ? "–" : `${number(b.ratio, 3)}×${interval(b.ci, 3)}`);
    const each = b.ours.map((v, i) => (v && b.minimal[i] ? number(v / b.minimal[i], 2) : "–"));
    cell(row, each.join(" "), "wrap");
    return row;
  });
  if (!lines.length) {
    const row = document.createElement("tr");
    cell(row, "no round finished yet", "text");
    row.firstChild.colSpan = 7;
    lines.push(row);
  }
  body.replaceChildren(...lines);
}

function drawSteps(state) {
  const series = state.series[state.series.length - 1];
  const body = $("steps").tBodies[0];
  const rows = (series ? series.steps : []).map((st) => {
    const row = document.createElement("tr");
    cell(row, String(st.index + 1));
    cell(row, `${number(st.offered)} ${st.unit}`);
    cell(row, number(st.achieved));
    cell(row, number(st.p50_ms, 2));
    cell(row, number(st.p99_ms, 2));
    cell(row, errorsText(st.errors));
    cell(row, st.flags.join(" "), "text");
    return row;
  });
  if (series) set("steps-title", `Steps of ${series.case}`);
  // an HTTP bench's run is one step, its figures in the bench's table and charts already
  $("steps-section").hidden = state.kind === "bench" && !!series && series.steps_planned === 1;
  body.replaceChildren(...rows);
}

function drawFlags(state) {
  const flags = state.flags || [];
  if (!flags.length) return;
  // each flag's meaning once, then every raising of it, newest first
  const meanings = new Map();
  for (const f of flags) if (f.meaning && !meanings.has(f.flag)) meanings.set(f.flag, f.meaning);
  const counts = state.flag_counts || {};
  $("flag-meanings").replaceChildren(...[...meanings].map(([flag, meaning]) => {
    const item = document.createElement("li");
    const name = document.createElement("b");
    name.textContent = flag;
    const times = counts[flag] ? ` (${counts[flag]}×)` : "";
    item.append(name, `${times}: ${meaning}`);
    return item;
  }));
  $("flags").replaceChildren(...flags.slice().reverse().map((f) => {
    const item = document.createElement("li");
    const name = document.createElement("b");
    name.textContent = f.flag;
    const where = f.step === null ? "" : ` step ${f.step + 1}`;
    item.append(name, ` ${f.case}${where} at ${duration(f.t)}`);
    return item;
  }));
}

let latest = null;
let receivedAt = 0;
function draw(state) {
  latest = state;
  receivedAt = Date.now();
  drawNow(state);
  drawCharts(state);
  drawSettled(state);
  drawBench(state);
  drawSteps(state);
  drawFlags(state);
}

function connect() {
  const events = new EventSource("/events");
  events.addEventListener("state", (event) => {
    set("stream", "live");
    $("link").className = "";
    draw(JSON.parse(event.data));
  });
  events.onerror = () => {  // EventSource reconnects by itself (the server's retry: hint)
    set("stream", "reconnecting");
    $("link").className = "offline";
  };
}

// between events (nothing changed in the run), the clocks still move
function tick() {
  if (!latest || latest.status !== "running") return;
  const since = (Date.now() - receivedAt) / 1000;
  set("elapsed", duration(latest.elapsed_s + since));
  const left = latest.time_left || {};
  if (left.step_s !== null && left.step_s !== undefined) set("step-left", duration(Math.max(0, left.step_s - since)));
  if (left.run_s !== null && left.run_s !== undefined) set("run-left", duration(Math.max(0, left.run_s - since)));
}

window.addEventListener("resize", () => { if (latest) drawCharts(latest); });
setInterval(tick, 1000);
connect();
