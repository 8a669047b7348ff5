/* Edit pages: after "Preview the kernel change" the preview gets the focus, so a keyboard or screen-reader
   user lands on it. A static file rather than an inline script: the Content-Security-Policy allows none. */
(function () {
  "use strict";
  const preview = document.getElementById("preview");
  if (preview) preview.focus();
})();
