// metalform status pages: refresh the live part of the page in place while the tab is visible.
// The server answers from one snapshot shared by every viewer, and 304 when nothing changed.
(function () {
  "use strict";
  var seconds = Number(document.body.getAttribute("data-refresh") || "0");
  document.body.classList.add("live");
  if (!(seconds > 0)) {
    return;
  }
  function refresh() {
    if (document.hidden) {
      return;
    }
    // A relative URL: the page may have been opened with credentials in its address.
    fetch(location.pathname + location.search, {
      cache: "no-cache",
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(String(response.status));
        }
        return response.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html");
        ["live", "as-of"].forEach(function (id) {
          var now = document.getElementById(id);
          var next = fresh.getElementById(id);
          if (now && next) {
            now.replaceWith(document.importNode(next, true));
          }
        });
        document.body.classList.remove("stale");
      })
      .catch(function () {
        document.body.classList.add("stale");
      });
  }
  setInterval(refresh, seconds * 1000);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      refresh();
    }
  });
})();
