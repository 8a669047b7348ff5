/* Bulk backend states on the farm page: a box in the header selects every backend, and the bulk buttons
 * say how many are selected. The boxes and buttons work without it (one form, checkbox per row). */
(function () {
  "use strict";
  const all = document.getElementById("bulk-all");
  const boxes = Array.from(document.querySelectorAll('input[name="backend"][form="bulk-form"]'));
  const label = document.getElementById("bulk-label");
  if (!all || !boxes.length || !label) return;
  all.hidden = false;
  function count() {
    const n = boxes.filter((b) => b.checked).length;
    label.textContent = n ? `With the ${n} selected backend${n === 1 ? "" : "s"}:` : "With the selected backends:";
    all.checked = n === boxes.length;
    all.indeterminate = n > 0 && n < boxes.length;
  }
  all.addEventListener("change", () => { boxes.forEach((b) => { b.checked = all.checked; }); count(); });
  boxes.forEach((b) => b.addEventListener("change", count));
  count();
})();
