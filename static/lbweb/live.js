// Live cells of the farm pages: apply status (from the farms API), the live rate (from the metrics
// summary) and, on a farm's page, each backend's open connections (from the farm's metrics series, the
// newest conntrack census), refreshed every few seconds. Without JavaScript the page still shows the
// status it was rendered with and "—" for the figures.
(function () {
  "use strict";
  const root = document.querySelector("[data-live]");
  if (!root) return;
  const ids = Array.from(document.querySelectorAll("[data-farm-id]"), (el) => el.dataset.farmId);
  if (!ids.length) return;
  const PERIOD_MS = 3000;

  function bits(bytesPerSecond) {
    const units = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s"];
    let value = bytesPerSecond * 8;
    let unit = 0;
    while (value >= 1000 && unit < units.length - 1) { value /= 1000; unit += 1; }
    return `${value.toFixed(value < 10 && unit ? 1 : 0)} ${units[unit]}`;
  }

  async function getJson(url) {
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`${url}: ${response.status}`);
    return response.json();
  }

  function showStatus(farm) {
    const cell = document.querySelector(`[data-status-for="${farm.id}"]`);
    if (!cell) return;
    const status = farm.apply_status.status;
    cell.className = cell.className.replace(/status-\w+/, "") + ` status-${status}`;
    cell.textContent = status;
    if (status === "failed" && farm.apply_status.error) {
      const error = document.createElement("span");
      error.className = "kernel-error";
      error.textContent = farm.apply_status.error;
      cell.appendChild(error);
    }
  }

  function showRates(summary) {
    const rows = new Map((summary.farms || []).map((row) => [String(row.id), row]));
    for (const id of ids) {
      const cell = document.querySelector(`[data-rate-for="${id}"]`);
      if (!cell) continue;
      const row = rows.get(id);
      if (summary.stale || !row || row.new_conns === undefined || row.new_conns === null) {
        cell.textContent = "—";
        continue;
      }
      const inBytes = row.bytes_in == null ? null : row.bytes_in;
      cell.textContent = `${row.new_conns.toFixed(1)} conn/s` + (inBytes === null ? "" : ` · ${bits(inBytes)}`);
    }
  }

  function showConnections(series) {
    const cells = document.querySelectorAll("[data-conns-for]");
    let census = null;
    for (const point of (series && series.measured && !series.stale ? series.points : []).slice().reverse()) {
      const backends = Object.values(point.backends || {});
      if (backends.some((b) => b.active_conns !== undefined && b.active_conns !== null)) { census = point; break; }
    }
    cells.forEach((cell) => {
      const backend = census && census.backends[cell.dataset.connsFor];
      const value = backend ? backend.active_conns : null;
      cell.textContent = value === null || value === undefined ? "—" : String(Math.round(value));
    });
  }

  // On a farm's page: when a backend's health or state is no longer what the page shows (healthd took it
  // down, another operator drained it), the backend table and the farm's traffic line are fetched again as
  // the server words them (shares, "no: down", "rejects"), never guessed here. Boxes ticked stay ticked.
  let reloading = false;
  async function followBackends(farm) {
    const table = document.getElementById("backend-table");
    if (!table || reloading || !farm.backends) return;
    const rows = table.querySelectorAll("tbody tr[id^='backend-']");
    const shown = new Map(Array.from(rows, (row) => [row.id, row]));
    const moved = farm.backends.length !== shown.size || farm.backends.some((b) => {
      const row = shown.get(`backend-${b.id}`);
      if (!row) return true;
      const health = row.querySelector("[data-health]");
      const state = row.querySelector("[data-state]");
      return (health && health.dataset.health !== b.health) || (state && state.dataset.state !== b.state);
    });
    if (!moved) return;
    reloading = true;
    try {
      const response = await fetch(window.location.pathname, { credentials: "same-origin" });
      if (!response.ok) return;
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      const ticked = new Set(Array.from(table.querySelectorAll("input[name=backend]:checked"), (box) => box.value));
      for (const id of ["backend-table", "farm-traffic", "healthd-status"]) {
        const now = document.getElementById(id);
        const then = fresh.getElementById(id);
        if (now && then) now.replaceWith(document.importNode(then, true));
      }
      document.querySelectorAll("#backend-table input[name=backend]").forEach((box) => {
        box.checked = ticked.has(box.value);
      });
      document.dispatchEvent(new Event("lbweb:backends"));
    } catch (error) { /* keep what the page shows */ } finally { reloading = false; }
  }

  async function refresh() {
    try {
      const farms = await getJson(`${root.dataset.farmsApi}?id=${ids.join(",")}&limit=${ids.length}`);
      (farms.results || farms).forEach(showStatus);
      if (root.dataset.seriesApi) (farms.results || farms).forEach(followBackends);
    } catch (error) { /* keep what the page shows */ }
    let summary = null;
    try {
      summary = await getJson(root.dataset.metricsApi);
      showRates(summary);
    } catch (error) {
      ids.forEach((id) => {
        const cell = document.querySelector(`[data-rate-for="${id}"]`);
        if (cell) cell.textContent = "—";
      });
    }
    if (root.dataset.seriesApi) {
      let series = null;
      try {
        const since = summary ? `&since=${summary.now - 30}` : "";
        series = await getJson(`${root.dataset.seriesApi}?window=5m${since}`);
      } catch (error) { /* no metrics: dashes */ }
      showConnections(series);
    }
    window.setTimeout(refresh, PERIOD_MS);
  }
  refresh();
})();
