// Orbit Commons pages: live updates and relative times. Every page works without
// this file; with it, the orbit and task pages follow the orbit's change stream
// (GET /api/v1/orbits/{orbit}/events, Server-Sent Events) and, on a change,
// re-fetch the page they are on and swap in its `data-live` sections.
(function () {
  "use strict";

  // Relative times: every <time data-rel> shows "<prefix>4 min ago" / "in 4 min".
  function words(ms) {
    var future = ms > 0;
    var s = Math.abs(ms) / 1000;
    var amount;
    if (s < 45) {
      return future ? "in a few seconds" : "just now";
    } else if (s < 90 * 60) {
      amount = Math.round(s / 60) + " min";
    } else if (s < 36 * 3600) {
      amount = Math.round(s / 3600) + " h";
    } else {
      var days = Math.round(s / 86400);
      amount = days + (days === 1 ? " day" : " days");
    }
    return future ? "in " + amount : amount + " ago";
  }

  // The words are also the server's (`layout::relative`, for the page as sent): a
  // browser test holds both to tests/fixtures/relative_times.json through this.
  window.orbitRelativeWords = words;

  function refreshTimes() {
    var now = Date.now();
    var times = document.querySelectorAll("time[data-rel]");
    for (var i = 0; i < times.length; i++) {
      var t = times[i];
      var at = Date.parse(t.getAttribute("datetime"));
      if (!isNaN(at)) {
        t.textContent = t.getAttribute("data-rel") + words(at - now);
      }
    }
  }

  // Every kind of change (contract section 4): SSE delivers named events only to
  // listeners of that name.
  var KINDS = [
    "orbit.created", "member.added", "member.updated", "member.removed",
    "problem.created", "problem.updated", "contribution.created",
    "contribution.revised", "assessment.created", "artifact.created",
    "memory.created", "task.created", "task.completed", "task.cancelled",
    "lease.acquired", "lease.renewed", "lease.released", "checkpoint.created",
    "handoff.offered", "handoff.accepted", "handoff.declined", "handoff.withdrawn"
  ];

  function start() {
    refreshTimes();
    setInterval(refreshTimes, 15000);
    var main = document.getElementById("main");
    var orbit = main && main.getAttribute("data-live-orbit");
    if (!orbit || !window.EventSource || !window.fetch || !window.DOMParser) {
      return;
    }
    var task = main.getAttribute("data-live-task");
    var after = main.getAttribute("data-live-after") || "0";
    var status = document.getElementById("live-status");
    function say(text, state) {
      if (status) {
        status.textContent = text;
        status.setAttribute("data-state", state);
      }
    }

    var busy = false;
    var again = false;
    var timer = null;

    function swap(html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      var live = document.querySelectorAll("[data-live]");
      for (var i = 0; i < live.length; i++) {
        var fresh = doc.getElementById(live[i].id);
        if (fresh) {
          live[i].replaceWith(document.importNode(fresh, true));
        }
      }
      var rev = doc.getElementById("orbit-revision");
      var mine = document.getElementById("orbit-revision");
      if (rev && mine) {
        mine.textContent = rev.textContent;
      }
      refreshTimes();
    }

    function reload() {
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      fetch(window.location.href, { headers: { Accept: "text/html" }, credentials: "same-origin" })
        .then(function (r) {
          if (!r.ok) {
            throw new Error("HTTP " + r.status);
          }
          return r.text();
        })
        .then(swap)
        .catch(function () {
          say("Could not refresh; reload the page to see new activity.", "error");
        })
        .then(function () {
          busy = false;
          if (again) {
            again = false;
            reload();
          }
        });
    }

    function changed(event) {
      if (event.lastEventId) {
        after = event.lastEventId;
      }
      if (task) {
        try {
          var change = JSON.parse(event.data);
          // A member's removal names no task but ends their leases and
          // supersedes their handoffs, wherever they are.
          if (String(change.task_id) !== task && change.kind !== "member.removed") {
            return;
          }
        } catch (e) {
          return;
        }
      }
      // A burst of changes costs one re-fetch.
      if (timer === null) {
        timer = setTimeout(function () {
          timer = null;
          reload();
        }, 150);
      }
    }

    // EventSource reconnects by itself after a dropped stream (with Last-Event-ID),
    // but not after a refusal (429 past the per-client cap; an error status): then
    // it is closed, and a new one is opened later, from the last change seen,
    // waiting longer each time.
    var delay = 2000;
    function connect() {
      var source = new EventSource(
        "/api/v1/orbits/" + encodeURIComponent(orbit) + "/events?after=" + encodeURIComponent(after)
      );
      for (var k = 0; k < KINDS.length; k++) {
        source.addEventListener(KINDS[k], changed);
      }
      source.onopen = function () {
        delay = 2000;
        say("Live: new activity appears here as it happens.", "live");
      };
      source.onerror = function () {
        say("Reconnecting to live updates…", "reconnecting");
        if (source.readyState === EventSource.CLOSED) {
          setTimeout(connect, delay);
          delay = Math.min(delay * 2, 30000);
        }
      };
    }
    connect();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
