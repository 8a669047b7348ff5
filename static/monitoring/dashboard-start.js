/* Starts the dashboard of the page from the data-* attributes of #dashboard-config.
   A static file rather than an inline script: the Content-Security-Policy allows only lbweb's own files. */
(function () {
  "use strict";
  const element = document.getElementById("dashboard-config");
  if (!element) return;
  const data = element.dataset;
  const config = { seriesUrl: data.seriesUrl, interval: Number(data.interval), window: data.window };
  if (data.page === "overview") {
    Object.assign(config, {
      summaryUrl: data.summaryUrl,
      farmUrl: data.farmUrl,
      conntrackWarn: Number(data.conntrackWarn),
      topFarms: Number(data.topFarms),
    });
    window.LBDash.overview(config);
  } else {
    window.LBDash.farm(config);
  }
})();
