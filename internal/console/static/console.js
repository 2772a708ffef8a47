// Live updates: the page listens to its event stream (server-sent events)
// and, when told that what it shows changed, fetches its main part again
// and swaps it in: the parts marked data-live-part when the page has some
// (so a form being filled in is left alone), else the whole main part.
// Nothing polls: without a change, nothing is fetched. A hidden tab closes
// its stream and catches up when shown again.
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
  var swap = function (html) {
    // The server escaped everything in it; it is the page's own markup.
    var fresh = document.createElement("template");
    fresh.innerHTML = html;
    var parts = document.querySelectorAll("[data-live-part]");
    if (parts.length === 0) {
      document.getElementById("main").innerHTML = html;
      return;
    }
    parts.forEach(function (old) {
      var next = old.id && fresh.content.getElementById(old.id);
      if (next) {
        old.replaceWith(next);
      }
    });
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
        swap(html);
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
  var source = null;
  var open = function () {
    source = new EventSource("/live" + live);
    source.addEventListener("open", function () {
      state("live");
    });
    source.addEventListener("error", function () {
      state(source.readyState === EventSource.CLOSED ? "stopped" : "reconnecting");
    });
    source.addEventListener("changed", refresh);
  };
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      if (source) {
        source.close();
        source = null;
        state("paused");
      }
    } else if (!source) {
      open();
      refresh();
    }
  });
  open();
})();

// Forms whose payload must be JSON say so as it is typed, and cannot be
// sent until it is (the console checks it again).
(function () {
  "use strict";
  var check = function (area) {
    var form = area.form;
    var note = form.querySelector(".json-error");
    var text = area.value.trim();
    var problem = "";
    if (text !== "") {
      try {
        JSON.parse(text);
      } catch (e) {
        problem = "Not JSON: " + e.message;
      }
    }
    if (note) {
      note.textContent = problem;
      note.hidden = problem === "";
    }
    area.setAttribute("aria-invalid", problem === "" ? "false" : "true");
    form.querySelectorAll("button[type=submit]").forEach(function (b) {
      b.disabled = problem !== "";
    });
  };
  document.addEventListener("input", function (e) {
    if (e.target && e.target.matches && e.target.matches("textarea[data-json]")) {
      check(e.target);
    }
  });
  document.querySelectorAll("textarea[data-json]").forEach(check);
})();
