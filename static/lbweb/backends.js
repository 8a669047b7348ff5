/* The farm page's backend editor: "Add another" appends an empty row (Django's formset: the template row
 * with its index, TOTAL_FORMS one more) and puts the cursor in its address. Without JavaScript the editor
 * still has one empty row to fill. After a preview or a refused save, the focus goes to what changed. */
(function () {
  "use strict";
  const form = document.getElementById("backend-editor");
  if (!form) return;
  const total = form.querySelector('input[name="backends-TOTAL_FORMS"]');
  const template = document.getElementById("backend-row-template");
  const rows = document.getElementById("backend-rows");
  const add = document.getElementById("add-backend");
  add.hidden = false;
  add.addEventListener("click", () => {
    const index = Number(total.value);
    const html = template.innerHTML.replace(/__prefix__/g, String(index));
    const body = document.createElement("tbody");
    body.innerHTML = html;
    const row = body.firstElementChild;
    rows.appendChild(row);
    total.value = String(index + 1);
    const address = row.querySelector('input[name$="-address"]');
    if (address) address.focus();
  });
  const preview = document.getElementById("preview");
  const invalid = form.querySelector(".has-errors input, .has-errors select");
  if (preview) preview.focus();
  else if (invalid) invalid.focus();
})();
