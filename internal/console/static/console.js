// Live updates: the page listens to its event stream (server-sent events)
// and, when told that what it shows changed, fetches its main part again
// and swaps it in. Nothing polls: without a change, nothing is fetched.
(function () {
  "use strict";
  var live = document.body.getAttribute("data-live");
  if (!live || !window.EventSource) {
    return;
  }
  var badge = document.getElementById("live");
  var state = function (s) {
    if (badge) {
      badge.setAttribute("data-state", s);
    }
  };
  var busy = false;
  var again = false;
  var refresh = function () {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    fetch(window.location.href, { headers: { "X-Console-Fragment": "1" }, cache: "no-store" })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        // The server escaped everything in it; it is the page's own markup.
        document.getElementById("main").innerHTML = html;
        document.body.setAttribute("data-updated", String(Date.now()));
        state("live");
      })
      .catch(function () {
        state("error");
      })
      .finally(function () {
        busy = false;
        if (again) {
          again = false;
          refresh();
        }
      });
  };
  var source = new EventSource("/live" + live);
  source.addEventListener("open", function () {
    state("live");
  });
  source.addEventListener("error", function () {
    state("reconnecting");
  });
  source.addEventListener("changed", refresh);
})();
