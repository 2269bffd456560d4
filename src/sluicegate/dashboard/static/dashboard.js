/* sluicegate dashboard: live refresh and confirmations. No inline script anywhere:
   the Content-Security-Policy allows only this file.

   Every 2 s the page asks its own URL again with the X-Sluicegate-Live header; the
   server answers with the main region only, and each element marked data-live is
   replaced by the one with the same id. A region that holds the focus, or an open
   <details> the user toggled, is left alone; nothing is fetched while the tab is
   hidden. The Live button pauses and resumes (remembered per browser). */
(function () {
  "use strict";
  var INTERVAL = 2000;
  var KEY = "sluicegate.live";
  var toggle = document.getElementById("live-toggle");
  var status = document.getElementById("live-status");
  var timer = null;
  var failures = 0;

  function enabled() {
    try { return window.localStorage.getItem(KEY) !== "off"; } catch (e) { return true; }
  }

  function remember(on) {
    try { window.localStorage.setItem(KEY, on ? "on" : "off"); } catch (e) { /* private mode */ }
  }

  function say(text, kind) {
    if (!status) { return; }
    status.textContent = text;
    status.dataset.kind = kind || "";
  }

  function holdsFocus(region) {
    var active = document.activeElement;
    return active && active !== document.body && region.contains(active);
  }

  function openDetails(region) {
    var open = {};
    region.querySelectorAll("details[data-testid]").forEach(function (d, i) {
      open[i] = d.open;
    });
    return open;
  }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    document.querySelectorAll("[data-live][id]").forEach(function (region) {
      var fresh = doc.getElementById(region.id);
      if (!fresh || holdsFocus(region)) { return; }
      var before = openDetails(region);
      var imported = document.importNode(fresh, true);
      imported.querySelectorAll("details[data-testid]").forEach(function (d, i) {
        if (i in before) { d.open = before[i]; }
      });
      region.replaceWith(imported);
    });
  }

  function tick() {
    if (document.hidden || !enabled()) { return; }
    var request = new XMLHttpRequest();
    request.open("GET", window.location.href);
    request.setRequestHeader("X-Sluicegate-Live", "1");
    request.timeout = 10000;
    request.onload = function () {
      if (request.status === 200) {
        failures = 0;
        swap(request.responseText);
        say("updated " + new Date().toLocaleTimeString(), "ok");
      } else if (request.status === 401) {
        say("signed out: reload", "error");
        stop();
      } else {
        failures += 1;
        say("refresh failed (" + request.status + ")", "error");
      }
    };
    request.onerror = request.ontimeout = function () {
      failures += 1;
      say("disconnected: retrying", "error");
    };
    request.send();
  }

  function start() {
    if (timer === null) { timer = window.setInterval(tick, INTERVAL); }
    if (toggle) { toggle.setAttribute("aria-pressed", "true"); toggle.textContent = "Live"; }
    say("live", "ok");
  }

  function stop() {
    if (timer !== null) { window.clearInterval(timer); timer = null; }
    if (toggle) { toggle.setAttribute("aria-pressed", "false"); toggle.textContent = "Paused"; }
  }

  if (toggle && document.querySelector("[data-live]")) {
    toggle.hidden = false;
    toggle.addEventListener("click", function () {
      var on = !enabled();
      remember(on);
      if (on) { start(); tick(); } else { stop(); say("paused", ""); }
    });
    if (enabled()) { start(); } else { stop(); say("paused", ""); }
  }

  /* Buttons with data-confirm ask first (bulk actions, cancels). */
  document.addEventListener("submit", function (event) {
    var button = event.submitter || event.target.querySelector("[data-confirm]");
    var text = button && button.getAttribute("data-confirm");
    if (text && !window.confirm(text)) { event.preventDefault(); }
  });
}());
