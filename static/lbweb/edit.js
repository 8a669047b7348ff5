/* Edit pages. A static file rather than an inline script: the Content-Security-Policy allows none.
 *
 * - Fields that mean nothing for the values chosen (SNAT source for a DNAT farm, hash fields without the
 *   hash scheduler, HTTP fields of a TCP check) are hidden as the choices change: each field's wrapper
 *   carries its condition in data-when ({"mode": ["snat"], ...}: every named control must hold one of the
 *   values). A field with an error always shows. Without JavaScript every field shows.
 * - After "Preview the kernel change" the preview gets the focus; after a refused save, the first field
 *   in error; a keyboard or screen-reader user lands where the page has something to say.
 */
(function () {
  "use strict";
  const form = document.querySelector("form.edit");

  function valueOf(name) {
    const controls = form.querySelectorAll(`[name="${name}"]`);
    if (!controls.length) return undefined;
    const first = controls[0];
    if (first.type === "checkbox" && controls.length === 1) return first.checked;
    if (first.type === "radio") {
      const chosen = Array.from(controls).find((c) => c.checked);
      return chosen ? chosen.value : "";
    }
    return first.value;
  }

  function update() {
    form.querySelectorAll("[data-when]").forEach((wrapper) => {
      const when = JSON.parse(wrapper.dataset.when);
      const applies = Object.entries(when).every(([name, allowed]) => {
        const value = valueOf(name);
        return value === undefined || allowed.includes(value);
      });
      wrapper.hidden = !applies && !wrapper.classList.contains("has-errors");
    });
    form.querySelectorAll("fieldset").forEach((fieldset) => {
      const fields = fieldset.querySelectorAll(".field");
      fieldset.hidden = fields.length > 0 && Array.from(fields).every((f) => f.hidden);
    });
  }

  if (form && form.querySelector("[data-when]")) {
    form.addEventListener("change", update);
    update();
  }
  const preview = document.getElementById("preview");
  const invalid = form && form.querySelector(".has-errors input, .has-errors select, .has-errors textarea");
  const first = form && form.querySelector("[autofocus]");
  if (preview) preview.focus();
  else if (invalid) invalid.focus();
  else if (first && document.activeElement === document.body) first.focus();  // autofocus, also after a late load
})();
