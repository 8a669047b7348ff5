/* lbweb dashboard: live charts over /api/v1/metrics/ (Chart.js, served locally).
 *
 * Every interval the page asks only for points newer than the last one it has
 * (?since=), appends them and drops what left the window. A gap point from the
 * server (the collector did not sample) becomes null: the line breaks, it never
 * drops to zero. When the newest sample gets old, the page says so.
 */
(function () {
  "use strict";

  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
  const WINDOW_SECONDS = { "5m": 300, "15m": 900, "1h": 3600, "24h": 86400 };

  function bits(bytesPerSecond) {
    if (bytesPerSecond === null || bytesPerSecond === undefined) return "–";
    let v = bytesPerSecond * 8;
    const units = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"];
    let i = 0;
    while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
    return v.toFixed(v < 10 && i > 0 ? 2 : 1) + " " + units[i];
  }
  function number(v, digits) {
    if (v === null || v === undefined) return "–";
    return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits });
  }
  function clock(ms) {
    return new Date(ms).toLocaleTimeString("en-GB", { hour12: false });
  }
  function text(id, value) {
    const el = document.getElementById(id);
    if (el) el.textContent = value;
  }
  function ago(seconds) {
    if (seconds < 90) return Math.round(seconds) + " s";
    if (seconds < 5400) return Math.round(seconds / 60) + " min";
    return (seconds / 3600).toFixed(1) + " h";
  }

  /* One series kept in the browser, refreshed with ?since=. */
  class LiveSeries {
    constructor(url, windowName) {
      this.url = url;
      this.setWindow(windowName);
    }
    setWindow(windowName) {
      this.window = windowName;
      this.points = [];
      this.meta = null;
    }
    async poll() {
      const params = new URLSearchParams({ window: this.window });
      const last = this.points.length ? this.points[this.points.length - 1].t : null;
      if (last !== null) params.set("since", last);
      const response = await fetch(this.url + "?" + params, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error("metrics API answered " + response.status);
      const data = await response.json();
      this.meta = data;
      this.points.push(...data.points);
      const start = data.now - WINDOW_SECONDS[this.window];
      while (this.points.length && this.points[0].t < start) this.points.shift();
      return data;
    }
  }

  function lineChart(canvasId, options) {
    const canvas = document.getElementById(canvasId);
    if (!canvas) return null;
    return new Chart(canvas, {
      type: "line",
      data: { datasets: [] },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        parsing: false,
        normalized: true,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        elements: { point: { radius: 0 }, line: { borderWidth: 1.5, tension: 0 } },
        scales: {
          x: { type: "linear", ticks: { callback: clock, maxTicksLimit: 7 } },
          y: {
            beginAtZero: true,
            suggestedMax: options.suggestedMax,
            max: options.max,
            // Whole steps: "0.1 bit/s" or "0.2 connections" are no reading of anything.
            ticks: { callback: options.format || ((v) => number(v)), precision: 0 },
          },
        },
        plugins: {
          legend: { display: options.legend !== false, labels: { boxWidth: 12 } },
          tooltip: {
            callbacks: {
              title: (items) => (items.length ? clock(items[0].parsed.x) : ""),
              label: (item) => item.dataset.label + ": " + (options.format || number)(item.parsed.y),
            },
          },
        },
      },
    });
  }

  /* A chart with nothing to show says so in words over an empty plot (no axis of made-up ticks):
   * "No traffic yet" rather than a flat line on a 0-1 scale. */
  function emptyState(chart, empty, message) {
    const figure = chart.canvas.closest("figure");
    let note = figure.querySelector(".chart-empty");
    if (!note) {
      note = document.createElement("p");
      note.className = "chart-empty";
      figure.appendChild(note);
    }
    note.textContent = message;
    note.hidden = !empty;
    figure.classList.toggle("is-empty", empty);
    chart.options.scales.y.ticks.display = !empty;
    chart.options.scales.y.grid = Object.assign(chart.options.scales.y.grid || {}, { display: !empty });
  }

  /* datasets: [{label, value(point) -> number|null|undefined, sparse?: true, dash?, color?, stepped?}]
   * A value of undefined means "not measured at this point" (e.g. no census): sparse datasets skip it,
   * a gap point is always null. */
  function draw(chart, series, datasets, empty) {
    if (!chart || !series.meta) return;
    const now = series.meta.now * 1000;
    // The whole window, or from where the data starts when it is younger than the window: a farm's
    // charts begin when it was created (window_start), never before.
    const first = series.points.length ? series.points[0].t * 1000 - 5000 * series.meta.step : -Infinity;
    const start = series.meta.window_start ? series.meta.window_start * 1000 : -Infinity;
    chart.options.scales.x.min = Math.max(now - WINDOW_SECONDS[series.window] * 1000, first, start);
    chart.options.scales.x.max = now;
    chart.data.datasets = datasets.map((d, i) => {
      const data = [];
      for (const p of series.points) {
        if (p.gap) { data.push({ x: p.t * 1000, y: null }); continue; }
        const y = d.value(p);
        if (y === undefined && d.sparse) continue;
        data.push({ x: p.t * 1000, y: y === undefined ? null : y });
      }
      const color = d.color || COLORS[i % COLORS.length];
      return {
        label: d.label, data, borderColor: color, backgroundColor: color, spanGaps: false,
        borderDash: d.dash || [], stepped: d.stepped || false,
      };
    });
    if (empty) {
      const moved = chart.data.datasets.some((d) => d.data.some((p) => p.y !== null && p.y > 0));
      emptyState(chart, !moved, empty);
    }
    chart.update("none");
  }

  /* Each backend's state over time as bars from the recorded history (audit trail and health events):
   * one row per backend, a bar per period, coloured by what it did with new connections. */
  const STATUS_COLORS = { serving: "#16a34a", draining: "#d97706", down: "#dc2626", disabled: "#6b7280" };
  function timelineChart(canvasId) {
    const canvas = document.getElementById(canvasId);
    if (!canvas) return null;
    return new Chart(canvas, {
      type: "bar",
      data: { labels: [], datasets: [] },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, indexAxis: "y",
        datasets: { bar: { grouped: false, barPercentage: 0.7, categoryPercentage: 0.9 } },
        scales: {
          x: { type: "linear", ticks: { callback: clock, maxTicksLimit: 7 } },
          y: { type: "category", ticks: { autoSkip: false } },
        },
        plugins: {
          legend: { labels: { boxWidth: 12 } },
          tooltip: {
            callbacks: {
              title: (items) => (items.length ? items[0].label : ""),
              label: (item) => {
                const seg = item.raw.segment;
                return seg.status + " (state " + seg.state + ", health " + seg.health + (seg.reason ? ": " + seg.reason : "")
                  + ") " + clock(seg.from * 1000) + "–" + clock(seg.to * 1000);
              },
            },
          },
        },
      },
    });
  }
  function drawTimeline(chart, series) {
    if (!chart || !series.meta) return;
    const meta = series.meta;
    const history = meta.history || [];
    const now = meta.now * 1000;
    chart.options.scales.x.min = Math.max(now - WINDOW_SECONDS[series.window] * 1000, (meta.window_start || 0) * 1000);
    chart.options.scales.x.max = now;
    const label = (b) => b.address + (b.deleted ? " (removed)" : "");
    chart.data.labels = history.map(label);
    chart.data.datasets = Object.keys(STATUS_COLORS).map((status) => ({
      label: status,
      backgroundColor: STATUS_COLORS[status],
      borderWidth: 0,
      data: history.flatMap((b) => b.segments.filter((s) => s.status === status)
        .map((s) => ({ x: [s.from * 1000, s.to * 1000], y: label(b), segment: s }))),
    }));
    const figure = chart.canvas.closest("figure");
    if (figure) figure.style.height = Math.max(140, 70 + 34 * history.length) + "px";
    emptyState(chart, history.length === 0, "No backends yet.");
    chart.update("none");
  }

  function freshness(series, error) {
    const el = document.getElementById("freshness");
    if (!el) return;
    const meta = series.meta;
    if (error && !meta) {
      el.textContent = "Metrics unavailable: " + error.message;
      el.className = "freshness stale";
      return;
    }
    if (!meta || meta.last_sample === null) {
      el.textContent = "No data yet: is the collector running?";
      el.className = "freshness stale";
    } else if (meta.stale || error) {
      const age = meta.age + (error ? (Date.now() / 1000 - meta.now) : 0);
      el.textContent = "Stale: no data for " + ago(age) + (error ? " (" + error.message + ")" : "");
      el.className = "freshness stale";
    } else {
      el.textContent = "Live · updated " + clock(meta.last_sample * 1000);
      el.className = "freshness live";
    }
  }

  function windowButtons(onChange) {
    document.querySelectorAll(".windows button").forEach((button) => {
      button.addEventListener("click", () => {
        document.querySelectorAll(".windows button").forEach((b) => b.classList.remove("active"));
        button.classList.add("active");
        onChange(button.dataset.window);
      });
    });
  }

  function loop(intervalSeconds, tick) {
    let running = false;
    const run = async () => {
      if (running) return;
      running = true;
      try { await tick(); } finally { running = false; }
    };
    run();
    return setInterval(run, Math.max(intervalSeconds, 1) * 1000);
  }

  function latestPoint(series) {
    for (let i = series.points.length - 1; i >= 0; i--) if (!series.points[i].gap) return series.points[i];
    return null;
  }

  /* ---------------------------------------------------------------- overview */

  function overview(config) {
    const series = new LiveSeries(config.seriesUrl, config.window);
    const charts = {
      conns: lineChart("chart-conns", { legend: false }),
      throughput: lineChart("chart-throughput", { format: (v) => bits(v / 8) }),
      cpu: lineChart("chart-cpu", { max: 100, format: (v) => number(v) + " %" }),
      conntrack: lineChart("chart-conntrack", {}),
    };
    windowButtons((w) => { series.setWindow(w); tick(); });

    function drawAll() {
      const none = series.meta && series.meta.last_sample === null ? "No data yet: is the collector running?" : null;
      draw(charts.conns, series, [{ label: "new connections/s", value: (p) => p.new_conns }], none || "No connections yet.");
      draw(charts.throughput, series, [
        { label: "in (client → backend)", value: (p) => (p.bytes_in == null ? p.bytes_in : p.bytes_in * 8) },
        { label: "out (backend → client)", value: (p) => (p.bytes_out == null ? p.bytes_out : p.bytes_out * 8) },
      ], none || "No traffic yet.");
      const cores = Math.max(0, ...series.points.filter((p) => p.cpu).map((p) => p.cpu.length));
      draw(charts.cpu, series, Array.from({ length: cores }, (_, i) => ({
        label: "cpu" + i, value: (p) => (p.cpu ? p.cpu[i] : undefined),
      })));
      draw(charts.conntrack, series, [
        { label: "used", value: (p) => p.conntrack_count },
        { label: "maximum", value: (p) => p.conntrack_max, dash: [6, 4] },
        { label: "warning", value: (p) => (p.conntrack_max == null ? p.conntrack_max : p.conntrack_max * config.conntrackWarn), dash: [2, 3], color: "#d97706" },
      ]);
    }

    async function summary() {
      const response = await fetch(config.summaryUrl, { credentials: "same-origin" });
      if (!response.ok) throw new Error("metrics API answered " + response.status);
      const data = await response.json();
      const s = data.system || {};
      text("card-conns", number(s.new_conns) + " /s");
      text("card-in", bits(s.bytes_in));
      text("card-out", bits(s.bytes_out));
      text("card-active", s.active_conns === undefined ? "–" : number(s.active_conns, 0));
      if (s.conntrack_count != null && s.conntrack_max) {
        const share = (100 * s.conntrack_count) / s.conntrack_max;
        text("card-conntrack", number(s.conntrack_count, 0) + " / " + number(s.conntrack_max, 0) + " (" + share.toFixed(1) + " %)");
      }
      document.getElementById("card-conntrack-box").classList.toggle("warn", !!data.conntrack_warning);
      const warning = document.getElementById("conntrack-warning");
      warning.hidden = !data.conntrack_warning;
      warning.textContent = data.conntrack_warning
        ? "Conntrack table above " + Math.round(config.conntrackWarn * 100) + " % of its maximum: new connections will soon be dropped."
        : "";
      const healthd = data.healthd || { state: "unknown", detail: "" };
      text("card-healthd", healthd.state.replace("_", " "));
      document.getElementById("card-healthd-box").classList.toggle("warn", healthd.state !== "running");
      const healthdWarning = document.getElementById("healthd-warning");
      healthdWarning.hidden = healthd.state === "running";
      healthdWarning.textContent = healthd.state === "running" ? "" : "Health checking " + healthd.state.replace("_", " ") + ": " + healthd.detail + ".";
      text("card-collector", s.collector_cpu_ms == null ? "–"
        : s.collector_cpu_ms + " ms CPU/sample · census every " + s.census_interval + " s");
      farmRows(data.farms);
      linkRows(s.links || {});
    }

    function linkRows(links) {
      const sum = (a, b) => (a == null && b == null ? null : (a || 0) + (b || 0));
      const rows = Object.keys(links).sort().map((name) => {
        const l = links[name];
        const tr = document.createElement("tr");
        for (const c of [name, bits(l.rx_bytes), bits(l.tx_bytes), number(l.rx_packets), number(l.tx_packets),
          number(sum(l.rx_errors, l.tx_errors)), number(sum(l.rx_dropped, l.tx_dropped))]) {
          const td = document.createElement("td");
          td.textContent = c;
          tr.appendChild(td);
        }
        return tr;
      });
      document.getElementById("link-rows").replaceChildren(...rows);
    }

    let showAll = false;
    const toggle = document.getElementById("farm-toggle");
    toggle.addEventListener("click", () => { showAll = !showAll; tick(); });

    /* The busiest farms first; only the top ones unless asked (a 1,000-row table every 2 s is no overview). */
    function farmRows(farms) {
      const body = document.getElementById("farm-rows");
      const traffic = (f) => (f.bytes_in || 0) + (f.bytes_out || 0);
      const sorted = [...farms].sort((a, b) => traffic(b) - traffic(a) || (b.new_conns || 0) - (a.new_conns || 0)
        || (b.active_conns || 0) - (a.active_conns || 0) || a.name.localeCompare(b.name));
      const shown = showAll ? sorted : sorted.slice(0, config.topFarms);
      toggle.hidden = farms.length <= config.topFarms;
      toggle.textContent = showAll ? "Show the busiest " + config.topFarms : "Show all " + farms.length + " farms";
      const rows = shown.map((f) => {
        const tr = document.createElement("tr");
        const link = document.createElement("a");
        link.href = config.farmUrl.replace("/0/", "/" + f.id + "/");
        link.textContent = f.name;
        let name = link;
        if (f.error) {  // the collector sampled but could not read this farm's figures: say why, beside its name
          name = document.createElement("span");
          const why = document.createElement("p");
          why.className = "kernel-error farm-metrics-error";
          why.textContent = f.error;
          name.append(link, why);
        }
        const cells = [name, f.vip, f.mode, bits(f.bytes_in), bits(f.bytes_out), number(f.new_conns),
          f.active_conns === undefined ? "–" : number(f.active_conns, 0),
          f.snat_ports === undefined || f.mode !== "snat" ? "–" : number(f.snat_ports, 0) + " (" + number(f.snat_port_use, 1) + " %)"];
        for (const c of cells) {
          const td = document.createElement("td");
          if (c instanceof Node) td.appendChild(c); else td.textContent = c;
          tr.appendChild(td);
        }
        return tr;
      });
      if (!rows.length) {
        const tr = document.createElement("tr");
        tr.innerHTML = '<td colspan="8">No farms.</td>';
        rows.push(tr);
      }
      body.replaceChildren(...rows);
    }

    async function tick() {
      const [polled, summarised] = await Promise.allSettled([series.poll(), summary()]);
      const error = polled.status === "rejected" ? polled.reason
        : summarised.status === "rejected" ? summarised.reason : null;
      drawAll();
      freshness(series, error);
    }
    loop(config.interval, tick);
  }

  /* ---------------------------------------------------------------- farm */

  function farm(config) {
    const series = new LiveSeries(config.seriesUrl, config.window);
    const charts = {
      throughput: lineChart("chart-throughput", { format: (v) => bits(v / 8) }),
      conns: lineChart("chart-conns", {}),
      active: lineChart("chart-active", {}),
      traffic: lineChart("chart-backend-traffic", { format: (v) => bits(v / 8) }),
      states: timelineChart("chart-states"),
    };
    // HTTP farms (HAProxy's statistics): present only on their page.
    const http = document.getElementById("chart-http-classes") ? {
      classes: lineChart("chart-http-classes", {}),
      queue: lineChart("chart-http-queue", {}),
      sessions: lineChart("chart-http-sessions", {}),
    } : null;
    windowButtons((w) => { series.setWindow(w); tick(); });

    function drawHttp(backends, none) {
      draw(http.classes, series, ["2xx", "3xx", "4xx", "5xx"].map((c) => ({
        label: c, value: (p) => p["responses_" + c],
      })), none || "No requests yet.");
      draw(http.queue, series, [
        { label: "queue", value: (p) => p.queue },
        { label: "response time ms", value: (p) => p.latency_ms },
      ], none || "No requests yet.");
      const last = (latestPoint(series) || {}).backends || {};
      draw(http.sessions, series, backends.map((b) => {
        const capacity = (last[b.id] || {}).capacity;
        return {
          label: b.address + (capacity ? " (capacity " + capacity + ")" : ""),
          value: (p) => ((p.backends || {})[b.id] || {}).sessions,
        };
      }), none || (backends.length ? "No sessions yet." : "No backends yet."));
    }

    function drawAll() {
      const meta = series.meta;
      if (!meta) return;
      const backends = meta.backends;
      const b8 = (v) => (v == null ? v : v * 8);
      const none = meta.last_sample === null ? "No data yet: is the collector running?" : null;
      const uncounted = meta.bytes_counted === false
        ? "Bytes not counted: this farm's \u201cCount bytes\u201d setting is off (its connections are counted)." : null;
      draw(charts.throughput, series, [
        { label: "in (client → backend)", value: (p) => b8(p.bytes_in) },
        { label: "out (backend → client)", value: (p) => b8(p.bytes_out) },
      ], none || uncounted || "No traffic yet.");
      draw(charts.conns, series, [
        { label: "farm", value: (p) => p.new_conns, color: "#111827" },
        ...backends.map((b) => ({ label: b.address, value: (p) => (p.backends[b.id] || {}).new_conns })),
      ], none || "No connections yet.");
      draw(charts.active, series, backends.map((b) => ({
        label: b.address, sparse: true,
        value: (p) => ("active_conns" in p ? ((p.backends[b.id] || {}).active_conns ?? null) : undefined),
      })), none || (backends.length ? "No open connections." : "No backends yet."));
      draw(charts.traffic, series, backends.map((b) => ({
        label: b.address, value: (p) => b8((p.backends[b.id] || {}).bytes),
      })), none || uncounted || (backends.length ? "No traffic yet." : "No backends yet."));
      drawTimeline(charts.states, series);
      if (http) drawHttp(backends, none);
      const last = latestPoint(series) || {};
      text("card-in", uncounted ? "not counted" : bits(last.bytes_in));
      text("card-out", uncounted ? "not counted" : bits(last.bytes_out));
      text("card-conns", number(last.new_conns) + " /s");
      const census = [...series.points].reverse().find((p) => !p.gap && "active_conns" in p) || {};
      text("card-active", census.active_conns === undefined ? "–" : number(census.active_conns, 0));
      text("card-snat", meta.farm.mode !== "snat" ? "not SNAT" : census.snat_ports === undefined ? "–"
        : number(census.snat_ports, 0) + " (" + number(census.snat_port_use, 1) + " %)");
      text("census-note", meta.census_interval ? "(conntrack census every " + meta.census_interval + " s)" : "");
    }

    async function tick() {
      let error = null;
      try { await series.poll(); } catch (e) { error = e; }
      if (series.meta && series.meta.measured === false) {
        const el = document.getElementById("freshness");
        el.textContent = "Not measured: DSR and stateless farms bypass conntrack and lbweb's traffic counters";
        el.className = "freshness stale";
        return;
      }
      drawAll();
      freshness(series, error);
    }
    loop(config.interval, tick);
  }

  window.LBDash = { overview, farm, bits, LiveSeries };
})();
