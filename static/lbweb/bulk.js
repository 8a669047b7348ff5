/* Bulk backend states on the farm page: a box in the header selects every backend, and the bulk buttons
 * say how many are selected. The boxes and buttons work without it (one form, checkbox per row). The
 * backend table may be replaced by live.js (a health change): everything is looked up again each time. */
(function () {
  "use strict";
  const boxes = () => Array.from(document.querySelectorAll('input[name="backend"][form="bulk-form"]'));
  function count() {
    const all = document.getElementById("bulk-all");
    const label = document.getElementById("bulk-label");
    if (!all || !label) return;
    all.hidden = false;
    const ticked = boxes().filter((b) => b.checked).length;
    label.textContent = ticked ? `With the ${ticked} selected backend${ticked === 1 ? "" : "s"}:` : "With the selected backends:";
    all.checked = ticked > 0 && ticked === boxes().length;
    all.indeterminate = ticked > 0 && ticked < boxes().length;
  }
  document.addEventListener("change", (event) => {
    if (event.target.id === "bulk-all") boxes().forEach((b) => { b.checked = event.target.checked; });
    if (event.target.id === "bulk-all" || event.target.name === "backend") count();
  });
  document.addEventListener("lbweb:backends", count);
  count();
})();
